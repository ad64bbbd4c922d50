"""envcoder: evaluate many RL environment-shaping candidates in one process on one GPU."""

__version__ = "0.1.0"
