"""SAC for continuous actions: its settings (`config`) and the grouped learner (`learner`).

Nothing is imported here: the command line reads the settings without importing JAX."""
