"""The shaping API: one registry of the functions a candidate may define.

Each `ShapingType` says what the function is called with, what it returns, which function serves where neither the
candidate nor the task defines it, whether it runs at every control step, and how validation checks its output on
a sample state (`check`). The loader, the validator (`envcoder.candidates.validate`), the grouped environment's group
order (`envcoder.env.grouping`), the proposer's prompts and `envcoder tasks` all read it. A new shaping type is an
entry here (and its place in `envcoder.env.GroupedEnv`, which merges each type's per-group outputs), plus its tests.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from envcoder.shaping.curriculum import CURRICULUM_METRICS
from envcoder.sim.randomization import FIELDS, field_shape

ACTION_PROBE_DIM = 64
"""The wide action `[E, 64]` that `infer_action_dim` probes a custom `compute_torque` with."""


class CandidateError(Exception):
    """A candidate that cannot be used, with where and why. `str()` is the one-line report."""

    def __init__(self, file: str, reason: str, function: str | None = None, line: int | None = None):
        self.file, self.reason, self.function, self.line = file, reason, function, line
        where = file + (f":{line}" if line else "") + (f" in {function}()" if function else "")
        super().__init__(f"{where}: {reason}")


@dataclasses.dataclass
class Probe:
    """What validation knows while it checks a candidate's functions one type after another (`ShapingType.check`),
    and what it finds: the sizes that the validated candidate carries (`obs_dim`, `action_dim`, ...)."""

    file: str
    run: Callable  # run(file, function name, fn, *args): trace, compile and run one function
    task: object
    candidate: object
    state: dict  # the sample state `[E, ...]` (with the curriculum's values once checked)
    key: jax.Array
    num_envs: int
    nu: int
    mj_model: object
    obs_dim: int | None = None
    critic_obs_dim: int | None = None
    action_dim: int | None = None
    reward_components: tuple[str, ...] = ()
    curriculum_values: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ShapingType:
    name: str
    arguments: tuple[str, ...]
    returns: str
    """What it returns, in the words the prompts and `envcoder tasks` show."""
    check: Callable[[Probe, Callable], None]
    """Validation of its output on the sample state: raises `CandidateError`, or records what it found in the
    probe."""
    optional_arguments: tuple[str, ...] = ()
    """Arguments it may also take: a curriculum that takes `params` gets its own previous values."""
    fallback: str | None = None
    """Where neither the candidate nor the task defines it, the candidate's own function of this type serves: a
    critic without observations of its own reads the actor's (a symmetric actor-critic)."""
    per_step: bool = False
    """It runs at every control step: groups are ordered so that those sharing its code are contiguous."""
    only_if_defined: bool = False
    """Validated only where the candidate or the task defines it (else its fallback was)."""
    size: str | None = None
    """The validated candidate's size its output sets (its last axis): `obs_dim`, `critic_obs_dim`; None: none."""
    algorithms: tuple[str, ...] | None = None
    """The algorithms (`--algo`) that use it; None: every one."""


def check_output(file, function, value, shape, kind):
    """`value` must have `shape` and be a finite float (`kind` "float") or a bool array."""
    value = jnp.asarray(value)
    if value.shape != shape:
        envs = shape[0] if shape else None
        raise CandidateError(file, f"returned shape {tuple(value.shape)}, expected {shape}" + (
            f" (the first axis is the environments: validation runs it on {envs} sample states; return one value "
            "per environment)" if envs else ""), function=function)
    if kind == "float" and not jnp.issubdtype(value.dtype, jnp.floating):
        raise CandidateError(file, f"returned dtype {value.dtype}, expected a float array", function=function)
    if kind == "bool" and value.dtype != jnp.bool_:
        raise CandidateError(file, f"returned dtype {value.dtype}, expected a bool array", function=function)
    if kind == "float" and not bool(jnp.all(jnp.isfinite(value))):
        raise CandidateError(file, "returned NaN or inf on the sample state", function=function)


def split_reward(output, file: str):
    """`reward` or `(reward, {name: [E]})` -> (reward, components dict)."""
    if isinstance(output, tuple):
        if len(output) != 2 or not isinstance(output[1], dict):
            raise CandidateError(file, "compute_reward must return reward [E] or (reward, {name: [E]})",
                                 function="compute_reward")
        return output[0], output[1]
    return output, {}


