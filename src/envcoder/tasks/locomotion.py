"""State pieces shared by the legged tasks (Ant, Anymal, Humanoid): a free-floating base with hinge joints.

`root_states` follows Isaac Gym's layout `[pos (3), quat (4), lin vel (3), ang vel (3)]`, all in the world
frame, with the quaternion in MuJoCo order (w, x, y, z).
"""

import jax
import jax.numpy as jnp

from envcoder.shaping.helpers import quat_rotate, quat_rotate_inverse
from envcoder.tasks.base import IsaacName

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


# ---- the names of IsaacGymEnvs' task classes at reward time (rewards written for Isaac Gym) ------------------

def isaac_root_states(state):
    """`root_states` as Isaac Gym holds it: the quaternion in Isaac's order (x, y, z, w)."""
    root = state["root_states"]
    return jnp.concatenate([root[..., 0:3], root[..., 4:7], root[..., 3:4], root[..., 7:13]], axis=-1)


def _constant(value, size):
    """`state -> [E, size]` of `value` for every environment."""
    return lambda state: jnp.broadcast_to(jnp.asarray(value, jnp.float32), (state["progress_buf"].shape[0], size))


def _walker_frame(state, dt):
    """Isaac's `compute_ant_observations` / `compute_humanoid_observations` pieces for the walkers."""
    from envcoder.shaping.helpers import heading_and_up

    root = state["root_states"]
    frame = heading_and_up(root, state["targets"])
    to_target = (state["targets"] - root[..., 0:3]).at[..., 2].set(0.0)
    before = (state["targets"] - (root[..., 0:3] - root[..., 7:10] * dt)).at[..., 2].set(0.0)
    quat = root[..., 3:7]
    frame.update(potentials=-jnp.linalg.norm(to_target, axis=-1) / dt,
                 prev_potentials=-jnp.linalg.norm(before, axis=-1) / dt,
                 up_vec=quat_rotate(quat, jnp.broadcast_to(jnp.array([0.0, 0.0, 1.0]), root[..., 0:3].shape)),
                 heading_vec=quat_rotate(quat, jnp.broadcast_to(jnp.array([1.0, 0.0, 0.0]), root[..., 0:3].shape)))
    return frame


def _sensors(state):
    """Isaac's force sensors on the feet, `[E, 6 × feet]`: each foot's contact force (world frame) and a zero torque
    (envcoder's models measure no torque at the feet)."""
    forces = state["contact_forces"]
    return jnp.concatenate([forces, jnp.zeros_like(forces)], axis=-1).reshape(forces.shape[0], -1)


