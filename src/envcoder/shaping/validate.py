"""Validation of a candidate before training: trace every function on a sample state and check
shapes, dtypes and finiteness, so a bad candidate is reported and left out before it costs anything."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from envcoder.shaping.candidate import Candidate, CandidateError, defines, resolve_functions, time_limit
from envcoder.shaping.curriculum import CURRICULUM_METRICS
from envcoder.sim.randomization import FIELDS, field_shape

TRACE_TIME_LIMIT_S = 60.0
"""Seconds that tracing, compiling and running a candidate's functions on the sample state may take."""
SAMPLE_ENVS = 4
ROLLOUT_STEPS = 16
"""Control steps of the sample rollout whose states a candidate is checked on (`rollout_states`)."""
MEMORY_LIMIT_BYTES = 256 * 2**20
"""Working memory (XLA temporaries + outputs) one function may need for the sample's environments."""
ACTION_PROBE_DIM = 64
"""Action size used to find which action entries a custom `compute_torque` reads."""


@dataclasses.dataclass(frozen=True)
class CandidateSpec:
    """What validation learned about a candidate."""

    obs_dim: int
    action_dim: int
    """The policy's action size: entries of a continuous action, or the number of discrete actions."""
    reward_components: tuple[str, ...]
    critic_obs_dim: int | None = None
    """The size of the critic's own observation (`compute_critic_observation`); None: the critic reads the
    actor's."""


def sample_state(task, simulator, num_envs: int = SAMPLE_ENVS):
    """The task's state at the model's reference pose with a default goal, for `num_envs` environments."""
    nu, nv = simulator.mj_model.nu, simulator.mj_model.nv
    qpos = np.tile(np.asarray(simulator.qpos0), (num_envs, 1))
    data = simulator.put_data(simulator.mujoco_data(qpos, np.zeros((num_envs, nv))))
    build = jax.jit(_builder(task, simulator))
    actions, zeros = jnp.zeros((num_envs, _action_size(task, nu))), jnp.zeros((num_envs, nu))
    progress = jnp.zeros((num_envs,), jnp.int32)
    state = build(data, jnp.zeros((num_envs, task.num_commands)), actions, zeros, progress)
    commands = task.defaults["sample_goal"](jax.random.PRNGKey(0), state)  # a goal as training will see
    return {**state, **build(data, commands, actions, zeros, progress)}


def _action_size(task, nu: int) -> int:
    """The size of the state's `actions`: the action (continuous), or its one-hot vector (discrete)."""
    return task.num_actions if task.discrete else nu


def _builder(task, simulator):
    """`(data, commands, actions, torques, progress_buf) -> state` over a leading environment axis."""
    def build(data, *buffers):
        forces = simulator.task_contact_forces(task, data)
        return jax.vmap(lambda *args: task.build_state(simulator, *args))(data, forces, *buffers)
    return build