OBSERVATION, CRITIC_OBSERVATION = "compute_observation", "compute_critic_observation"
"""The two shaping types that make observations: the policy's, and the critic's own (an asymmetric actor-critic)."""


def _features(letter: str, field: str, function: str):
    """The check of `function`'s observation `[E, D]` (a float per environment and feature), recording D as
    `field`."""
    def check(probe: Probe, fn) -> None:
        obs = jnp.asarray(probe.run(probe.file, function, fn, probe.state))
        if obs.ndim != 2 or obs.shape[0] != probe.num_envs:
            raise CandidateError(probe.file, f"returned shape {tuple(obs.shape)}, expected [E, {letter}] (E: the "
                                             f"environments, {probe.num_envs} sample states in validation; {letter}: "
                                             "the features, any number)", function=function)
        check_output(probe.file, function, obs, obs.shape, "float")
        setattr(probe, field, int(obs.shape[1]))
    return check


def _check_torque(probe: Probe, fn) -> None:
    function, task = "compute_torque", probe.task
    if task.discrete:  # the action indices in turn (all of them on the rollout's states)
        probe.action_dim = probe.candidate.action_dim or task.num_actions
        action = jnp.arange(probe.num_envs, dtype=jnp.int32) % probe.action_dim
    else:
        probe.action_dim = probe.candidate.action_dim or (
            infer_action_dim(probe.file, fn, probe.state, probe.nu) if function in probe.candidate.functions
            else probe.nu)
        action = jnp.full((probe.num_envs, probe.action_dim), 0.5)
    check_output(probe.file, function, probe.run(probe.file, function, fn, action, probe.state),
                 (probe.num_envs, probe.nu), "float")


def _check_reward(probe: Probe, fn) -> None:
    function = "compute_reward"
    reward, components = split_reward(probe.run(probe.file, function, fn, probe.state), probe.file)
    check_output(probe.file, function, reward, (probe.num_envs,), "float")
    for name, value in components.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise CandidateError(probe.file, f"names a reward component {name!r}: component names are identifiers "
                                             "(strings such as 'upright')", function=function)
        check_output(probe.file, f"{function} (component {name!r})", value, (probe.num_envs,), "float")
    probe.reward_components = tuple(sorted(components))


def _check_terminal(probe: Probe, fn) -> None:
    function = "compute_terminal"
    check_output(probe.file, function, probe.run(probe.file, function, fn, probe.state), (probe.num_envs,), "bool")


def _check_initial_state(probe: Probe, fn) -> None:
    function, state = "sample_initial_state", probe.state
    reset = probe.run(probe.file, function, fn, probe.key, state)
    if not isinstance(reset, dict) or not set(reset) <= set(state):
        raise CandidateError(probe.file, "must return a dict of state fields to change, e.g. {'dof_pos': ...}",
                             function=function)
    for name, value in reset.items():
        check_output(probe.file, f"{function} (field {name!r})", value, tuple(state[name].shape), "float")


def _check_goal(probe: Probe, fn) -> None:
    function = "sample_goal"
    check_output(probe.file, function, probe.run(probe.file, function, fn, probe.key, probe.state),
                 (probe.num_envs, probe.task.num_commands), "float")


def _check_physics(probe: Probe, fn) -> None:
    """`sample_physics` (called with every environment's key) must return physics fields of the right shapes, with
    finite values in each field's range."""
    file, function = probe.file, "sample_physics"
    physics = probe.run(file, function, fn, jax.random.split(probe.key, probe.num_envs), probe.curriculum_values)
    if not isinstance(physics, dict) or not set(physics) <= set(FIELDS):
        unknown = sorted(set(physics) - set(FIELDS)) if isinstance(physics, dict) else []
        raise CandidateError(file, (f"returned {', '.join(map(repr, unknown))}, not a physics field; " if unknown else
                                    "must return a dict of physics fields for one environment; ")
                             + f"fields: {', '.join(FIELDS)}", function=function)
    for name, value in physics.items():
        value, full = jnp.asarray(value), field_shape(name, probe.mj_model)
        where = f"{function} (field {name!r})"
        if not jnp.issubdtype(value.dtype, jnp.floating) and not jnp.issubdtype(value.dtype, jnp.integer):
            raise CandidateError(file, f"returned dtype {value.dtype}, expected numbers", function=where)
        try:
            jnp.broadcast_shapes(value.shape[1:], full)
        except ValueError:
            raise CandidateError(file, f"returned shape {tuple(value.shape[1:])} for one environment, expected a "
                                       f"scalar or {full}", function=where) from None
        value = value.astype(jnp.float32)
        check_output(file, where, value, value.shape, "float")
        positive = FIELDS[name].neutral == 1.0  # a scale
        low = float(jnp.min(value))
        if (positive and low <= 0) or (name in NON_NEGATIVE and low < 0):
            raise CandidateError(file, f"returned {low:g}; it must be {'> 0 (a scale)' if positive else '≥ 0'}",
                                 function=where)


