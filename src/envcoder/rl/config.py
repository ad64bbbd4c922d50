"""Settings of each algorithm (`PPOConfig`, `DQNConfig`, `SACConfig`). Names and meanings follow rl_games, so IsaacGymEnvs
configs carry over.

A run's settings are resolved in layers, each checked for unknown names and wrong types
(`envcoder.rl.typed_settings`): the config class's defaults, the algorithm's section of the task's
`tasks/configs/<task>.yaml`, a `--config FILE`, then `ALGO.KEY=VALUE` overrides (e.g. `ppo.learning_rate=1e-3`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from envcoder.rl.typed_settings import ConfigError, Settings


class AlgorithmSettings(Settings):
    """An algorithm's settings (`ALGORITHMS`): those of a task are its defaults, then its `tasks/configs` file."""

    @classmethod
    def for_task(cls, task, **changes: Any):
        """Defaults, then the task's settings of this algorithm (`task_settings`), then explicit changes."""
        algo = next(name for name, a in ALGORITHMS.items() if a.config is cls)
        return cls.resolve([(str(task.config_file), task_settings(task, algo)), ("arguments", changes)])


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
    """Hidden layer widths of the actor and of the (separate) critic."""
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
    that of one block, not of the whole run (docs/benchmarks/scaling.md § 10). The update is the same."""


@dataclasses.dataclass(frozen=True)
class CentralValueConfig(Settings):
    """Settings of the critic when it trains on its own (a PPO config's `central_value_config`, as rl_games'). The
    critic reads the candidate's `compute_critic_observation` where it has one, else the actor's observation.

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


@dataclasses.dataclass(frozen=True)
class OffPolicySettings(AlgorithmSettings):
    """The settings that DQN and SAC share (each adds its own)."""

    grad_norm: float = 10.0
    """Global gradient-norm clip, per candidate, when `truncate_grads`."""
    truncate_grads: bool = True
    """Clip gradients by `grad_norm`."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this for training; logs are unscaled."""
    activation: str = "relu"
    """Hidden activation: elu, relu, tanh or silu."""
    clip_observations: float = 5.0
    """Normalized observations are clipped to ± this."""
    save_frequency: int = 50
    """Iterations between checkpoints; 0 saves only at the end."""
    save_best_after: int = 10
    """Iterations before a candidate's best-by-task-fitness policy starts being saved."""
    score_to_win: float | None = None
    """As PPO's: the task fitness at which a candidate counts as solved and stops updating. None: off."""

    @property
    def horizon_length(self) -> int:
        """Control steps each environment collects per iteration (the drivers count env steps with it)."""
        return self.steps_per_epoch


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


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """One training algorithm (`--algo`): its settings class and its grouped learner, which is imported when it is
    asked for (the command line reads this registry without importing JAX)."""

    config: type
    """The settings class (`PPOConfig`, ...)."""
    learner_path: str
    """`module:Class` of its `envcoder.rl.learner.GroupedLearner`."""

    @property
    def learner(self) -> type:
        import importlib

        module, name = self.learner_path.split(":")
        return getattr(importlib.import_module(module), name)


ALGORITHMS = {"ppo": Algorithm(PPOConfig, "envcoder.rl.grouped_ppo:GroupedPPO"),
              "dqn": Algorithm(DQNConfig, "envcoder.rl.dqn:GroupedDQN"),
              "sac": Algorithm(SACConfig, "envcoder.rl.sac:GroupedSAC")}
"""Every algorithm by its name (`--algo`)."""


def minibatch_size(section, batch: int) -> int:
    """The minibatch of a PPO section (its own or its central value's) for one group's batch of `batch` samples:
    `minibatch_size`, else the batch split in `num_minibatches`. It must divide the batch."""
    return section.minibatch_size or max(batch // section.num_minibatches, 1)


def algorithm(name: str) -> Algorithm:
    """The algorithm called `name`, or an error that lists them."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown --algo {name!r}; choose from {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


def load_config_file(path: str | Path, algo: str = "ppo") -> dict:
    """A YAML file of `algo`'s settings (rl_games names), as a dict: either the settings themselves, or a file
    with a section per algorithm (as `tasks/configs/<task>.yaml`), of which `algo`'s section."""
    path = Path(path)
    try:
        settings = yaml.safe_load(path.read_text()) or {}
    except OSError as err:
        raise ConfigError(f"cannot read config file {str(path)!r}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(settings, dict):
        raise ConfigError(f"{path}: expected a mapping of {algo.upper()} settings (name: value), got "
                          f"{type(settings).__name__}")
    return algorithm_section(settings, algo, str(path))


def task_settings(task, algo: str = "ppo") -> dict:
    """`algo`'s settings that differ from its config class's defaults for `task` (its `tasks/configs/<task>.yaml`)."""
    return algorithm_section(task.training_settings(), algo, str(task.config_file))


def algorithm_section(settings: dict, algo: str, where: str) -> dict:
    """`algo`'s settings from a mapping that is either sectioned by algorithm (`ppo: {...}`, `dqn: {...}`) or
    holds the settings themselves."""
    if not set(settings) & set(ALGORITHMS):
        return settings
    if set(settings) - set(ALGORITHMS):
        raise ConfigError(f"{where}: mixes algorithm sections ({', '.join(sorted(set(settings) & set(ALGORITHMS)))}) "
                          f"with settings outside them ({', '.join(sorted(set(settings) - set(ALGORITHMS)))})")
    section = settings.get(algo) or {}
    if not isinstance(section, dict):
        raise ConfigError(f"{where}: the {algo} section must be a mapping of settings, got {type(section).__name__}")
    return section


def parse_overrides(items: Sequence[str], algo: str = "ppo") -> dict:
    """`["ppo.learning_rate=1e-3", "ppo.units=[512, 256]"]` -> settings of `algo`; values are read as YAML."""
    settings = {}
    prefix = f"{algo}."
    for item in items:
        key, sep, text = item.partition("=")
        if sep and key.split(".")[0] in ALGORITHMS and key.split(".")[0] != algo:
            raise ConfigError(f"override {item!r}: this run trains with --algo {algo}; write {prefix}NAME=VALUE")
        if not sep or not key.startswith(prefix) or len(key) == len(prefix):
            raise ConfigError(f"override {item!r}: expected {prefix}NAME=VALUE, e.g. {prefix}learning_rate=1e-3")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            raise ConfigError(f"override {item!r}: the value is not valid YAML") from None
        name, _, inner = key[len(prefix):].partition(".")  # ppo.central_value_config.learning_rate=1e-3
        if not inner:
            settings[name] = value
        elif not isinstance(settings.get(name, {}), dict):
            raise ConfigError(f"override {item!r}: {prefix}{name} was set as a whole earlier on the command line")
        else:
            settings.setdefault(name, {})[inner] = value
    return settings