def walker_isaac_names(*, dt, num_dof, scales, torque_scale, torques_name, gear_name, start_height):
    """The attributes of IsaacGymEnvs' Ant or Humanoid at reward time (after `compute_observations`), by name.

    `scales`: the task's `cfg["env"]` values (`dof_vel_scale`, `contact_force_scale`, ...); `torque_scale`: the
    observation's scale of `torques_name` (Humanoid's `dof_force_tensor`; None for the Ant, whose observation has
    none); `gear_name`: what Isaac calls the motors' efforts (`joint_gears`, `motor_efforts`); `start_height`: the
    torso's height in Isaac's start pose."""
    def observation(state):
        frame = _walker_frame(state, dt)
        num_envs = state["root_states"].shape[0]
        angvel = frame["angvel_loc"] * scales.get("angular_velocity_scale", 1.0)
        parts = [state["root_states"][..., 2:3], frame["vel_loc"], angvel, frame["yaw"][..., None],
                 frame["roll"][..., None], frame["angle_to_target"][..., None], frame["up_proj"][..., None],
                 frame["heading_proj"][..., None],
                 unscale_joints(state), state["dof_vel"] * scales["dof_vel_scale"]]
        if torque_scale is not None:
            parts.append(state["torques"] * torque_scale)
        parts += [_sensors(state).reshape(num_envs, -1) * scales["contact_force_scale"], state["actions"][..., :num_dof]]
        return jnp.concatenate(parts, axis=-1)

    def unscale_joints(state):
        lower, upper = state["dof_limits_lower"], state["dof_limits_upper"]
        return (2.0 * state["dof_pos"] - upper - lower) / (upper - lower)

    frame_name = lambda key: (lambda state: _walker_frame(state, dt)[key])  # noqa: E731
    names = {
        "root_states": IsaacName(isaac_root_states, "[E, 13]", "m, -, m/s, rad/s", "torso position, quaternion "
                                 "(x, y, z, w: Isaac's order), linear and angular velocity in the world frame"),
        "dof_pos": IsaacName(lambda s: s["dof_pos"], f"[E, {num_dof}]", "rad", "joint angles"),
        "dof_vel": IsaacName(lambda s: s["dof_vel"], f"[E, {num_dof}]", "rad/s", "joint velocities"),
        "dof_limits_lower": IsaacName(lambda s: s["dof_limits_lower"], f"[E, {num_dof}]", "rad",
                                      "lower joint limits (Isaac's is [num_dof]; the same for every environment)"),
        "dof_limits_upper": IsaacName(lambda s: s["dof_limits_upper"], f"[E, {num_dof}]", "rad", "upper joint limits"),
        "targets": IsaacName(lambda s: s["targets"], "[E, 3]", "m", "walk target (1000, 0, 0) unless a candidate's "
                                                                    "sample_goal moves it"),
        "target_dirs": IsaacName(_constant([1.0, 0.0, 0.0], 3), "[E, 3]", "-", "(1, 0, 0), as Isaac's task sets it"),
        "potentials": IsaacName(frame_name("potentials"), "[E]", "m/s", "-(horizontal distance to the target) / dt"),
        "prev_potentials": IsaacName(frame_name("prev_potentials"), "[E]", "m/s",
                                     "the same one control step earlier, from the torso's velocity (Isaac keeps the "
                                     "last step's; they agree while the velocity holds over the step)"),
        "up_vec": IsaacName(frame_name("up_vec"), "[E, 3]", "-", "the torso's up axis in the world frame"),
        "heading_vec": IsaacName(frame_name("heading_vec"), "[E, 3]", "-", "the torso's forward axis in the world "
                                                                          "frame"),
        "inv_start_rot": IsaacName(_constant([0.0, 0.0, 0.0, 1.0], 4), "[E, 4]", "-",
                                   "inverse of the start orientation: the identity (x, y, z, w)"),
        "basis_vec0": IsaacName(_constant([1.0, 0.0, 0.0], 3), "[E, 3]", "-", "(1, 0, 0): the body's forward axis"),
        "basis_vec1": IsaacName(_constant([0.0, 0.0, 1.0], 3), "[E, 3]", "-", "(0, 0, 1): the body's up axis"),
        "dt": IsaacName(lambda s: dt, "float", "s", f"the control step, {dt:.4g} s"),
        "actions": IsaacName(lambda s: s["actions"][..., :num_dof], f"[E, {num_dof}]", "-",
                             "the policy's last action in [-1, 1]"),
        "obs_buf": IsaacName(observation, f"[E, {1 + 3 + 3 + 5 + 2 * num_dof + (num_dof if torque_scale else 0)}"
                                          f" + feet × 6 + {num_dof}]", "-", "Isaac's observation in Isaac's column "
                             "order (force sensors: each foot's contact force, zero torques)"),
        "progress_buf": IsaacName(lambda s: s["progress_buf"], "[E]", "steps", "control steps since the reset"),
        "reset_buf": IsaacName(lambda s: jnp.zeros_like(s["progress_buf"]), "[E]", "-",
                               "zeros: envcoder ends episodes with the task's compute_terminal"),
        "vec_sensor_tensor": IsaacName(_sensors, "[E, feet × 6]", "N, N·m", "force sensors on the feet: each foot's "
                                       "contact force (world frame) and a zero torque"),
        gear_name: IsaacName(lambda s: s["motor_efforts"], f"[E, {num_dof}]", "N·m", "each motor's torque limit"),
        "initial_dof_pos": IsaacName(lambda s: jnp.clip(jnp.zeros_like(s["dof_pos"]), s["dof_limits_lower"],
                                                        s["dof_limits_upper"]), f"[E, {num_dof}]", "rad",
                                     "joint angles at reset before noise: 0 clipped to the limits"),
        "initial_dof_vel": IsaacName(lambda s: jnp.zeros_like(s["dof_vel"]), f"[E, {num_dof}]", "rad/s", "zeros"),
        "initial_root_states": IsaacName(
            _constant([0.0, 0.0, start_height, 0.0, 0.0, 0.0, 1.0] + [0.0] * 6, 13), "[E, 13]", "m, -, m/s, rad/s",
            f"Isaac's start pose: (0, 0, {start_height:g}), the identity rotation (x, y, z, w), no velocity"),
        "start_rotation": IsaacName(lambda s: jnp.asarray([0.0, 0.0, 0.0, 1.0]), "[4]", "-",
                                    "the start orientation (x, y, z, w): the identity"),
        "dof_state": IsaacName(lambda s: jnp.stack([s["dof_pos"], s["dof_vel"]], -1).reshape(-1, 2),
                               f"[E × {num_dof}, 2]", "rad, rad/s", "each joint's angle and velocity, environments "
                               "one after another, as Isaac's flat DOF state tensor"),
        "plane_static_friction": IsaacName(lambda s: 1.0, "float", "-", "1.0, from the task's IsaacGymEnvs config"),
        "plane_dynamic_friction": IsaacName(lambda s: 1.0, "float", "-", "1.0, from the task's IsaacGymEnvs config"),
        "plane_restitution": IsaacName(lambda s: 0.0, "float", "-", "0.0, from the task's IsaacGymEnvs config"),
        "torso_index": IsaacName(lambda s: 0, "int", "-", "0"),
        "up_axis_idx": IsaacName(lambda s: 2, "int", "-", "2: z is up"),
        "num_dof": IsaacName(lambda s: num_dof, "int", "-", f"{num_dof}"),
        "num_envs": IsaacName(lambda s: s["progress_buf"].shape[0], "int", "-", "environments in the batch"),
        "num_actions": IsaacName(lambda s: num_dof, "int", "-", f"{num_dof}: one action per joint"),
        "num_obs": IsaacName(lambda s: observation(s).shape[-1], "int", "-", "the width of obs_buf"),
        "device": IsaacName(lambda s: "cpu", "str", "-", "a device name, ignored (envcoder places the arrays)"),
    }
    if torques_name is not None:
        names[torques_name] = IsaacName(lambda s: s["torques"], f"[E, {num_dof}]", "N·m",
                                        "the joints' torques of the last step")
    if gear_name == "motor_efforts":
        names["max_motor_effort"] = IsaacName(lambda s: jnp.max(s["motor_efforts"]), "float", "N·m",
                                              "the largest motor effort")
    for key, value in scales.items():
        names[key] = IsaacName(lambda s, v=value: v, "float", "-", f"{value:g}, from the task's IsaacGymEnvs config")
    return names
