"""SAC's settings (rl_games' names where it has them)."""

from __future__ import annotations

import dataclasses
from envcoder.rl.config import OffPolicySettings


@dataclasses.dataclass(frozen=True)
class SACConfig(OffPolicySettings):
    """Settings of the per-candidate SAC, for continuous actions: twin critics, automatic entropy tuning, and a
    replay buffer per candidate on the device. Many environments and several gradient steps per iteration, as in
    recent fast off-policy work on GPU simulators."""

    section_name = "SAC"

    steps_per_epoch: int = 1
    """Control steps each environment collects per iteration."""
    updates_per_epoch: int = 8
    """Gradient steps per iteration (each on `batch_size` samples of the group's own replay buffer)."""
    batch_size: int = 4096
    """Samples per gradient step, per candidate."""
    replay_buffer_size: int = 1_000_000
    """Transitions each candidate's buffer holds (the oldest are overwritten)."""
    learning_starts: int = 10
    """Iterations of uniformly random actions before the policy acts and the updates begin."""
    actor_lr: float = 3e-4
    """Adam step size of the actor."""
    critic_lr: float = 3e-4
    """Adam step size of the twin critics."""
    alpha_lr: float = 3e-4
    """Adam step size of the entropy temperature."""
    init_alpha: float = 1.0
    """Entropy temperature at the start."""
    target_entropy_scale: float = 1.0
    """The entropy target is −scale × (the candidate's action size)."""
    gamma: float = 0.99
    """Discount."""
    critic_tau: float = 0.005
    """Soft target update of the critics after every gradient step."""
    max_epochs: int = 1000
    """Iterations of a run (the CLI's --iterations)."""
    normalize_input: bool = True
    """Running mean/std normalization of observations, per candidate."""
    units: tuple[int, ...] = (256, 256)
    """Hidden layer widths of the actor and of each critic."""

    @property
    def learning_rate(self) -> float:
        """The actor's step size (logged as the learning rate)."""
        return self.actor_lr
