"""PPO (rl_games' continuous and discrete PPO): its settings (`config`), its loss and GAE (`losses`), its
critic trained on its own (`central_value`) and the grouped learner (`learner`).

Nothing is imported here: the command line reads the settings without importing JAX."""
