"""DQN's settings (rl_games' names)."""

from __future__ import annotations

import dataclasses
from envcoder.rl.config import OffPolicySettings


@dataclasses.dataclass(frozen=True)
class DQNConfig(OffPolicySettings):
    """Settings of the per-candidate (double) DQN, for discrete actions. Every candidate trains with the same
    settings; each group has its own replay buffer on the device."""

    section_name = "DQN"

    steps_per_epoch: int = 4
    """Control steps each environment collects per iteration."""
    updates_per_epoch: int = 8
    """Gradient steps per iteration (each on `batch_size` samples of the group's own replay buffer)."""
    batch_size: int = 256
    """Samples per gradient step, per candidate."""
    replay_buffer_size: int = 50_000
    """Transitions each candidate's buffer holds (the oldest are overwritten)."""
    learning_rate: float = 1e-3
    """Adam step size."""
    gamma: float = 0.99
    """Discount."""
    epsilon: float = 1.0
    """Exploration rate at the start: the chance of a uniformly random action."""
    min_epsilon: float = 0.05
    """Exploration rate after `epsilon_decay_epochs` (falls linearly)."""
    epsilon_decay_epochs: int = 50
    """Iterations over which the exploration rate falls from `epsilon` to `min_epsilon`."""
    num_epochs_to_copy: int = 5
    """Iterations between copies of the online Q-network into the target network (when `target_tau` is 0)."""
    target_tau: float = 0.0
    """Soft target updates instead: after every gradient step, target ← tau · online + (1 − tau) · target."""
    double_dqn: bool = True
    """Choose the next action with the online network and value it with the target network."""
    max_epochs: int = 100
    """Iterations of a run (the CLI's --iterations)."""
    normalize_input: bool = False
    """Running mean/std normalization of observations, per candidate."""
    units: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the Q-network."""
