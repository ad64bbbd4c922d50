"""Every training algorithm (`--algo`): its settings class and its grouped learner."""

from __future__ import annotations

from envcoder.rl.config import ALGORITHMS
from envcoder.rl.dqn import GroupedDQN
from envcoder.rl.grouped_ppo import GroupedPPO
from envcoder.rl.learner import GroupedLearner
from envcoder.rl.sac import GroupedSAC

TRAINERS = {"ppo": GroupedPPO, "dqn": GroupedDQN, "sac": GroupedSAC}
assert set(TRAINERS) == set(ALGORITHMS)


def trainer_class(algo: str) -> type[GroupedLearner]:
    if algo not in TRAINERS:
        raise ValueError(f"unknown --algo {algo!r}; choose from {', '.join(TRAINERS)}")
    return TRAINERS[algo]
