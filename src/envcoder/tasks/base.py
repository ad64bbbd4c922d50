"""What a task is: a physics model, named state fields, default shaping and a ground-truth fitness."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

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


def action_field(size: int, one_hot: bool = False) -> StateField:
    """The state's `actions` of a task whose policy action has `size` entries (or picks one of `size` actions)."""
    what = (f"last action, one-hot over the {size} actions" if one_hot else
            "last policy action, clipped to [-1, 1]")
    return StateField(f"[E, {size}]", "-", f"{what}; a run with a candidate whose `ACTION_DIM` differs: the largest "
                                          "of the run, zero beyond a candidate's own")


@dataclasses.dataclass(frozen=True)
class IsaacName:
    """One attribute of the IsaacGymEnvs task class that a reward written for Isaac Gym may take: Eureka calls a
    reward `compute_reward(self.<name>, ...)`, so each argument's name is one of these (`envcoder.candidates.isaac`)."""

    value: Callable[[State], Any]
    """`state -> value` in Isaac's conventions: an array `[E, ...]`, or a Python number as Isaac's task has it."""
    shape: str
    """Its shape in Isaac's task (`[E, 13]`, `float`, ...)."""
    units: str
    """Physical units, or `-`."""
    meaning: str
    """What it holds, and how envcoder makes it where Isaac's task has something envcoder's model does not."""


@dataclasses.dataclass(frozen=True)
class Fitness:
    """One ground-truth measure of how well an episode did the task (never a candidate's own reward).

    An episode's task fitness is `(sum of step(state) over its steps + after_failure(state) × the steps a
    failure cut off) / max_episode_length`: a mean per control step over the full episode length. An episode that
    the physics failed in (a state not finite or faster than the task's `max_qvel`) scores `after_failure` at every
    step, as if it had failed at once.
    """

    step: Callable[[State], Any]
    """`state -> [E]`: the per-step quantity."""
    doc: str
    """What it measures, in its units, and which direction is better."""
    higher_is_better: bool = True
    """Ranking direction: False for errors (lower is better)."""
    after_failure: Callable[[State], Any] | None = None
    """`state -> [E]`: the per-step value counted for the steps left after a failure, at the failure
    state (e.g. the error of standing still); None counts them as 0."""
    physics: Callable | None = None
    """`(key, params) -> {field: value}` for one environment, like a candidate's `sample_physics`: the fixed,
    held-out randomization that the final evaluation runs every candidate under (a robustness fitness), in place
    of the candidate's own; None evaluates under the candidate's own physics."""
    bounds: tuple[float | None, float | None] = (None, None)
    """The values it can take, `(low, high)` (None: unbounded), e.g. `(0.0, 1.0)` for a fraction: confidence
    intervals are clipped to them."""


