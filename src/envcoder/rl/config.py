"""The algorithms (`--algo`) and how a run's settings of one are resolved. Each algorithm's settings are its package's
(`envcoder.rl.ppo.config.PPOConfig`, `envcoder.rl.dqn.config.DQNConfig`, `envcoder.rl.sac.config.SACConfig`), on
the bases here (`AlgorithmSettings`, `OffPolicySettings`); names and meanings follow rl_games, so IsaacGymEnvs configs carry over.

A run's settings are resolved in layers, each checked for unknown names and wrong types
(`envcoder.rl.typed_settings`): the config class's defaults, the algorithm's section of the task's
`tasks/configs/<task>.yaml`, a `--config FILE`, then `ALGO.KEY=VALUE` overrides (e.g. `ppo.learning_rate=1e-3`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

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
class Algorithm:
    """One training algorithm (`--algo`): its settings class and its grouped learner, each in the algorithm's package
    and imported when it is asked for (the command line reads this registry without importing JAX)."""

    config_path: str
    """`module:Class` of its settings (`envcoder.rl.ppo.config:PPOConfig`, ...)."""
    learner_path: str
    """`module:Class` of its `envcoder.rl.learner.GroupedLearner`."""

    @property
    def config(self) -> type:
        return _imported(self.config_path)

    @property
    def learner(self) -> type:
        return _imported(self.learner_path)


def _imported(path: str):
    import importlib

    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


ALGORITHMS = {"ppo": Algorithm("envcoder.rl.ppo.config:PPOConfig", "envcoder.rl.ppo.learner:GroupedPPO"),
              "dqn": Algorithm("envcoder.rl.dqn.config:DQNConfig", "envcoder.rl.dqn.learner:GroupedDQN"),
              "sac": Algorithm("envcoder.rl.sac.config:SACConfig", "envcoder.rl.sac.learner:GroupedSAC")}
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
