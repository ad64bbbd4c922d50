"""Every task: state fields as documented, jitted reset/step, no NaN under random actions."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envcoder.shaping.validate import sample_state
from envcoder.sim import Simulator
from envcoder.tasks import TASKS, get_task, UnknownTaskError


@pytest.mark.parametrize("name", sorted(TASKS))
def test_state_fields_random_rollout_and_defaults(name):
    task = get_task(name)
    sim = Simulator(task.model_file, task.substeps)
    num_envs, steps = 8, 60
    state = sample_state(task, sim, num_envs)
    assert set(state) == set(task.state_fields)
    for field, doc in task.state_fields.items():
        dims = re.findall(r"\w+", doc.shape)
        assert state[field].shape[0] == num_envs
        assert len(dims) == state[field].ndim, field
        for dim, size in zip(dims[1:], state[field].shape[1:]):
            if dim.isdigit():
                assert int(dim) == size, (field, doc.shape, state[field].shape)

    defaults = task.defaults
    nu = sim.mj_model.nu

    @jax.jit
    def rollout(key):
        reset = defaults["sample_initial_state"](key, state)
        qpos, qvel = task.physics_from_state({**state, **reset})
        data = jax.vmap(sim.reset)(qpos, qvel)

        def step(data, k):
            action = jax.random.uniform(k, (num_envs, nu), minval=-1, maxval=1)
            s = task.build_state(data, state["commands"], action, action, state["progress_buf"])
            data = jax.vmap(sim.step)(data, defaults["compute_torque"](action, s))
            s = task.build_state(data, state["commands"], action, action, state["progress_buf"])
            reward = defaults["compute_reward"](s)
            reward = reward[0] if isinstance(reward, tuple) else reward
            return data, (reward, defaults["compute_observation"](s), task.fitness_step(s), data.qpos)
        return jax.lax.scan(step, data, jax.random.split(key, steps))[1]

    reward, obs, fitness, qpos = rollout(jax.random.PRNGKey(0))
    for array in (reward, obs, fitness, qpos):
        assert bool(jnp.all(jnp.isfinite(array)))
    assert not np.allclose(qpos[0], qpos[-1])  # the random actions moved the robot


def test_unknown_task_lists_known_ones():
    with pytest.raises(UnknownTaskError, match="known tasks: Ant, Cartpole"):
        get_task("Humanoidd")


def test_ant_root_states_round_trip_through_physics():
    task = get_task("Ant")
    sim = Simulator(task.model_file, task.substeps)
    state = sample_state(task, sim, 2)
    root = state["root_states"].at[:, 3:7].set(jnp.array([0.9238795, 0.0, 0.0, 0.3826834]))  # 45° yaw
    root = root.at[:, 7:13].set(jnp.array([1.0, 0.5, 0.0, 0.1, 0.2, 0.3]))
    qpos, qvel = task.physics_from_state({**state, "root_states": root})
    data = jax.vmap(sim.reset)(qpos, qvel)
    back = task.build_state(data, state["commands"], state["actions"], state["torques"], state["progress_buf"])
    np.testing.assert_allclose(back["root_states"], root, atol=1e-5)