@dataclasses.dataclass(frozen=True)
class Task:
    """A simulation task that candidates shape.

    `build_state` describes one environment (the learner vmaps it over all of them); the default shaping
    functions and the fitness functions take states with a leading environment axis `[E, ...]`;
    `physics_from_state` broadcasts over leading axes.
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
    """Size of the goal that `sample_goal` returns (the state's `commands`, or `targets` for the walkers;
    0 when the task has no goal)."""
    state_fields: Mapping[str, StateField]
    """Every field of the `state` mapping that shaping functions receive."""
    build_state: Callable[..., dict]
    """`(sim, data, contact_forces, commands, actions, torques, progress_buf) -> state` for one environment,
    from the `Simulator`, its MJX data, the contact forces on `contact_geoms` (`[len(contact_geoms), 3]`) and
    the framework's buffers (`commands` is what `sample_goal` returned). Of `data` it may read only the physics
    state (`envcoder.sim.simulator.STEP_INPUTS`: `qpos`, `qvel`, ...): a freshly reset environment's derived
    quantities are not computed until its first physics step (`Simulator.place`)."""
    physics_from_state: Callable[[State], tuple]
    """`state -> (qpos, qvel)`: where a reset sampler's state puts the physics."""
    defaults: Mapping[str, Callable]
    """The default shaping functions, by API name; a candidate overrides any subset."""
    fitness: Mapping[str, Fitness]
    """The task's fitness definitions by name (`--fitness`); the first is the default."""
    num_actions: int | None = None
    """A discrete action space of this many actions (a candidate's `ACTION_DIM` may change it): the policy picks
    one, and `compute_torque` receives its index `[E]` (int32). None: continuous actions in [-1, 1]."""
    contact_geoms: tuple[str | tuple[str, ...], ...] = ()
    """Geoms whose net contact force (world frame, N) `build_state` receives, in this order: a geom's name, or a
    tuple of names whose forces add up (a foot of two capsules). The simulator computes them over all
    environments at once (MuJoCo Warp keeps one contact list for all of them)."""
    isaac_names: Mapping[str, IsaacName] = dataclasses.field(default_factory=dict)
    """The attributes of this task's IsaacGymEnvs class at reward time, by name: what a reward file written for Isaac
    Gym may take as arguments (`envcoder.candidates.isaac`); empty: the task has no Isaac counterpart."""
    training: Mapping[str, Mapping] | None = None
    """The training settings, a mapping per algorithm (`{"ppo": {"max_epochs": 100, "horizon_length": 32, ...}}`,
    rl_games names as the built-in tasks' YAML files have them), and optionally `"presets"` (`presets`); None:
    `config_file`'s."""
    source: Path | None = None
    """The task file this task was read from (`envcoder.tasks.load_task_file`); None for a task of a package."""
    max_qvel: float = 100.0
    """The fastest any generalized velocity (m/s or rad/s, every entry of `qvel`) of a sane physics state
    is. A state beyond it is a blow-up, like a non-finite one: the env ends as a physics failure from its
    last sane state and is counted. Finite blow-ups (MJX under deep contact penetration can reach 1e4 m/s)
    would otherwise pay a speed reward that no policy should learn to chase."""

    def __post_init__(self):
        # Every task steps its own physics and has no curriculum unless a candidate says otherwise.
        from envcoder.shaping.curriculum import no_curriculum, no_randomization
        from envcoder.shaping.isaac_torch import register_isaac_names
        object.__setattr__(self, "defaults", {"sample_physics": no_randomization, "curriculum": no_curriculum,
                                              **self.defaults})
        if self.isaac_names:  # a reward written for Isaac Gym, converted, finds them by the task's name
            register_isaac_names(self.name, self.isaac_names)

    @property
    def discrete(self) -> bool:
        return self.num_actions is not None

    @property
    def key(self) -> str:
        """What names this task to `--task`, a run's config.json and another process: the task file's path for a task
        read from one, else its name."""
        return str(self.source) if self.source is not None else self.name

    @property
    def config_file(self) -> Path:
        """Where the task's training settings come from: its file where it sets `training`, else
        `tasks/configs/<name>.yaml` (rl_games names, a section per algorithm)."""
        if self.training is not None and self.source is not None:
            return self.source
        return Path(__file__).parent / "configs" / f"{self.name.lower()}.yaml"

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The algorithms (`--algo`) that can train this task: DQN needs discrete actions, SAC continuous ones."""
        return ("ppo", "dqn") if self.discrete else ("ppo", "sac")

    def check_algorithm(self, algo: str) -> None:
        """A `ValueError` that says which algorithms can train this task, unless `algo` is one of them."""
        if algo not in self.algorithms:
            hint = {"dqn": " (DQN needs discrete actions: try CartpoleDiscrete)",
                    "sac": " (SAC needs continuous actions)"}.get(algo, "")
            raise ValueError(f"--algo {algo}: task {self.name} is trained with {', '.join(self.algorithms)}{hint}")

    def training_settings(self) -> dict:
        """`config_file` as it is, less its presets: a section of settings per algorithm
        (`envcoder.rl.config.task_settings` reads one algorithm's)."""
        return {algo: dict(section) for algo, section in self._training().items() if algo != "presets"}

    @property
    def presets(self) -> dict[str, dict]:
        """The task's named training budgets (`--preset NAME`), from `config_file`'s `presets:` section: each
        `{"about": what it is, "envs_per_candidate": N, ALGO: {settings}, "no_counterpart": {setting: why}}`,
        its algorithm settings in rl_games' names."""
        return {name: dict(preset) for name, preset in (self._training().get("presets") or {}).items()}

    def preset(self, name: str) -> dict:
        """The preset `name`, or a `ValueError` that lists the task's."""
        if name not in self.presets:
            known = ", ".join(self.presets) or "none"
            raise ValueError(f"--preset {name}: task {self.name} has no such preset (its presets: {known}; "
                             f"`envcoder tasks --task {self.name}` describes them)")
        return self.presets[name]

    def _training(self) -> dict:
        if self.training is not None:
            return dict(self.training)
        if not self.config_file.exists():
            return {}
        with open(self.config_file) as f:
            return yaml.safe_load(f) or {}

    def get_fitness(self, name: str | None = None) -> tuple[str, Fitness]:
        """`(name, Fitness)`; None gives the default (the first)."""
        if name is None:
            return next(iter(self.fitness.items()))
        if name not in self.fitness:
            raise ValueError(f"task {self.name} has no fitness {name!r}; choose from {', '.join(self.fitness)}")
        return name, self.fitness[name]
