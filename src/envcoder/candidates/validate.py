"""Validation of a candidate before training: trace every function on a sample state and check
shapes, dtypes and finiteness, so a bad candidate is reported and left out before it costs anything."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from envcoder.shaping.api import (CHECK_ORDER, SHAPING_TYPES, CandidateError, Probe, infer_action_dim,
                                  split_reward)
from envcoder.candidates import Candidate, defines, resolve_functions, time_limit

TRACE_TIME_LIMIT_S = 60.0
"""Seconds that tracing, compiling and running a candidate's functions on the sample state may take."""
SAMPLE_ENVS = 4
ROLLOUT_STEPS = 16
"""Control steps of the sample rollout whose states a candidate is checked on (`rollout_states`)."""
MEMORY_LIMIT_BYTES = 256 * 2**20
"""Working memory (XLA temporaries + outputs) one function may need for the sample's environments."""


def sample_state(task, simulator, num_envs: int = SAMPLE_ENVS):
    """The task's state at the model's reference pose with a default goal, for `num_envs` environments."""
    nu, nv = simulator.mj_model.nu, simulator.mj_model.nv
    qpos = np.tile(np.asarray(simulator.qpos0), (num_envs, 1))
    data, forces = _physics(task, simulator, simulator.mujoco_data(qpos, np.zeros((num_envs, nv))))
    build = jax.jit(_builder(task, simulator))
    actions, zeros = jnp.zeros((num_envs, _action_size(task, nu))), jnp.zeros((num_envs, nu))
    progress = jnp.zeros((num_envs,), jnp.int32)
    state = build(data, forces, jnp.zeros((num_envs, task.num_commands)), actions, zeros, progress)
    commands = task.defaults["sample_goal"](jax.random.PRNGKey(0), state)  # a goal as training will see
    return {**state, **build(data, forces, commands, actions, zeros, progress)}


def _physics(task, simulator, datas):
    """`(PhysicsState, contact forces)` of MuJoCo C's data of environments (`Simulator.mujoco_state`)."""
    return simulator.mujoco_state(datas, simulator.geom_members(task.contact_geoms))


def _action_size(task, nu: int) -> int:
    """The size of the state's `actions`: the action (continuous), or its one-hot vector (discrete)."""
    return task.num_actions if task.discrete else nu


def _builder(task, simulator):
    """`(physics state, contact forces, commands, actions, torques, progress_buf) -> state` over a leading
    environment axis."""
    def build(data, forces, *buffers):
        return jax.vmap(lambda *args: task.build_state(simulator, *args))(data, forces, *buffers)
    return build