def rollout_states(task, simulator, num_envs: int = SAMPLE_ENVS, steps: int = ROLLOUT_STEPS, seed: int = 0):
    """The states of a short rollout, stacked on the environment axis `[num_envs * (steps + 1), ...]`.

    The envs start from the task's default reset and goal distributions and take uniform random actions
    through the default action mapping, so a candidate is checked on moving, varied states (a reward that
    divides by a velocity, or takes a log of a height, shows its NaN here) and not only on the reference pose.
    MuJoCo C steps the physics, with the default controller at every physics step as in training, and the task
    builds its states from MJX data as in training: no MJX program is compiled, so a validation worker starts in
    seconds (the MJX rollout it replaces compiled for 14-70 s on a 2-core CPU, docs/benchmarks/throughput.md § 4).
    """
    start = sample_state(task, simulator, num_envs)
    nu = simulator.mj_model.nu
    k_init, k_goal, k_act = jax.random.split(jax.random.PRNGKey(seed), 3)
    build = _builder(task, simulator)
    torque = task.defaults["compute_torque"]

    @jax.jit
    def begin():
        qpos, qvel = task.physics_from_state({**start, **task.defaults["sample_initial_state"](k_init, start)})
        return qpos, qvel, task.defaults["sample_goal"](k_goal, start).astype(jnp.float32)

    @jax.jit
    def act(key):
        if task.discrete:
            actions = jax.random.randint(key, (num_envs,), 0, task.num_actions)
            return actions, jax.nn.one_hot(actions, task.num_actions)  # state["actions"]: one-hot
        actions = jax.random.uniform(key, (num_envs, nu), minval=-1.0, maxval=1.0)
        return actions, actions

    @jax.jit
    def control(data, commands, actions, last, torques, progress):
        return simulator.clip_ctrl(torque(actions, build(data, commands, last, torques, progress)))
    record = jax.jit(build)

    qpos, qvel, commands = begin()
    datas = simulator.mujoco_data(qpos, qvel)
    data = simulator.put_data(datas)
    torques, progress = np.zeros((num_envs, nu), np.float32), np.zeros((num_envs,), np.int32)
    states = [record(data, commands, jnp.zeros((num_envs, _action_size(task, nu))), torques, progress)]
    for key in np.asarray(jax.random.split(k_act, steps)):  # rows of a host array: no program per row
        actions, last = act(key)
        for substep in range(simulator.substeps):
            if substep:
                data = simulator.put_data(datas)
            torques = np.asarray(control(data, commands, actions, last, torques, progress))
            simulator.mujoco_step(datas, torques)
        progress = progress + 1
        data = simulator.put_data(datas)
        states.append(record(data, commands, last, torques, progress))
    # Stacked and checked on the host: jnp would compile a program per field shape (0.6-1 s of a worker's start).
    states = jax.tree.map(lambda *x: np.concatenate([np.asarray(v) for v in x]), *states)
    if not all(np.isfinite(v).all() for v in jax.tree.leaves(states) if np.issubdtype(v.dtype, np.floating)):
        raise RuntimeError(f"{task.name}: the sample rollout under the default shaping is not finite (a task bug)")
    return jax.device_put(states)


def split_reward(output, file: str):
    """`reward` or `(reward, {name: [E]})` -> (reward, components dict)."""
    if isinstance(output, tuple):
        if len(output) != 2 or not isinstance(output[1], dict):
            raise CandidateError(file, "compute_reward must return reward [E] or (reward, {name: [E]})",
                                 function="compute_reward")
        return output[0], output[1]
    return output, {}


def _check(file, function, value, shape, kind):
    value = jnp.asarray(value)
    if value.shape != shape:
        raise CandidateError(file, f"returned shape {tuple(value.shape)}, expected {shape}", function=function)
    if kind == "float" and not jnp.issubdtype(value.dtype, jnp.floating):
        raise CandidateError(file, f"returned dtype {value.dtype}, expected a float array", function=function)
    if kind == "bool" and value.dtype != jnp.bool_:
        raise CandidateError(file, f"returned dtype {value.dtype}, expected a bool array", function=function)
    if kind == "float" and not bool(jnp.all(jnp.isfinite(value))):
        raise CandidateError(file, "returned NaN or inf on the sample state", function=function)


def _run(file, function, fn, *args, on_phase=None):
    """Trace and compile `fn` on `args`, refuse it if it needs too much memory, then run it; `on_phase(function,
    what)` is told before each step ("tracing", "compiling", "running")."""
    on_phase = on_phase or (lambda *_: None)
    num_envs = next((x.shape[0] for x in jax.tree.leaves(args[-1]) if jnp.ndim(x)), None) or SAMPLE_ENVS
    on_phase(function, "tracing")
    lowered = jax.jit(fn).lower(*args)
    on_phase(function, "compiling")
    compiled = lowered.compile()
    stats = compiled.memory_analysis()
    if stats is not None:
        needed = stats.temp_size_in_bytes + stats.output_size_in_bytes
        if needed > MEMORY_LIMIT_BYTES:
            raise CandidateError(file, f"needs {needed / 2**20:,.0f} MiB of working memory for {num_envs} "
                                       f"environments (limit {MEMORY_LIMIT_BYTES / 2**20:.0f} MiB): a huge "
                                       "allocation?", function=function)
    on_phase(function, "running")
    return jax.block_until_ready(compiled(*args))


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


