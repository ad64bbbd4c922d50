"""Anymal: the ANYmal C quadruped follows random base-velocity commands on flat ground.

Defaults follow the IsaacGymEnvs Anymal task: PD position control around the default joint angles
(stiffness 85 N·m/rad, damping 2 N·m·s/rad, action scale 0.5), random commands (vx in [-2, 2] m/s,
vy in [-1, 1] m/s, yaw rate in [-1, 1] rad/s) drawn at each reset, the 48-dim observation with its
normalization scales, and the reward of linear-velocity xy tracking, yaw-rate tracking and a torque
penalty, scaled by the 0.02 s control step and clipped at 0. Control runs at 50 Hz (4 physics steps of
5 ms); as in legged_gym, `compute_torque` is evaluated at every physics step with the action held.
"""

from pathlib import Path

import jax
import jax.numpy as jnp

from envcoder.shaping.helpers import quat_rotate_inverse
from envcoder.tasks import locomotion
from envcoder.tasks.base import IsaacName, Fitness, StateField, Task, action_field

JOINTS = tuple(f"{leg}_{joint}" for leg in ("LF", "LH", "RF", "RH") for joint in ("HAA", "HFE", "KFE"))
FEET = ("LF_FOOT", "LH_FOOT", "RF_FOOT", "RH_FOOT")
DEFAULT_DOF_POS = (0.03, 0.4, -0.8, 0.03, -0.4, 0.8, -0.03, 0.4, -0.8, -0.03, -0.4, 0.8)
"""IsaacGymEnvs' default joint angles (rad), in `JOINTS` order: the PD targets for a zero action."""
SCALES = {"lin_vel_scale": 2.0, "ang_vel_scale": 0.25, "dof_pos_scale": 1.0, "dof_vel_scale": 0.05}
"""IsaacGymEnvs' observation normalization scales, given to shaping functions as state fields."""


def build_state(sim, data, contact_forces, commands, actions, torques, progress_buf):
    state = {
        "root_states": locomotion.root_states(data),
        "dof_pos": data.qpos[7:],
        "dof_vel": data.qvel[6:],
        "default_dof_pos": jnp.asarray(DEFAULT_DOF_POS, jnp.float32),
        "gravity_vec": jnp.array([0.0, 0.0, -1.0]),
        "commands": commands,
        "contact_forces": contact_forces,
        "actions": actions,
        "torques": torques,
        "progress_buf": progress_buf,
    }
    state.update({name: jnp.full((1,), value, jnp.float32) for name, value in SCALES.items()})
    return state


# ---- default shaping (the IsaacGymEnvs Anymal task) ---------------------------------------------

def compute_reward(state):
    base_quat = state["root_states"][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 10:13])
    commands = state["commands"]
    lin_vel_error = jnp.sum((commands[:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (commands[:, 2] - base_ang_vel[:, 2]) ** 2
    dt = 0.02  # IsaacGymEnvs multiplies every reward scale by the control step
    lin_vel_xy = jnp.exp(-lin_vel_error / 0.25) * 1.0 * dt
    ang_vel_z = jnp.exp(-ang_vel_error / 0.25) * 0.5 * dt
    torque = jnp.sum(state["torques"] ** 2, axis=1) * -0.000025 * dt
    reward = jnp.clip(lin_vel_xy + ang_vel_z + torque, 0.0, None)
    return reward, {"lin_vel_xy": lin_vel_xy, "ang_vel_z": ang_vel_z, "torque": torque}


def compute_observation(state):
    base_quat = state["root_states"][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 7:10]) * state["lin_vel_scale"]
    base_ang_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 10:13]) * state["ang_vel_scale"]
    projected_gravity = quat_rotate_inverse(base_quat, state["gravity_vec"])
    commands_scale = jnp.concatenate([state["lin_vel_scale"], state["lin_vel_scale"], state["ang_vel_scale"]], axis=1)
    dof_pos_scaled = (state["dof_pos"] - state["default_dof_pos"]) * state["dof_pos_scale"]
    return jnp.concatenate([
        base_lin_vel, base_ang_vel, projected_gravity, state["commands"][:, :3] * commands_scale,
        dof_pos_scaled, state["dof_vel"] * state["dof_vel_scale"], state["actions"][:, :12],
    ], axis=-1)


