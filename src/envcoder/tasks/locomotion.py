"""State pieces shared by the legged tasks (Ant, Anymal, Humanoid): a free-floating base with hinge joints.

`root_states` follows Isaac Gym's layout `[pos (3), quat (4), lin vel (3), ang vel (3)]`, all in the world
frame, with the quaternion in MuJoCo order (w, x, y, z).
"""

import jax
import jax.numpy as jnp

from envcoder.shaping.helpers import quat_rotate, quat_rotate_inverse

ROOT_STATES_MEANING = ("position (3), orientation quaternion (w, x, y, z) (4), linear velocity in the world "
                       "frame (3), angular velocity in the world frame (3)")


def root_states(data):
    """`[13]` from MJX data of a model whose first joint is the free base joint."""
    quat = data.qpos[3:7]
    # MuJoCo's free joint gives the angular velocity in the body frame; Isaac Gym's root_states holds it in
    # the world frame, which is what ported rewards expect.
    return jnp.concatenate([data.qpos[0:7], data.qvel[0:3], quat_rotate(quat, data.qvel[3:6])])


def physics_from_state(state):
    """`state -> (qpos, qvel)` from `root_states`, `dof_pos` and `dof_vel` (the quaternion is renormalized)."""
    root = state["root_states"]
    quat = root[..., 3:7] / jnp.linalg.norm(root[..., 3:7], axis=-1, keepdims=True)
    qpos = jnp.concatenate([root[..., 0:3], quat, state["dof_pos"]], axis=-1)
    qvel = jnp.concatenate([root[..., 7:10], quat_rotate_inverse(quat, root[..., 10:13]), state["dof_vel"]], axis=-1)
    return qpos, qvel


def dof_limits(sim):
    """`(lower, upper)` `[num_dof]` of the hinge joints after the free base joint, in qpos order."""
    ranges = jnp.asarray(sim.mj_model.jnt_range[1:], jnp.float32)
    return ranges[:, 0], ranges[:, 1]


def motor_efforts(sim):
    """`[nu]`: each motor's torque limit in N·m (its control range; envcoder's motors have gear 1)."""
    return jnp.asarray(sim.mj_model.actuator_ctrlrange[:, 1], jnp.float32)


def walker_state(sim, data, contact_forces, commands, actions, torques, progress_buf):
    """The state of Isaac Gym-style walkers (Ant, Humanoid): `commands` is the walk target, `contact_forces`
    those of the feet (the task's `contact_geoms`)."""
    lower, upper = dof_limits(sim)
    return {
        "root_states": root_states(data),
        "dof_pos": data.qpos[7:],
        "dof_vel": data.qvel[6:],
        "dof_limits_lower": lower,
        "dof_limits_upper": upper,
        "motor_efforts": motor_efforts(sim),
        "targets": commands,
        "contact_forces": contact_forces,
        "actions": actions,
        "torques": torques,
        "progress_buf": progress_buf,
    }


# ---- default reset and goal of the walkers (IsaacGymEnvs Ant and Humanoid) ----------------------

def sample_initial_state(key, state):
    k_pos, k_vel = jax.random.split(key)
    noise = jax.random.uniform(k_pos, state["dof_pos"].shape, minval=-0.2, maxval=0.2)
    dof_pos = jnp.clip(state["dof_pos"] + noise, state["dof_limits_lower"], state["dof_limits_upper"])
    dof_vel = jax.random.uniform(k_vel, state["dof_vel"].shape, minval=-0.1, maxval=0.1)
    return {"dof_pos": dof_pos, "dof_vel": dof_vel}


def sample_goal(key, state):
    return jnp.broadcast_to(jnp.array([1000.0, 0.0, 0.0]), (state["dof_pos"].shape[0], 3))