def validate_candidate(task, simulator, candidate: Candidate, state=None, on_phase=None) -> CandidateSpec:
    """Run every function of `candidate` (its own and the defaults it keeps) on a sample state.

    Raises `CandidateError` with the file, function and reason; returns the inferred sizes. `on_phase(function,
    what)` is told before each function is traced, compiled and run (the sandbox reports it when a step hangs).
    """
    run = functools.partial(_run, on_phase=on_phase)
    state = sample_state(task, simulator) if state is None else state
    file = str(candidate.path) if candidate.path else f"<{task.name} defaults>"
    fns = resolve_functions(candidate, task.defaults)
    num_envs, nu = jax.tree.leaves(state)[0].shape[0], simulator.mj_model.nu
    if candidate.action_dim and "compute_torque" not in candidate.functions:
        raise CandidateError(file, "ACTION_DIM is set but the file defines no compute_torque to use it")
    key = jax.random.PRNGKey(0)
    current = "?"
    try:
        with time_limit(TRACE_TIME_LIMIT_S, "evaluating the candidate on a sample state"):
            current = "curriculum"
            values = _check_curriculum(file, run, fns[current])
            if values:  # what the other functions see as state["curriculum"]
                state = {**state, "curriculum": {name: jnp.broadcast_to(v, (num_envs,) + v.shape)
                                                 for name, v in values.items()}}
            current = "sample_physics"
            _check_physics(file, run, fns[current], jax.random.split(key, num_envs), values, simulator.mj_model)
            current = "compute_observation"
            obs = jnp.asarray(run(file, current, fns[current], state))
            if obs.ndim != 2 or obs.shape[0] != num_envs:
                raise CandidateError(file, f"returned shape {tuple(obs.shape)}, expected [E, D]", function=current)
            _check(file, current, obs, obs.shape, "float")
            critic_obs_dim = None
            if defines(candidate, "compute_critic_observation", task.defaults):
                current = "compute_critic_observation"
                critic_obs = jnp.asarray(run(file, current, fns[current], state))
                if critic_obs.ndim != 2 or critic_obs.shape[0] != num_envs:
                    raise CandidateError(file, f"returned shape {tuple(critic_obs.shape)}, expected [E, C]",
                                         function=current)
                _check(file, current, critic_obs, critic_obs.shape, "float")
                critic_obs_dim = int(critic_obs.shape[1])
            current = "compute_torque"
            if on_phase is not None:
                on_phase(current, "tracing")
            if task.discrete:  # the action indices in turn (all of them on the rollout's states)
                action_dim = candidate.action_dim or task.num_actions
                action = jnp.arange(num_envs, dtype=jnp.int32) % action_dim
            else:
                action_dim = candidate.action_dim or (
                    infer_action_dim(file, fns[current], state, nu) if current in candidate.functions else nu)
                action = jnp.full((num_envs, action_dim), 0.5)
            _check(file, current, run(file, current, fns[current], action, state), (num_envs, nu), "float")
            current = "compute_reward"
            reward, components = split_reward(run(file, current, fns[current], state), file)
            _check(file, current, reward, (num_envs,), "float")
            for name, value in components.items():
                _check(file, f"{current} (component {name!r})", value, (num_envs,), "float")
            current = "compute_terminal"
            _check(file, current, run(file, current, fns[current], state), (num_envs,), "bool")
            current = "sample_initial_state"
            reset = run(file, current, fns[current], key, state)
            if not isinstance(reset, dict) or not set(reset) <= set(state):
                raise CandidateError(file, "must return a dict of state fields to change, e.g. {'dof_pos': ...}",
                                     function=current)
            for name, value in reset.items():
                _check(file, f"{current} (field {name!r})", value, tuple(state[name].shape), "float")
            current = "sample_goal"
            _check(file, current, run(file, current, fns[current], key, state), (num_envs, task.num_commands),
                   "float")
    except CandidateError:
        raise
    except Exception as err:  # anything the candidate's code raised while running
        raise CandidateError(file, f"failed on the sample state: {type(err).__name__}: {_first_line(err)}",
                             function=current) from None
    return CandidateSpec(obs_dim=int(obs.shape[1]), action_dim=int(action_dim),
                         reward_components=tuple(sorted(components)), critic_obs_dim=critic_obs_dim)



