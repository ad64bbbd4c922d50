"""PPO's settings (rl_games' names, so IsaacGymEnvs configs carry over) and its critic's when it trains on its own
(`central_value_config`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from envcoder.rl.config import AlgorithmSettings
from envcoder.rl.typed_settings import ConfigError, Settings


@dataclasses.dataclass(frozen=True)
class PPOConfig(AlgorithmSettings):
    """Settings of the per-candidate PPO. Every candidate trains with the same settings."""

    section_name = "PPO"

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
    """Hidden layer widths of the actor and of the critic."""
    separate: bool = True
    """True: the critic is an MLP of its own, of the same widths. False: actor and critic share one MLP with two
    heads, as rl_games' `network.separate: False` (IsaacGymEnvs' configs), so the value loss trains the policy's
    layers too. Not with `central_value_config` or a candidate's own critic observation."""
    activation: str = "elu"
    """Hidden activation: elu, relu, tanh or silu."""
    sigma_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (state-independent, learned)."""
    clip_observations: float = 5.0
    """Normalized observations are clipped to ± this."""
    save_frequency: int = 50
    """Iterations between checkpoints (each candidate's last policy and the run's full training state, for
    --resume); 0 saves only at the end."""
    save_best_after: int = 10
    """Iterations before a candidate's best-by-task-fitness policy starts being saved."""
    score_to_win: float | None = None
    """Task fitness at which a candidate counts as solved (reached: at least this, or at most this when lower
    is better), judged on the mean of the episodes that end in an iteration. A solved group keeps the policy
    that reached it and stops updating; the run stops when every group is solved or diverged. None: off."""
    central_value_config: CentralValueConfig | None = None
    """rl_games' central value: the critic trains as a network of its own, with its own optimizer, step size,
    epochs and minibatches, on the value loss alone (the actor's loss then has no critic term). None: actor and
    critic train together on one loss (`critic_coef`)."""
    update_block_envs: int = 262_144
    """Environments whose groups' PPO epochs run at once. A run with more updates its groups in blocks of this
    many environments, one block after another: the update's working memory (Ant: ~73 KiB per environment) is
    that of one block, not of the whole run (docs/benchmarks/scaling.md). The update is the same."""


@dataclasses.dataclass(frozen=True)
class CentralValueConfig(Settings):
    """Settings of the critic when it trains on its own (a PPO config's `central_value_config`, as rl_games'). The
    critic reads the candidate's own critic observation (`CRITIC_OBSERVATION`) where it has one, else the actor's.

    rl_games' layout is accepted as written in IsaacGymEnvs configs: `network: {mlp: {units, activation}}` sets
    `units` and `activation`; `kl_threshold` and `schedule_type` are accepted and, as in rl_games, change nothing
    (its central value keeps a constant step size unless `lr_schedule` is linear)."""

    section_name = "central_value_config"

    learning_rate: float = 5e-4
    """Adam step size of the critic."""
    lr_schedule: str = "none"
    """'linear' (to 0 at PPO's `max_epochs`); 'adaptive' and 'none' keep the step size constant, as rl_games."""
    mini_epochs: int = 4
    """Passes of the critic over each iteration's samples."""
    minibatch_size: int | None = None
    """Samples per critic minibatch, per candidate; None: `envs_per_candidate * horizon_length / num_minibatches`."""
    num_minibatches: int = 2
    """Critic minibatches per epoch when `minibatch_size` is None."""
    clip_value: bool = True
    """Clip the value update to ± `e_clip` around the acting value, as PPO's critic loss."""
    e_clip: float = 0.2
    """The value clip."""
    normalize_input: bool = True
    """Running mean/std normalization of the critic's own observations (a critic that reads the actor's
    observation sees them as the actor does)."""
    truncate_grads: bool = True
    """Clip the critic's gradients by `grad_norm`."""
    grad_norm: float = 1.0
    """Global gradient-norm clip of the critic."""
    units: tuple[int, ...] | None = None
    """Hidden layer widths of the critic; None: PPO's `units`."""
    activation: str | None = None
    """Hidden activation of the critic; None: PPO's `activation`."""

    @classmethod
    def from_mapping(cls, value: Any, where: str) -> dict:
        """A `central_value_config` mapping in envcoder's names: rl_games' `network: {mlp: {units, activation}}`
        becomes `units`/`activation`, and the keys rl_games ignores there are dropped."""
        section = {k: v for k, v in super().from_mapping(value, where).items()
                   if k not in ("kl_threshold", "schedule_type")}
        network = section.pop("network", None)
        if network is None:
            return section
        if not isinstance(network, Mapping):
            raise ConfigError(f"{where}: central_value_config.network must be a mapping, got {network!r}")
        for key, value in network.items():
            if key == "mlp":
                continue
            if key not in _RL_GAMES_NETWORK or value not in _RL_GAMES_NETWORK[key]:
                raise ConfigError(f"{where}: central_value_config.network.{key}: {value!r} is not supported; "
                                  f"envcoder's critic is an MLP set by network.mlp.units and network.mlp.activation")
        mlp = network.get("mlp") or {}
        for key, value in mlp.items():
            if key in ("units", "activation"):
                section[key] = value
            elif key not in _RL_GAMES_NETWORK or value not in _RL_GAMES_NETWORK[key]:
                raise ConfigError(f"{where}: central_value_config.network.mlp.{key}: {value!r} is not supported; "
                                  f"only units and activation can be set")
        return section


_RL_GAMES_NETWORK = {"name": ("actor_critic",), "central_value": (True,), "d2rl": (False,),
                     "initializer": ({"name": "default"},), "regularizer": ({"name": "None"}, {"name": None})}
"""rl_games network keys a central value section may carry, and the values envcoder builds (any other is refused)."""