def rollout_states(task, simulator, num_envs: int = SAMPLE_ENVS, steps: int = ROLLOUT_STEPS, seed: int = 0):
    """The states of a short rollout, stacked on the environment axis `[num_envs * (steps + 1), ...]`.

    The envs start from the task's default reset and goal distributions and take uniform random actions
    through the default action mapping, so a candidate is checked on moving, varied states (a reward that
    divides by a velocity, or takes a log of a height, shows its NaN here) and not only on the reference pose.
    MuJoCo C steps the physics, with the default controller at every physics step as in training, and the task
    builds its states from MJX data as in training: no MJX program is compiled, so a validation worker starts in
    seconds (the MJX rollout it replaces compiled for 14-70 s on a 2-core CPU, docs/benchmarks/throughput.md).
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
    def control(data, forces, commands, actions, last, torques, progress):
        return simulator.clip_ctrl(torque(actions, build(data, forces, commands, last, torques, progress)))
    record = jax.jit(build)

    qpos, qvel, commands = begin()
    datas = simulator.mujoco_data(qpos, qvel)
    data, forces = _physics(task, simulator, datas)
    torques, progress = np.zeros((num_envs, nu), np.float32), np.zeros((num_envs,), np.int32)
    states = [record(data, forces, commands, jnp.zeros((num_envs, _action_size(task, nu))), torques, progress)]
    for key in np.asarray(jax.random.split(k_act, steps)):  # rows of a host array: no program per row
        actions, last = act(key)
        for substep in range(simulator.substeps):
            if substep:
                data, forces = _physics(task, simulator, datas)
            torques = np.asarray(control(data, forces, commands, actions, last, torques, progress))
            simulator.mujoco_step(datas, torques)
        progress = progress + 1
        data, forces = _physics(task, simulator, datas)
        states.append(record(data, forces, commands, last, torques, progress))
    # Stacked and checked on the host: jnp would compile a program per field shape (0.6-1 s of a worker's start).
    states = jax.tree.map(lambda *x: np.concatenate([np.asarray(v) for v in x]), *states)
    if not all(np.isfinite(v).all() for v in jax.tree.leaves(states) if np.issubdtype(v.dtype, np.floating)):
        raise RuntimeError(f"{task.name}: the sample rollout under the default shaping is not finite (a task bug)")
    return jax.device_put(states)


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


def validate_candidate(task, simulator, candidate: Candidate, state=None, on_phase=None) -> Candidate:
    """Run every function of `candidate` (its own and the defaults it keeps) on a sample state, checking each
    type's output as the registry says (`envcoder.shaping.api.SHAPING_TYPES`, in `CHECK_ORDER`).

    Raises `CandidateError` with the file, function and reason; returns the candidate validated: with the sizes
    found (`obs_dim`, `action_dim`, `reward_components`, `critic_obs_dim`), as a learner takes it. `on_phase(function,
    what)` is told before each function is traced, compiled and run (the sandbox reports it when a step hangs).
    """
    state = sample_state(task, simulator) if state is None else state
    file = str(candidate.path) if candidate.path else f"<{task.name} defaults>"
    fns = resolve_functions(candidate, task.defaults)
    probe = Probe(file, functools.partial(_run, on_phase=on_phase), task, candidate, state, jax.random.PRNGKey(0),
                  jax.tree.leaves(state)[0].shape[0], simulator.mj_model.nu, simulator.mj_model)
    current = "?"
    try:
        with time_limit(TRACE_TIME_LIMIT_S, "evaluating the candidate on a sample state"):
            for current in CHECK_ORDER:
                shaping_type = SHAPING_TYPES[current]
                if shaping_type.only_if_defined and not defines(candidate, current, task.defaults):
                    continue
                if current == "compute_torque" and on_phase is not None:
                    on_phase(current, "tracing")  # its action size is probed before it is run
                shaping_type.check(probe, fns[current])
    except CandidateError:
        raise
    except KeyError as err:  # a state field the task does not have
        raise CandidateError(file, f"failed on the sample state: KeyError: {_first_line(err)}"
                                   f"{_fields_hint(err, state)}", function=current) from None
    except Exception as err:  # anything the candidate's code raised while running
        raise CandidateError(file, f"failed on the sample state: {type(err).__name__}: {_first_line(err)}",
                             function=current) from None
    return dataclasses.replace(candidate, obs_dim=probe.obs_dim, action_dim=int(probe.action_dim),
                               reward_components=probe.reward_components, critic_obs_dim=probe.critic_obs_dim)


def _fields_hint(err: KeyError, state) -> str:
    """For a key the state lacks: the task's state fields, and the closest one."""
    import difflib

    key = err.args[0] if err.args else None
    fields = sorted(k for k in state if k != "curriculum")
    if not isinstance(key, str) or key in state:
        return ""
    close = difflib.get_close_matches(key, fields, n=1)
    return (f" (the task's state has no field {key!r}" + (f"; did you mean {close[0]!r}" if close else "") +
            f"; its fields: {', '.join(fields)}; `envcoder tasks --task NAME` describes them)")


def _first_line(err: BaseException) -> str:
    """An exception's message without JAX's long explanations and tracebacks-in-text."""
    text = str(err).strip().split("\n")[0]
    return text if len(text) <= 300 else text[:300] + "…"


__all__ = ["validate_candidate", "sample_state", "rollout_states", "split_reward", "infer_action_dim"]