def _check_curriculum(file, run, curriculum) -> dict:
    """Run `curriculum` at iteration 0 (NaN metrics) and 1 (with its values of 0); it must return the same dict of
    finite float values both times. Returns the values of iteration 0."""
    function = "curriculum"
    nan = {name: jnp.float32(jnp.nan) for name in CURRICULUM_METRICS}
    values = run(file, function, curriculum, jnp.float32(0), nan, None)
    if not isinstance(values, dict) or not all(isinstance(k, str) and k.isidentifier() for k in values):
        raise CandidateError(file, "must return a dict of named values, e.g. {'friction_range': jnp.array([0.9, "
                                   "1.1])}", function=function)
    values = {name: jnp.asarray(v) for name, v in values.items()}
    for name, value in values.items():
        if value.ndim > 1:
            raise CandidateError(file, f"value {name!r} has shape {tuple(value.shape)}: use a scalar or a 1-D array",
                                 function=function)
        _check(file, f"{function} (value {name!r})", value, value.shape, "float")
    metrics = {name: jnp.float32(1.0) for name in CURRICULUM_METRICS}
    again = run(file, function, curriculum, jnp.float32(1), metrics, values)
    if not isinstance(again, dict) or set(again) != set(values) or any(
            jnp.shape(again[n]) != values[n].shape for n in values):
        raise CandidateError(file, "must return the same names and shapes at every iteration (iteration 0 gave "
                                   f"{sorted(values)}, iteration 1 {sorted(again) if isinstance(again, dict) else again!r})",
                             function=function)
    return values


def _check_physics(file, run, sample_physics, keys, params, mj_model) -> None:
    """`sample_physics` (called with every environment's key) must return physics fields of the right shapes, with
    finite values in each field's range."""
    function = "sample_physics"
    physics = run(file, function, sample_physics, keys, params)
    if not isinstance(physics, dict) or not set(physics) <= set(FIELDS):
        unknown = sorted(set(physics) - set(FIELDS)) if isinstance(physics, dict) else []
        raise CandidateError(file, (f"returned {', '.join(map(repr, unknown))}, not a physics field; " if unknown else
                                    "must return a dict of physics fields for one environment; ")
                             + f"fields: {', '.join(FIELDS)}", function=function)
    for name, value in physics.items():
        value, full = jnp.asarray(value), field_shape(name, mj_model)
        where = f"{function} (field {name!r})"
        if not jnp.issubdtype(value.dtype, jnp.floating) and not jnp.issubdtype(value.dtype, jnp.integer):
            raise CandidateError(file, f"returned dtype {value.dtype}, expected numbers", function=where)
        try:
            jnp.broadcast_shapes(value.shape[1:], full)
        except ValueError:
            raise CandidateError(file, f"returned shape {tuple(value.shape[1:])} for one environment, expected a "
                                       f"scalar or {full}", function=where) from None
        value = value.astype(jnp.float32)
        _check(file, where, value, value.shape, "float")
        positive = FIELDS[name].neutral == 1.0  # a scale
        low = float(jnp.min(value))
        if (positive and low <= 0) or (name in NON_NEGATIVE and low < 0):
            raise CandidateError(file, f"returned {low:g}; it must be {'> 0 (a scale)' if positive else '≥ 0'}",
                                 function=where)


NON_NEGATIVE = ("push_velocity", "push_interval", "observation_noise", "action_latency")
"""Physics fields that cannot be negative."""


def _first_line(err: BaseException) -> str:
    """An exception's message without JAX's long explanations and tracebacks-in-text."""
    text = str(err).strip().split("\n")[0]
    return text if len(text) <= 300 else text[:300] + "…"


__all__ = ["CandidateSpec", "validate_candidate", "sample_state", "rollout_states", "split_reward", "infer_action_dim"]