NON_NEGATIVE = ("push_velocity", "push_interval", "observation_noise", "action_latency")
"""Physics fields that cannot be negative."""


def _check_curriculum(probe: Probe, fn) -> None:
    """`curriculum` at iteration 0 (NaN metrics) and 1 (with its values of 0) must return the same dict of finite
    float values both times; the values of iteration 0 become the state's `curriculum` for the other checks."""
    file, function = probe.file, "curriculum"
    nan = {name: jnp.float32(jnp.nan) for name in CURRICULUM_METRICS}
    values = probe.run(file, function, fn, jnp.float32(0), nan, None)
    if not isinstance(values, dict) or not all(isinstance(k, str) and k.isidentifier() for k in values):
        raise CandidateError(file, "must return a dict of named values, e.g. {'friction_range': jnp.array([0.9, "
                                   "1.1])}", function=function)
    values = {name: jnp.asarray(v) for name, v in values.items()}
    for name, value in values.items():
        if value.ndim > 1:
            raise CandidateError(file, f"value {name!r} has shape {tuple(value.shape)}: use a scalar or a 1-D array",
                                 function=function)
        check_output(file, f"{function} (value {name!r})", value, value.shape, "float")
    metrics = {name: jnp.float32(1.0) for name in CURRICULUM_METRICS}
    again = probe.run(file, function, fn, jnp.float32(1), metrics, values)
    if not isinstance(again, dict) or set(again) != set(values) or any(
            jnp.shape(again[n]) != values[n].shape for n in values):
        raise CandidateError(file, "must return the same names and shapes at every iteration (iteration 0 gave "
                                   f"{sorted(values)}, iteration 1 {sorted(again) if isinstance(again, dict) else again!r})",
                             function=function)
    probe.curriculum_values = values
    if values:  # what the other functions see as state["curriculum"]
        probe.state = {**probe.state, "curriculum": {name: jnp.broadcast_to(v, (probe.num_envs,) + v.shape)
                                                     for name, v in values.items()}}


def infer_action_dim(file, compute_torque, state, nu: int) -> int:
    """The policy action size a custom `compute_torque` expects.

    Probed with a wide action `[E, 64]`: if the function maps it to `[E, nu]`, the action size is one past
    the last action entry its output depends on; if it cannot take a wider action (e.g. `150 * action`),
    the size is `nu`. A file can state it instead with `ACTION_DIM = n`.
    """
    num_envs = jax.tree.leaves(state)[0].shape[0]
    probe = jnp.zeros((num_envs, ACTION_PROBE_DIM))
    try:
        out = jax.eval_shape(compute_torque, probe, state)
    except Exception:  # noqa: BLE001 - the wide probe does not fit this function: it wants nu entries
        return nu
    if getattr(out, "shape", None) != (num_envs, nu):
        return nu
    action = jax.random.uniform(jax.random.PRNGKey(1), probe.shape, minval=-0.9, maxval=0.9)
    jacobian = jax.jacobian(lambda a: jnp.sum(compute_torque(a, state), axis=0))(action)  # [nu, E, A]
    used = np.flatnonzero(np.any(np.asarray(jacobian) != 0, axis=(0, 1)))
    if used.size == 0:
        raise CandidateError(file, "the motor commands do not depend on the policy action", function="compute_torque")
    return int(used.max()) + 1



