"""PPO settings. Names and meanings follow rl_games, so IsaacGymEnvs configs carry over."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """Settings of the per-candidate PPO. Every candidate trains with the same settings."""

    horizon_length: int = 16
    """Control steps each environment collects per iteration."""
    minibatch_size: int | None = None
    """Samples per minibatch *per candidate*; None: `envs_per_candidate * horizon_length / num_minibatches`."""
    num_minibatches: int = 2
    """Minibatches per epoch when `minibatch_size` is None (so the settings scale with the env count)."""
    mini_epochs: int = 4
    """Passes over each iteration's samples."""
    learning_rate: float = 3e-4
    """Adam step size at the start (per candidate, then adapted by `lr_schedule`)."""
    lr_schedule: str = "adaptive"
    """'adaptive' (KL-driven, as rl_games), 'linear' (to 0 at `max_epochs`) or 'none'."""
    kl_threshold: float = 0.008
    """Target KL for the adaptive schedule: lr ÷1.5 above 2× this, ×1.5 below 0.5× this, each minibatch."""
    max_epochs: int = 100
    """Iterations of a run (the CLI's --iterations); also the horizon of the linear schedule."""
    e_clip: float = 0.2
    """PPO ratio clip, also used to clip the value update."""
    gamma: float = 0.99
    """Discount."""
    tau: float = 0.95
    """GAE lambda."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus."""
    critic_coef: float = 2.0
    """Weight of the value loss (the loss adds 0.5 · critic_coef · value loss, as rl_games)."""
    grad_norm: float = 1.0
    """Global gradient-norm clip, per candidate, when `truncate_grads`."""
    truncate_grads: bool = True
    """Clip gradients by `grad_norm`."""
    bounds_loss_coef: float = 1e-4
    """Weight of the penalty on action means outside [-1.1, 1.1]."""
    normalize_input: bool = True
    """Running mean/std normalization of observations, per candidate."""
    normalize_value: bool = True
    """Running mean/std normalization of value targets, per candidate."""
    normalize_advantage: bool = True
    """Standardize advantages in each minibatch."""
    value_bootstrap: bool = True
    """On a time-out, add gamma · V(s) to the reward instead of treating the time-out as a failure."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this for training (rl_games' `reward_shaper.scale_value`); logs are unscaled."""
    units: tuple[int, ...] = (256, 128, 64)
    """Hidden layer widths of the actor and of the (separate) critic."""
    activation: str = "elu"
    """Hidden activation: elu, relu, tanh or silu."""
    sigma_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (state-independent, learned)."""
    clip_observations: float = 5.0
    """Normalized observations are clipped to ± this."""

    def replace(self, **changes: Any) -> "PPOConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def for_task(cls, overrides: Mapping[str, Any] = (), **changes: Any) -> "PPOConfig":
        """Defaults, then a task's overrides, then explicit changes; unknown names are an error."""
        merged = {**dict(overrides), **changes}
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(merged) - known)
        if unknown:
            raise ValueError(f"unknown PPO setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        if "units" in merged:
            merged["units"] = tuple(merged["units"])
        return cls(**merged)