def compute_torque(action, state):
    # PD control towards the default joint angles plus the scaled action (stiffness 85, damping 2, scale 0.5).
    targets = 0.5 * action + state["default_dof_pos"]
    return 85.0 * (targets - state["dof_pos"]) - 2.0 * state["dof_vel"]


def compute_terminal(state):
    # IsaacGymEnvs ends an episode when the base or a knee touches the ground; in this model only the feet
    # collide, so the same events are read from the base's height and tilt.
    base_height = state["root_states"][:, 2]
    up_z = quat_rotate_inverse(state["root_states"][:, 3:7], -state["gravity_vec"])[:, 2]
    return (base_height < 0.3) | (up_z < 0.5)


def sample_initial_state(key, state):
    k_pos, k_vel = jax.random.split(key)
    shape = state["dof_pos"].shape
    dof_pos = state["default_dof_pos"] * jax.random.uniform(k_pos, shape, minval=0.5, maxval=1.5)
    dof_vel = jax.random.uniform(k_vel, shape, minval=-0.1, maxval=0.1)
    return {"dof_pos": dof_pos, "dof_vel": dof_vel}


def sample_goal(key, state):
    low = jnp.array([-2.0, -1.0, -1.0])  # vx (m/s), vy (m/s), yaw rate (rad/s)
    high = jnp.array([2.0, 1.0, 1.0])
    return jax.random.uniform(key, (state["dof_pos"].shape[0], 3), minval=low, maxval=high)


# ---- fitness ------------------------------------------------------------------------------------

def tracking_error(state):
    base_lin_vel = quat_rotate_inverse(state["root_states"][:, 3:7], state["root_states"][:, 7:10])
    return jnp.linalg.norm(state["commands"][:, :2] - base_lin_vel[:, :2], axis=1)


def standing_still_error(state):
    return jnp.linalg.norm(state["commands"][:, :2], axis=1)


def forward_speed(state):
    return state["root_states"][:, 7]


