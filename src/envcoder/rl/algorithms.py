"""Every training algorithm (`--algo`): its settings class and its grouped trainer."""

from __future__ import annotations

from envcoder.rl.config import ALGORITHMS
from envcoder.rl.dqn import GroupedDQN
from envcoder.rl.sac import GroupedSAC
from envcoder.rl.trainer import GroupedTrainer

TRAINERS = {"ppo": GroupedTrainer, "dqn": GroupedDQN, "sac": GroupedSAC}
assert set(TRAINERS) == set(ALGORITHMS)


def trainer_class(algo: str) -> type[GroupedTrainer]:
    if algo not in TRAINERS:
        raise ValueError(f"unknown --algo {algo!r}; choose from {', '.join(TRAINERS)}")
    return TRAINERS[algo]
