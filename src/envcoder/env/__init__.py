"""The grouped environment: public `reset` and `step` over `EnvState` for G groups × E environments."""

from envcoder.env.grouped import GroupedEnv, all_finite_per_env
from envcoder.env.state import EnvState, ResetPool, StepInfo

__all__ = ["EnvState", "GroupedEnv", "ResetPool", "StepInfo", "all_finite_per_env"]