def isaac_success(state):
    """IsaacGymEnvs' and Eureka's Anymal success (`consecutive_successes`): minus the squared errors of the base's
    planar velocity and yaw rate against the command, in the base frame and unscaled."""
    quat = state["root_states"][:, 3:7]
    base_lin_vel = quat_rotate_inverse(quat, state["root_states"][:, 7:10])
    base_ang_vel = quat_rotate_inverse(quat, state["root_states"][:, 10:13])
    lin_vel_error = jnp.sum((state["commands"][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    return -(lin_vel_error + (state["commands"][:, 2] - base_ang_vel[:, 2]) ** 2)


def isaac_success_standing_still(state):
    return -jnp.sum(state["commands"] ** 2, axis=1)


HELD_OUT = {"friction": (0.5, 1.5), "mass": (0.8, 1.2), "push_velocity": (0.5, 0.5), "push_interval": (250.0, 250.0)}
"""The held-out randomization of `robust_tracking`, in ranges of `envcoder.sim.randomization.FIELDS`: friction
±50%, every body's mass ±20%, and a push of up to ±0.5 m/s in each horizontal direction every 5 s."""


def held_out_physics(key, params):
    keys = jax.random.split(key, len(HELD_OUT))
    return {name: jax.random.uniform(k, (), minval=low, maxval=high)
            for (name, (low, high)), k in zip(HELD_OUT.items(), keys)}


ISAAC_BODIES = 13
"""Bodies of IsaacGymEnvs' ANYmal after it merges fixed joints: base, then HIP, THIGH, SHANK (with the foot) per leg in
the order LF, LH, RF, RH."""
ISAAC_FEET, ISAAC_KNEES = (3, 6, 9, 12), (2, 5, 8, 11)


def _isaac_contact_forces(state):
    """Isaac's `contact_forces` `[E, 13, 3]`: the feet's (on the SHANK bodies) and zero for the bodies that never
    touch anything in envcoder's model (only the feet collide)."""
    forces = jnp.zeros(state["contact_forces"].shape[:1] + (ISAAC_BODIES, 3), state["contact_forces"].dtype)
    return forces.at[:, jnp.array(ISAAC_FEET)].set(state["contact_forces"])


def _isaac_observation(state):
    """IsaacGymEnvs Anymal's 48 observations, in its order and scales."""
    root = state["root_states"]
    quat = root[:, 3:7]
    scale = jnp.array([SCALES["lin_vel_scale"], SCALES["lin_vel_scale"], SCALES["ang_vel_scale"]])
    return jnp.concatenate([
        quat_rotate_inverse(quat, root[:, 7:10]) * SCALES["lin_vel_scale"],
        quat_rotate_inverse(quat, root[:, 10:13]) * SCALES["ang_vel_scale"],
        quat_rotate_inverse(quat, jnp.broadcast_to(jnp.array([0.0, 0.0, -1.0]), root[:, 0:3].shape)),
        state["commands"] * scale,
        (state["dof_pos"] - state["default_dof_pos"]) * SCALES["dof_pos_scale"],
        state["dof_vel"] * SCALES["dof_vel_scale"],
        state["actions"][:, :12],
    ], axis=-1)


def _index(values):
    return lambda state: jnp.asarray(values, jnp.int32)


ISAAC_NAMES = {
    "root_states": IsaacName(locomotion.isaac_root_states, "[E, 13]", "m, -, m/s, rad/s", "base position, "
                             "quaternion (x, y, z, w: Isaac's order), linear and angular velocity in the world frame"),
    "commands": IsaacName(lambda s: s["commands"], "[E, 3]", "m/s, m/s, rad/s", "commanded vx, vy (base frame), "
                                                                                "yaw rate"),
    "commands_x": IsaacName(lambda s: s["commands"][:, 0], "[E]", "m/s", "commanded vx"),
    "commands_y": IsaacName(lambda s: s["commands"][:, 1], "[E]", "m/s", "commanded vy"),
    "commands_yaw": IsaacName(lambda s: s["commands"][:, 2], "[E]", "rad/s", "commanded yaw rate"),
    "dof_pos": IsaacName(lambda s: s["dof_pos"], "[E, 12]", "rad", "joint angles: " + ", ".join(JOINTS)),
    "dof_vel": IsaacName(lambda s: s["dof_vel"], "[E, 12]", "rad/s", "joint velocities"),
    "default_dof_pos": IsaacName(lambda s: s["default_dof_pos"], "[E, 12]", "rad", "the default joint angles"),
    "gravity_vec": IsaacName(lambda s: s["gravity_vec"], "[E, 3]", "-", "(0, 0, -1)"),
    "actions": IsaacName(lambda s: s["actions"][:, :12], "[E, 12]", "-", "the policy's last action"),
    "torques": IsaacName(lambda s: s["torques"], "[E, 12]", "N·m", "the joints' torques of the last step"),
    "contact_forces": IsaacName(_isaac_contact_forces, f"[E, {ISAAC_BODIES}, 3]", "N",
                                "net contact force on each of Isaac's 13 bodies (world frame): the feet's at "
                                "feet_indices, zero elsewhere (only the feet collide in envcoder's model)"),
    "feet_indices": IsaacName(_index(ISAAC_FEET), "[4]", "-", "(3, 6, 9, 12): the feet in contact_forces"),
    "knee_indices": IsaacName(_index(ISAAC_KNEES), "[4]", "-", "(2, 5, 8, 11): the thighs in contact_forces"),
    "base_index": IsaacName(lambda s: 0, "int", "-", "0: the base in contact_forces"),
    "obs_buf": IsaacName(_isaac_observation, "[E, 48]", "-", "Isaac's observation in its order and scales"),
    "progress_buf": IsaacName(lambda s: s["progress_buf"], "[E]", "steps", "control steps since the reset"),
    "reset_buf": IsaacName(lambda s: jnp.zeros_like(s["progress_buf"]), "[E]", "-",
                           "zeros: envcoder ends episodes with the task's compute_terminal"),
    "dt": IsaacName(lambda s: 0.02, "float", "s", "the control step, 0.02 s"),
    "max_episode_length": IsaacName(lambda s: 2500, "float", "steps", "2500 (50 s)"),
    "max_episode_length_s": IsaacName(lambda s: 50.0, "float", "s", "50"),
    "rew_scales": IsaacName(lambda s: {"lin_vel_xy": 1.0 * 0.02, "ang_vel_z": 0.5 * 0.02, "torque": -0.000025 * 0.02},
                            "dict", "-", "Isaac's reward scales times dt: lin_vel_xy 0.02, ang_vel_z 0.01, "
                                         "torque -5e-7"),
    "action_scale": IsaacName(lambda s: 0.5, "float", "rad", "0.5: an action's scale to a joint target"),
    "Kp": IsaacName(lambda s: 85.0, "float", "N·m/rad", "85: the joints' PD stiffness"),
    "Kd": IsaacName(lambda s: 2.0, "float", "N·m·s/rad", "2: the joints' PD damping"),
    "up_axis_idx": IsaacName(lambda s: 2, "int", "-", "2: z is up"),
    "num_dof": IsaacName(lambda s: 12, "int", "-", "12"),
    "num_envs": IsaacName(lambda s: s["progress_buf"].shape[0], "int", "-", "environments in the batch"),
    "num_actions": IsaacName(lambda s: 12, "int", "-", "12: one joint target per joint"),
    "num_obs": IsaacName(lambda s: 48, "int", "-", "48: the width of obs_buf"),
    "device": IsaacName(lambda s: "cpu", "str", "-", "a device name, ignored (envcoder places the arrays)"),
    "dof_state": IsaacName(lambda s: jnp.stack([s["dof_pos"], s["dof_vel"]], -1).reshape(-1, 2), "[E × 12, 2]",
                           "rad, rad/s", "each joint's angle and velocity, environments one after another, as "
                           "Isaac's flat DOF state tensor"),
    "initial_root_states": IsaacName(
        lambda s: jnp.broadcast_to(jnp.asarray([0.0, 0.0, 0.62, 0.0, 0.0, 0.0, 1.0] + [0.0] * 6),
                                   (s["progress_buf"].shape[0], 13)), "[E, 13]", "m, -, m/s, rad/s",
        "the config's baseInitState: (0, 0, 0.62), the identity rotation (x, y, z, w), no velocity"),
    "plane_static_friction": IsaacName(lambda s: 1.0, "float", "-", "1.0, from the task's IsaacGymEnvs config"),
    "plane_dynamic_friction": IsaacName(lambda s: 1.0, "float", "-", "1.0, from the task's IsaacGymEnvs config"),
    "plane_restitution": IsaacName(lambda s: 0.0, "float", "-", "0.0, from the task's IsaacGymEnvs config"),
    "command_x_range": IsaacName(lambda s: [-2.0, 2.0], "list", "m/s", "[-2, 2]: the commanded vx's range"),
    "command_y_range": IsaacName(lambda s: [-1.0, 1.0], "list", "m/s", "[-1, 1]: the commanded vy's range"),
    "command_yaw_range": IsaacName(lambda s: [-1.0, 1.0], "list", "rad/s", "[-1, 1]: the commanded yaw rate's range"),
    **{name: IsaacName(lambda s, v=value: v, "float", "-", f"{value:g}: the observation's scale")
       for name, value in SCALES.items()},
}
"""IsaacGymEnvs Anymal's attributes at reward time (a reward written for Isaac Gym takes them by name)."""


TASK = Task(
    name="Anymal",
    description="Make the ANYmal C quadruped follow base-velocity commands (vx, vy, yaw rate) on flat ground.",
    model_file=Path(__file__).parent / "assets" / "anymal.xml",
    substeps=4,
    max_episode_length=2500,
    num_commands=3,
    state_fields={
        "root_states": StateField("[E, 13]", "m, -, m/s, rad/s", "base " + locomotion.ROOT_STATES_MEANING),
        "dof_pos": StateField("[E, 12]", "rad", "joint angles: " + ", ".join(JOINTS)),
        "dof_vel": StateField("[E, 12]", "rad/s", "joint velocities, same order"),
        "default_dof_pos": StateField("[E, 12]", "rad", "default joint angles (PD targets for a zero action), "
                                                        "same order"),
        "gravity_vec": StateField("[E, 3]", "-", "unit gravity direction in the world frame, (0, 0, -1)"),
        "commands": StateField("[E, 3]", "m/s, m/s, rad/s", "commanded base velocity from sample_goal: vx, vy in "
                                                           "the base frame, yaw rate"),
        "contact_forces": StateField("[E, 4, 3]", "N", "net contact force of the floor on each foot (LF, LH, RF, "
                                                       "RH), world frame; only the feet collide in this model; zero "
                                                       "in an episode's first state (a reset places the robot "
                                                       "without a physics step)"),
        "actions": action_field(12),
        "torques": StateField("[E, 12]", "N·m", "joint torques of the last physics step (after the 80 N·m limit)"),
        "progress_buf": StateField("[E]", "steps", "control steps (0.02 s) since the episode began"),
        **{name: StateField("[E, 1]", "-", f"observation scale {value} of IsaacGymEnvs' Anymal")
           for name, value in SCALES.items()},
    },
    build_state=build_state,
    contact_geoms=FEET,
    physics_from_state=locomotion.physics_from_state,
    isaac_names=ISAAC_NAMES,
    defaults={
        "compute_reward": compute_reward,
        "compute_observation": compute_observation,
        "compute_torque": compute_torque,
        "compute_terminal": compute_terminal,
        "sample_initial_state": sample_initial_state,
        "sample_goal": sample_goal,
    },
    fitness={
        "tracking": Fitness(
            tracking_error,
            "mean linear-velocity tracking error |command_xy - base velocity_xy| in m/s (base frame) over the "
            "2500-step (50 s) episode; after a fall the remaining steps count the error of standing still; "
            "lower is better",
            higher_is_better=False, after_failure=standing_still_error, bounds=(0.0, None)),
        "robust_tracking": Fitness(
            tracking_error,
            "the tracking error (as `tracking`, m/s, lower is better) of the final evaluation under a fixed "
            "held-out randomization, whatever the candidate trained under: friction ×[0.5, 1.5], every body's mass "
            "×[0.8, 1.2], a push of up to ±0.5 m/s (x and y) every 250 steps; training metrics use the candidate's "
            "own physics",
            higher_is_better=False, after_failure=standing_still_error, physics=held_out_physics,
            bounds=(0.0, None)),
        "forward_speed": Fitness(
            forward_speed,
            "mean forward (+x, world) velocity of the base in m/s over the 2500-step (50 s) episode; a fall ends "
            "the episode and the remaining time counts as standing still; higher is better"),
        "isaac_success": Fitness(
            isaac_success,
            "the field's success, as IsaacGymEnvs' and Eureka's Anymal report it (`consecutive_successes`, the "
            "papers' Anymal column): minus the squared tracking errors, |command_xy - base velocity_xy|² + "
            "(command_yaw - base yaw rate)² in (m/s)² and (rad/s)² (base frame), per control step, averaged over "
            "the 2500-step (50 s) episode; after a fall the remaining steps count the errors of standing still; "
            "higher is better, 0 at best",
            after_failure=isaac_success_standing_still, bounds=(None, 0.0)),
    },
)