SHAPING_TYPES: dict[str, ShapingType] = {t.name: t for t in (
    ShapingType("compute_reward", ("state",), check=_check_reward, per_step=True, returns=(
        "reward `[E]` float, or `(reward, {\"name\": [E] term, ...})` so that every term is logged and reported back "
        "to you (preferred)")),
    ShapingType(OBSERVATION, ("state",), check=_features("D", "obs_dim", OBSERVATION), per_step=True,
                size="obs_dim", returns=(
        "observation `[E, D]` float; choose D freely (the policy's input size follows it)")),
    ShapingType(CRITIC_OBSERVATION, ("state",), check=_features("C", "critic_obs_dim", CRITIC_OBSERVATION),
                fallback=OBSERVATION, only_if_defined=True, size="critic_obs_dim", algorithms=("ppo",), returns=(
        "the critic's own observation `[E, C]` float (PPO's value function may see privileged simulator state the "
        "policy cannot, e.g. base velocity or contact forces); without it the critic reads compute_observation")),
    ShapingType("compute_torque", ("action", "state"), check=_check_torque, per_step=True, returns=(
        "motor commands `[E, nu]` float from the policy action `[E, A]` in [-1, 1] (A is inferred; set "
        "`ACTION_DIM = A` at module level to fix it); on a discrete task the action is an int index `[E]` of A "
        "actions (`ACTION_DIM = A` sets how many)")),
    ShapingType("compute_terminal", ("state",), check=_check_terminal, per_step=True, returns=(
        "bool `[E]`: True where the episode has failed (time-outs are handled by the framework)")),
    ShapingType("sample_initial_state", ("key", "state"), check=_check_initial_state, returns=(
        "a dict of the state fields to reset, e.g. {\"dof_pos\": [E, n], \"dof_vel\": [E, n]}")),
    ShapingType("sample_goal", ("key", "state"), check=_check_goal, returns=(
        "the goal/command array `[E, C]` the episode pursues (the state's commands)")),
    ShapingType("sample_physics", ("key", "params"), check=_check_physics, returns=(
        "for ONE environment (`key` is one key; no [E] axis): a dict of the physics fields below to randomize for "
        "its next episode, e.g. {\"friction\": jax.random.uniform(key, (), minval=0.7, maxval=1.3)}; `params` are "
        "your curriculum's current values")),
    ShapingType("curriculum", ("iteration", "metrics"), check=_check_curriculum, optional_arguments=("params",),
                returns=(
        "a dict of named scalars or 1-D arrays, computed after every iteration from the iteration number and the "
        "group's metrics of it (`metrics[\"task_fitness\"]`, NaN before any episode ended); `sample_physics` gets "
        "them as `params`, every other function as `state[\"curriculum\"]`. Instead of both, a module-level table "
        "`CURRICULUM = {\"friction\": {\"range\": [0.5, 1.5], \"iters\": 300}}` widens each field's range linearly "
        "from its neutral value")),
)}
"""Every shaping type, in the order they are documented."""

CHECK_ORDER = ("curriculum", "sample_physics", OBSERVATION, CRITIC_OBSERVATION, "compute_torque", "compute_reward",
               "compute_terminal", "sample_initial_state", "sample_goal")
"""The order validation checks them in: the curriculum's values are part of the state the others see, and the
physics before the rest."""
assert sorted(CHECK_ORDER) == sorted(SHAPING_TYPES)

SHAPER_TYPES = tuple(SHAPING_TYPES)
SIGNATURES = {name: t.arguments for name, t in SHAPING_TYPES.items()}
FALLBACKS = {name: t.fallback for name, t in SHAPING_TYPES.items() if t.fallback}
OPTIONAL_ARGUMENTS = {name: t.optional_arguments for name, t in SHAPING_TYPES.items() if t.optional_arguments}
PER_STEP = tuple(name for name, t in SHAPING_TYPES.items() if t.per_step)
"""The functions that run at every control step (the grouped environment orders groups by their code)."""

ALIASES = {"compute_action": "compute_torque"}
"""Other names accepted for API functions (EnvCoderBench spells the action mapping `compute_action`)."""


def signature(api: str) -> str:
    """`compute_torque(action, state)`."""
    return f"{api}({', '.join(SIGNATURES[api])})"
