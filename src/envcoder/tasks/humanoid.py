"""Humanoid: a 21-joint humanoid that should run forward (+x) without falling.

Defaults follow the IsaacGymEnvs Humanoid task: progress towards a far target (1000 m along +x), an
alive bonus of 2, upright and heading bonuses, action, energy and joints-at-limit costs weighted by
each motor's share of the largest effort, a death cost of -1 and termination when the torso drops
below 0.8 m; torques are the action times the motor efforts. Control at 60 Hz (2 physics steps of
1/120 s). Rewards are the per-step values of Isaac Gym's task (its potential difference is written as
the torso's velocity towards the target, which it equals).
"""

from pathlib import Path

import jax.numpy as jnp

from envcoder.shaping.helpers import heading_and_up, unscale
from envcoder.tasks import locomotion
from envcoder.tasks.base import Fitness, StateField, Task, action_field

JOINTS = ("abdomen_z", "abdomen_y", "abdomen_x",
          "right_hip_x", "right_hip_z", "right_hip_y", "right_knee", "right_ankle_y", "right_ankle_x",
          "left_hip_x", "left_hip_z", "left_hip_y", "left_knee", "left_ankle_y", "left_ankle_x",
          "right_shoulder1", "right_shoulder2", "right_elbow", "left_shoulder1", "left_shoulder2", "left_elbow")
FEET = (("right_right_foot", "left_right_foot"), ("left_left_foot", "right_left_foot"))  # two capsules each
TERMINATION_HEIGHT = 0.8


# ---- default shaping (the IsaacGymEnvs Humanoid task) -------------------------------------------

def compute_reward(state):
    frame = heading_and_up(state["root_states"], state["targets"])
    to_target = state["targets"][:, 0:2] - state["root_states"][:, 0:2]
    direction = to_target / jnp.maximum(jnp.linalg.norm(to_target, axis=-1, keepdims=True), 1e-6)
    progress = jnp.sum(state["root_states"][:, 7:9] * direction, axis=-1)  # m/s towards the target
    heading = jnp.where(frame["heading_proj"] > 0.8, 0.5, 0.5 * frame["heading_proj"] / 0.8)
    up = jnp.where(frame["up_proj"] > 0.93, 0.1, 0.0)
    actions = state["actions"][:, :21]
    effort_ratio = state["motor_efforts"] / jnp.max(state["motor_efforts"], axis=-1, keepdims=True)
    action_cost = 0.01 * jnp.sum(actions ** 2, axis=-1)
    energy_cost = 0.05 * jnp.sum(jnp.abs(actions * 0.1 * state["dof_vel"]) * effort_ratio, axis=-1)
    dof_pos_scaled = unscale(state["dof_pos"], state["dof_limits_lower"], state["dof_limits_upper"])
    at_limit = (jnp.abs(dof_pos_scaled) > 0.98) * 0.25 * (jnp.abs(dof_pos_scaled) - 0.98) / 0.02
    limit_cost = jnp.sum(at_limit * effort_ratio, axis=-1)
    alive = 2.0
    reward = progress + alive + up + heading - action_cost - energy_cost - limit_cost
    reward = jnp.where(state["root_states"][:, 2] < 0.8, -1.0, reward)  # death cost
    return reward, {"progress": progress, "heading": heading, "up": up, "action_cost": -action_cost,
                    "energy_cost": -energy_cost, "joints_at_limit_cost": -limit_cost}


def compute_observation(state):
    root = state["root_states"]
    frame = heading_and_up(root, state["targets"])
    num_envs = root.shape[0]
    return jnp.concatenate([
        root[:, 2:3], frame["vel_loc"], 0.25 * frame["angvel_loc"],
        frame["yaw"][:, None], frame["roll"][:, None], frame["angle_to_target"][:, None],
        frame["up_proj"][:, None], frame["heading_proj"][:, None],
        unscale(state["dof_pos"], state["dof_limits_lower"], state["dof_limits_upper"]),
        0.1 * state["dof_vel"],
        0.01 * state["torques"],
        0.01 * state["contact_forces"].reshape(num_envs, -1),
        state["actions"][:, :21],
    ], axis=-1)


def compute_torque(action, state):
    return state["motor_efforts"] * action


def compute_terminal(state):
    return state["root_states"][:, 2] < 0.8


def forward_speed_upright(state):
    root = state["root_states"]
    upright = (root[:, 2] > TERMINATION_HEIGHT) & (heading_and_up(root, state["targets"])["up_proj"] > 0.7)
    return jnp.where(upright, root[:, 7], 0.0)


TASK = Task(
    name="Humanoid",
    description="Make the humanoid run forward (+x) as fast as possible without falling.",
    model_file=Path(__file__).parent / "assets" / "humanoid.xml",
    substeps=2,
    max_episode_length=1000,
    num_commands=3,
    state_fields={
        "root_states": StateField("[E, 13]", "m, -, m/s, rad/s", "torso " + locomotion.ROOT_STATES_MEANING),
        "dof_pos": StateField("[E, 21]", "rad", "joint angles: " + ", ".join(JOINTS)),
        "dof_vel": StateField("[E, 21]", "rad/s", "joint velocities, same order"),
        "dof_limits_lower": StateField("[E, 21]", "rad", "lower joint limits, same order"),
        "dof_limits_upper": StateField("[E, 21]", "rad", "upper joint limits, same order"),
        "motor_efforts": StateField("[E, 21]", "N·m", "torque limit of each joint's motor, same order"),
        "targets": StateField("[E, 3]", "m", "run target from sample_goal (default (1000, 0, 0): far along +x)"),
        "contact_forces": StateField("[E, 2, 3]", "N", "net contact force on each foot (right, left; two capsules "
                                                       "each): the floor's, and any other body part's that touches it; "
                                                       "world frame; zero in an episode's first state (a reset places "
                                                       "the robot without a physics step)"),
        "actions": action_field(21),
        "torques": StateField("[E, 21]", "N·m", "last motor torques (after the limits), joint order"),
        "progress_buf": StateField("[E]", "steps", "control steps (1/60 s) since the episode began"),
    },
    build_state=locomotion.walker_state,
    contact_geoms=FEET,
    physics_from_state=locomotion.physics_from_state,
    isaac_names=locomotion.walker_isaac_names(
        dt=1 / 60, num_dof=21, torque_scale=0.01, torques_name="dof_force_tensor", gear_name="motor_efforts",
        start_height=1.34,
        scales={"dof_vel_scale": 0.1, "angular_velocity_scale": 0.25, "contact_force_scale": 0.01,
                "power_scale": 1.0, "heading_weight": 0.5, "up_weight": 0.1, "actions_cost_scale": 0.01,
                "energy_cost_scale": 0.05, "joints_at_limit_cost_scale": 0.25, "death_cost": -1.0,
                "termination_height": TERMINATION_HEIGHT, "max_episode_length": 1000}),
    defaults={
        "compute_reward": compute_reward,
        "compute_observation": compute_observation,
        "compute_torque": compute_torque,
        "compute_terminal": compute_terminal,
        "sample_initial_state": locomotion.sample_initial_state,
        "sample_goal": locomotion.sample_goal,
    },
    fitness={
        "forward_speed": Fitness(
            forward_speed_upright,
            "mean forward (+x) velocity of the torso in m/s over the 1000-step (16.7 s) episode, counted while "
            "upright (torso above 0.8 m and tilted less than 45°); a fall ends the episode and the remaining time "
            "counts as 0; higher is better"),
    },
)
