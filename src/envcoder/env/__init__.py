"""The grouped environment: public `reset` and `step` over `EnvState` for G groups × E environments."""

from envcoder.env.grouped import EnvState, GroupedEnv, ResetPool, StepInfo, all_finite_per_env

__all__ = ["EnvState", "GroupedEnv", "ResetPool", "StepInfo", "all_finite_per_env"]
