"""What a task is: a physics model, named state fields, default shaping and a ground-truth fitness."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Mapping

State = Mapping[str, Any]
"""Named arrays with a leading environment axis `[E, ...]` (see each task's `state_fields`)."""


@dataclasses.dataclass(frozen=True)
class StateField:
    """Documentation of one state field, printed by `envcoder tasks --task NAME`."""

    shape: str
    """Shape with the environment axis first, e.g. `[E, 13]`."""
    units: str
    """Physical units, or `-` when dimensionless."""
    meaning: str
    """What the field holds."""


@dataclasses.dataclass(frozen=True)
class Task:
    """A simulation task that candidates shape.

    Every callable works on batched arrays with any leading axes (`[..., nq]` and so on).
    """

    name: str
    """Registry name, as given to `--task`."""
    description: str
    """One line: what the robot should do."""
    model_file: Path
    """The task's MJCF file."""
    substeps: int
    """Physics steps per control step."""
    max_episode_length: int
    """Control steps after which an episode is truncated (a time-out, bootstrapped, not a failure)."""
    num_commands: int
    """Size of the `commands` field that `sample_goal` fills (0 when the task has no goal)."""
    state_fields: Mapping[str, StateField]
    """Every field of the `state` mapping that shaping functions receive."""
    build_state: Callable[..., dict]
    """`(data, commands, actions, torques, progress_buf) -> state`, from MJX data and the framework's buffers."""
    physics_from_state: Callable[[State], tuple]
    """`state -> (qpos, qvel)`: where a reset sampler's state puts the physics."""
    defaults: Mapping[str, Callable]
    """The default shaping functions, by API name; a candidate overrides any subset."""
    fitness_step: Callable[[State], Any]
    """`state -> [E]`: the per-step ground-truth quantity; an episode's task fitness is its sum over
    the episode divided by `max_episode_length` (so an early failure scores the remaining time as 0)."""
    fitness_doc: str
    """What the task fitness measures and which direction is better."""
    ppo_overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """PPO settings that differ from `PPOConfig`'s defaults for this task."""
