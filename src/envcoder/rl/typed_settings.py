"""Settings that are resolved in layers, each checked against the settings class's types: the base of every
algorithm's settings (`envcoder.rl.config`). A layer's value is converted to its setting's type (an integer where
a float is expected, a list where a tuple is, YAML 1.1's `1e-3` string where a float is), or refused with a
`ConfigError` that names where it came from, what was expected and, for an unknown name, the closest known one.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any, Mapping, Sequence

CHOICES = {"lr_schedule": ("adaptive", "linear", "none"), "activation": ("elu", "relu", "tanh", "silu")}
"""Settings that take one of a few strings."""


AT_LEAST_ONE = ("horizon_length", "num_minibatches", "mini_epochs", "max_epochs", "minibatch_size", "steps_per_epoch",
                "updates_per_epoch", "batch_size", "replay_buffer_size", "num_epochs_to_copy", "update_block_envs",
                "units")
"""Counts that must be at least 1 (each width of `units`): 0 divided by zero or built an empty network before."""
RANGES = {"learning_rate": (0.0, None), "actor_lr": (0.0, None), "critic_lr": (0.0, None), "alpha_lr": (0.0, None),
          "kl_threshold": (0.0, None), "e_clip": (0.0, None), "grad_norm": (0.0, None),
          "clip_observations": (0.0, None), "init_alpha": (0.0, None), "gamma": (0.0, 1.0), "tau": (0.0, 1.0),
          "critic_tau": (0.0, 1.0), "target_tau": (0.0, 1.0), "epsilon": (0.0, 1.0), "min_epsilon": (0.0, 1.0),
          "entropy_coef": (0.0, None), "critic_coef": (0.0, None), "bounds_loss_coef": (0.0, None),
          "save_frequency": (0, None), "save_best_after": (0, None), "epsilon_decay_epochs": (0, None),
          "learning_starts": (0, None)}
"""The other settings' ranges, `(low, high)` inclusive (None: open); a step size, a clip or a temperature must be
above 0. Every float must be finite whatever its range (`learning_rate=.nan` trained NaNs)."""
_ABOVE_ZERO = ("learning_rate", "actor_lr", "critic_lr", "alpha_lr", "kl_threshold", "e_clip", "grad_norm",
               "clip_observations", "init_alpha")


class ConfigError(ValueError):
    """A setting that is unknown or has the wrong type; the message names where it came from."""


class Settings:
    """What every section of settings can do: be changed, and be resolved from checked layers. A subclass is a
    frozen dataclass; `section_name` names it in messages (`PPO`, `central_value_config`)."""

    section_name = "settings"

    def replace(self, **changes: Any):
        return dataclasses.replace(self, **changes)

    @classmethod
    def resolve(cls, layers: Sequence[tuple[str, Mapping[str, Any]]]):
        """Defaults, then each `(where, settings)` layer in turn. Raises `ConfigError` naming `where`."""
        merged: dict[str, Any] = {}
        for where, settings in layers:
            for name, value in dict(settings).items():
                merged[name] = _checked(cls, name, value, where, merged.get(name))
        return cls(**merged)

    @classmethod
    def from_mapping(cls, value: Any, where: str) -> dict:
        """A layer of this section's settings when it is nested in another's (a mapping of its own names); a
        subclass may translate another layout here."""
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: {cls.section_name} must be a mapping of settings (or null), got {value!r}")
        return dict(value)


def _nested(expected) -> type[Settings] | None:
    """The section of settings a setting of type `expected` holds (`CentralValueConfig | None`), if any."""
    return next((t for t in (expected, *typing.get_args(expected)) if isinstance(t, type) and issubclass(t, Settings)),
                None)


def _kind(cls, name: str) -> str:
    expected = typing.get_type_hints(cls)[name]
    return expected.__name__ if isinstance(expected, type) else str(expected).replace("typing.", "")


def _checked(cls, name: str, value: Any, where: str, current: Any = None) -> Any:
    """`value` converted to setting `name`'s type and in its range (`AT_LEAST_ONE`, `RANGES`, finite), or a
    `ConfigError` that says what was expected. A nested section's `value` (a mapping) is merged onto the `current`
    one of the earlier layers."""
    converted = _converted(cls, name, value, where, current)
    numbers = converted if isinstance(converted, tuple) else (converted,)
    for number in (n for n in numbers if isinstance(n, (int, float)) and not isinstance(n, bool)):
        low, high = (1, None) if name in AT_LEAST_ONE else RANGES.get(name, (None, None))
        if (number != number or number in (float("inf"), float("-inf")) or (low is not None and number < low)
                or (high is not None and number > high) or (name in _ABOVE_ZERO and number <= 0)):
            rule = ("a number of at least 1" if name in AT_LEAST_ONE else
                    "a finite number above 0" if name in _ABOVE_ZERO else
                    f"a finite number from {low} to {high}" if low is not None and high is not None else
                    f"a finite number of at least {low}" if low is not None else "a finite number")
            what = f"each width of {name}" if isinstance(converted, tuple) else name
            raise ConfigError(f"{where}: {what} must be {rule}, got {value!r}")
    return converted


def _converted(cls, name: str, value: Any, where: str, current: Any = None) -> Any:
    """`value` converted to setting `name`'s type (`_checked`)."""
    hints = typing.get_type_hints(cls)
    if name not in hints:
        close = difflib.get_close_matches(name, list(hints), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known settings: {', '.join(hints)}"
        raise ConfigError(f"{where}: unknown {cls.section_name} setting {name!r}{hint}")
    expected = hints[name]
    nested = _nested(expected)
    if nested is not None:
        if value is None or isinstance(value, nested):
            return value
        earlier = dataclasses.asdict(current) if isinstance(current, nested) else {}
        return nested.resolve([("", earlier), (f"{where}: {name}", nested.from_mapping(value, where))])
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if expected is bool and isinstance(value, bool):
        return value
    if expected is int and is_int:
        return value
    if expected is float and (is_int or isinstance(value, float)):
        return float(value)
    if expected in (float, float | None) and isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if expected == (int | None) and (value is None or is_int):
        return value
    if expected == (float | None) and (value is None or is_int or isinstance(value, float)):
        return None if value is None else float(value)
    if expected in (str, str | None) and isinstance(value, str):
        if name in CHOICES and value not in CHOICES[name]:
            raise ConfigError(f"{where}: {name} must be one of {', '.join(CHOICES[name])}, got {value!r}")
        return value
    if value is None and expected in (str | None, tuple[int, ...] | None):
        return value
    if expected in (tuple[int, ...], tuple[int, ...] | None) and isinstance(value, (list, tuple)) and value and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return tuple(value)
    raise ConfigError(f"{where}: {name} expects {_kind(cls, name)}, got {value!r} ({type(value).__name__})")
