"""Ant: a four-legged walker that should run forward (+x) as fast as it can.

Defaults follow the IsaacGymEnvs Ant task: progress towards a far target (1000 m along +x), an alive
bonus, upright and heading bonuses, action, energy and joints-at-limit costs, and a death cost with
termination when the torso drops below 0.31 m. Rewards are the per-step values of Isaac Gym's task
(its potential difference is written as the torso's velocity towards the target, which it equals). The model
(assets/ant.xml) is IsaacGymEnvs' nv_ant.xml, stepped as Isaac steps it: 15 N·m motors, a control step of 1/60 s.
"""

from pathlib import Path

import jax.numpy as jnp

from envcoder.shaping.helpers import heading_and_up, unscale
from envcoder.tasks import locomotion
from envcoder.tasks.base import Fitness, StateField, Task, action_field

FEET = ("foot_1", "foot_2", "foot_3", "foot_4")


# ---- default shaping (the IsaacGymEnvs Ant task) ------------------------------------------------

def compute_reward(state):
    frame = heading_and_up(state["root_states"], state["targets"])
    to_target = state["targets"][:, 0:2] - state["root_states"][:, 0:2]
    direction = to_target / jnp.maximum(jnp.linalg.norm(to_target, axis=-1, keepdims=True), 1e-6)
    progress = jnp.sum(state["root_states"][:, 7:9] * direction, axis=-1)  # m/s towards the target
    heading = jnp.where(frame["heading_proj"] > 0.8, 0.5, 0.5 * frame["heading_proj"] / 0.8)
    up = jnp.where(frame["up_proj"] > 0.93, 0.1, 0.0)
    actions = state["actions"][:, :8]
    action_cost = 0.005 * jnp.sum(actions ** 2, axis=-1)
    energy_cost = 0.05 * jnp.sum(jnp.abs(actions * 0.2 * state["dof_vel"]), axis=-1)
    dof_pos_scaled = unscale(state["dof_pos"], state["dof_limits_lower"], state["dof_limits_upper"])
    limit_cost = 0.1 * jnp.sum(dof_pos_scaled > 0.99, axis=-1)  # Isaac's: the upper limits only
    alive = 0.5
    reward = progress + alive + up + heading - action_cost - energy_cost - limit_cost
    reward = jnp.where(state["root_states"][:, 2] < 0.31, -2.0, reward)  # death cost
    return reward, {"progress": progress, "heading": heading, "up": up, "action_cost": -action_cost,
                    "energy_cost": -energy_cost, "joints_at_limit_cost": -limit_cost}


def compute_observation(state):
    root = state["root_states"]
    frame = heading_and_up(root, state["targets"])
    num_envs = root.shape[0]
    return jnp.concatenate([
        root[:, 2:3], frame["vel_loc"], frame["angvel_loc"],
        frame["yaw"][:, None], frame["roll"][:, None], frame["angle_to_target"][:, None],
        frame["up_proj"][:, None], frame["heading_proj"][:, None],
        unscale(state["dof_pos"], state["dof_limits_lower"], state["dof_limits_upper"]),
        0.2 * state["dof_vel"],
        0.1 * state["contact_forces"].reshape(num_envs, -1),
        state["actions"][:, :8],
    ], axis=-1)


def compute_torque(action, state):
    return state["motor_efforts"] * action


def compute_terminal(state):
    return state["root_states"][:, 2] < 0.31


def forward_speed(state):
    return state["root_states"][:, 7]


TASK = Task(
    name="Ant",
    description="Make the four-legged ant run forward (+x) as fast as possible.",
    model_file=Path(__file__).parent / "assets" / "ant.xml",
    substeps=2,
    max_episode_length=1000,
    num_commands=3,
    state_fields={
        "root_states": StateField("[E, 13]", "m, -, m/s, rad/s", "torso " + locomotion.ROOT_STATES_MEANING),
        "dof_pos": StateField("[E, 8]", "rad", "joint angles: hip_1, ankle_1, …, hip_4, ankle_4 (legs front-left, "
                                               "front-right, back-left, back-right)"),
        "dof_vel": StateField("[E, 8]", "rad/s", "joint velocities, same order"),
        "dof_limits_lower": StateField("[E, 8]", "rad", "lower joint limits, same order"),
        "dof_limits_upper": StateField("[E, 8]", "rad", "upper joint limits, same order"),
        "motor_efforts": StateField("[E, 8]", "N·m", "torque limit of each joint's motor (15), same order"),
        "targets": StateField("[E, 3]", "m", "walk target from sample_goal (default (1000, 0, 0): far along +x)"),
        "contact_forces": StateField("[E, 4, 3]", "N", "net contact force of the floor on each foot "
                                                       "(foot_1…foot_4), world frame; zero in an episode's first "
                                                       "state (a reset places the robot without a physics step)"),
        "actions": action_field(8),
        "torques": StateField("[E, 8]", "N·m", "last motor torques (after the limits), joint order"),
        "progress_buf": StateField("[E]", "steps", "control steps since the episode began"),
    },
    build_state=locomotion.walker_state,
    contact_geoms=FEET,
    physics_from_state=locomotion.physics_from_state,
    isaac_names=locomotion.walker_isaac_names(
        dt=1 / 60, num_dof=8, torque_scale=None, torques_name=None, gear_name="joint_gears", start_height=0.44,
        scales={"dof_vel_scale": 0.2, "contact_force_scale": 0.1, "power_scale": 1.0, "heading_weight": 0.5,
                "up_weight": 0.1, "actions_cost_scale": 0.005, "energy_cost_scale": 0.05,
                "joints_at_limit_cost_scale": 0.1, "death_cost": -2.0, "termination_height": 0.31,
                "max_episode_length": 1000}),
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
            forward_speed,
            "mean forward (+x) velocity of the torso in m/s over the 1000-step (16.7 s) episode; a fall ends the "
            "episode and the remaining time counts as standing still; higher is better"),
    },
)
