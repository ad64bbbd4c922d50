"""`envcoder tasks --check my_task.py`: what is wrong with a task one is writing, a line each, naming the field or
the function (here, beside the candidates' checks it puts the task's own shaping through): a model that does not load, state fields whose shapes do not match their declaration (or that one
side lacks), a `compute_torque` whose size is not the model's actuators', a reset that puts the robot in collision,
a fitness that reads a field the state lacks, a default shaping that fails the candidates' own checks."""

from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp
import numpy as np

CHECK_ENVS = 4
"""Environments of the checks' states."""

COLLISION_DEPTH = 0.01
"""m: a contact deeper than this in a reset state is a collision (a foot resting on the floor is at about 0)."""

REQUIRED = ("compute_reward", "compute_observation", "compute_torque", "compute_terminal", "sample_initial_state",
            "sample_goal")
"""The default shaping functions every task has."""


def _line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".rstrip(": ")


def declared_shape(shape: str) -> tuple | None:
    """`"[E, 13, 3]"` → `(13, 3)` (the sizes after the environment axis); None where a size is not a number."""
    sizes = [s.strip() for s in shape.strip("[] ").split(",")][1:]
    if not all(re.fullmatch(r"\d+", s) for s in sizes):
        return None
    return tuple(int(s) for s in sizes)


def check_task(task) -> list[str]:
    """What is wrong with `task`, a line each (empty: nothing found)."""
    import mujoco

    from envcoder.sim import Simulator

    try:
        model = mujoco.MjModel.from_xml_path(str(task.model_file))
    except Exception as err:  # noqa: BLE001 - the user's model: what MuJoCo says
        return [f"model_file {task.model_file}: does not load: {_line(err)}"]
    problems = [f"defaults: no {api} (every task has {', '.join(REQUIRED)})" for api in REQUIRED
                if api not in task.defaults]
    if problems:
        return problems
    simulator = Simulator(task.model_file, task.substeps)
    from envcoder.candidates.validate import sample_state

    try:
        state = jax.device_get(sample_state(task, simulator, CHECK_ENVS))
    except Exception as err:  # noqa: BLE001
        return problems + [f"build_state: fails on the model's reference pose: {_line(err)}"]
    problems += _fields(task, state)
    problems += _torque(task, state, model.nu)
    problems += _reset(task, simulator, state)
    problems += _fitness(task, state)
    if not problems:
        problems += _default_shaping(task, simulator)
    return problems


def _fields(task, state: dict) -> list[str]:
    problems = []
    for name, field in task.state_fields.items():
        if name not in state:
            problems.append(f"state field {name}: declared in state_fields, but build_state does not return it")
            continue
        want, got = declared_shape(field.shape), tuple(np.shape(state[name]))[1:]
        if want is not None and want != got:
            problems.append(f"state field {name}: declared {field.shape}, build_state gives "
                            f"[E{''.join(f', {d}' for d in got)}]")
    problems += [f"state field {name}: build_state returns it, but state_fields does not declare it (shape, units, "
                 "meaning)" for name in state if name not in task.state_fields]
    return problems


def _torque(task, state: dict, nu: int) -> list[str]:
    actions = jnp.zeros((CHECK_ENVS,), jnp.int32) if task.discrete else jnp.zeros((CHECK_ENVS, nu))
    try:
        torque = np.shape(task.defaults["compute_torque"](actions, state))
    except Exception as err:  # noqa: BLE001
        return [f"compute_torque: fails on the reference pose: {_line(err)}"]
    if torque != (CHECK_ENVS, nu):
        return [f"compute_torque: returns {list(torque)} for {CHECK_ENVS} environments; the model has {nu} "
                f"actuator(s): return [E, {nu}]"]
    return []


def _reset(task, simulator, state: dict) -> list[str]:
    """A reset state in which two geoms overlap deeper than `COLLISION_DEPTH`, named."""
    import mujoco

    try:
        start = {**state, **task.defaults["sample_initial_state"](jax.random.PRNGKey(0), state)}
        qpos, qvel = (np.asarray(x) for x in task.physics_from_state(start))
    except Exception as err:  # noqa: BLE001
        return [f"sample_initial_state: fails on the reference pose: {_line(err)}"]
    model = simulator.mj_model
    if qpos.shape != (CHECK_ENVS, model.nq):
        return [f"physics_from_state: gives qpos {list(qpos.shape)} for {CHECK_ENVS} environments; the model has "
                f"nq = {model.nq}"]
    data = mujoco.MjData(model)
    deepest: dict[tuple[str, str], float] = {}  # each overlapping pair's deepest overlap over the resets
    floor_depth = 0.0  # the deepest overlap of a robot geom with the world's (the floor): how much higher to start
    self_overlap = False  # two of the robot's own geoms overlap: its joints must start apart
    for e in range(CHECK_ENVS):
        data.qpos[:], data.qvel[:] = qpos[e], qvel[e]
        mujoco.mj_forward(model, data)
        for contact in data.contact[:data.ncon]:
            if contact.dist < -COLLISION_DEPTH:
                pair = tuple(sorted(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g) or f"geom {g}"
                                    for g in contact.geom))
                deepest[pair] = max(deepest.get(pair, 0.0), -contact.dist)
                if 0 in (model.geom_bodyid[contact.geom[0]], model.geom_bodyid[contact.geom[1]]):
                    floor_depth = max(floor_depth, -contact.dist)
                else:
                    self_overlap = True
    if not deepest:
        return []
    pairs = sorted(deepest.items(), key=lambda item: -item[1])
    named = ", ".join(f"{a} and {b} {depth * 100:.1f} cm" for (a, b), depth in pairs[:4])
    more = f" and {len(pairs) - 4} more pair(s)" if len(pairs) > 4 else ""
    advice = ([f"start the robot at least {math.ceil((floor_depth + COLLISION_DEPTH) * 100)} cm higher"]
              if floor_depth else []) + (["set its joints apart"] if self_overlap else [])
    return [f"sample_initial_state: a reset puts geoms into each other, deepest first: {named}{more} "
            f"({' and '.join(advice)})"]


def _fitness(task, state: dict) -> list[str]:
    problems = []
    for name, fitness in task.fitness.items():
        try:
            value = np.shape(fitness.step(state))
        except KeyError as err:
            problems.append(f"fitness {name}: reads {err.args[0]!r}, which the state lacks (it has "
                            f"{', '.join(state)})")
            continue
        except Exception as err:  # noqa: BLE001
            problems.append(f"fitness {name}: fails on the reference pose: {_line(err)}")
            continue
        if value != (CHECK_ENVS,):
            problems.append(f"fitness {name}: returns {list(value)} for {CHECK_ENVS} environments: return [E]")
    return problems


def _default_shaping(task, simulator) -> list[str]:
    """The task's own shaping put through the candidates' checks, on a rollout of itself."""
    from envcoder.candidates import CandidateError, task_default_candidate
    from envcoder.candidates.validate import rollout_states, validate_candidate
    from envcoder.shaping.api import SHAPER_TYPES

    try:
        states = rollout_states(task, simulator)
    except Exception as err:  # noqa: BLE001
        return [f"the default shaping: a rollout of it fails: {_line(err)}"]
    try:
        validate_candidate(task, simulator, task_default_candidate(task, tuple(SHAPER_TYPES)), states)
    except CandidateError as err:
        return [f"the default shaping: {err}"]
    except Exception as err:  # noqa: BLE001
        return [f"the default shaping: {_line(err)}"]
    return []
