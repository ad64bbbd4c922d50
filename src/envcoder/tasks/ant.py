"""Ant: a four-legged walker that should run forward (+x) as fast as it can.

Defaults follow the Gym/Brax Ant: observation of the body's pose and velocities, reward of forward
velocity plus a healthy bonus minus a control cost, termination when the torso leaves [0.2, 1.0] m.
"""

from pathlib import Path

import jax
import jax.numpy as jnp

from envcoder.shaping.helpers import quat_rotate, quat_rotate_inverse
from envcoder.tasks.base import StateField, Task

MOTOR_GEAR = 150.0
"""N·m of joint torque for a policy action of 1."""


def build_state(data, commands, actions, torques, progress_buf):
    quat = data.qpos[..., 3:7]
    # MuJoCo's free joint gives the angular velocity in the body frame; Isaac Gym's root_states
    # holds it in the world frame, which is what ported rewards expect.
    ang_vel_world = quat_rotate(quat, data.qvel[..., 3:6])
    root_states = jnp.concatenate([data.qpos[..., 0:7], data.qvel[..., 0:3], ang_vel_world], axis=-1)
    return {
        "root_states": root_states,
        "dof_pos": data.qpos[..., 7:],
        "dof_vel": data.qvel[..., 6:],
        "commands": commands,
        "actions": actions,
        "torques": torques,
        "progress_buf": progress_buf,
    }


def physics_from_state(state):
    root = state["root_states"]
    quat = root[..., 3:7] / jnp.linalg.norm(root[..., 3:7], axis=-1, keepdims=True)
    qpos = jnp.concatenate([root[..., 0:3], quat, state["dof_pos"]], axis=-1)
    qvel = jnp.concatenate([root[..., 7:10], quat_rotate_inverse(quat, root[..., 10:13]), state["dof_vel"]], axis=-1)
    return qpos, qvel


# ---- default shaping (Gym/Brax Ant) -------------------------------------------------------------

def compute_reward(state):
    forward_velocity = state["root_states"][:, 7]
    healthy = 1.0
    control_cost = 0.5 * jnp.sum(state["actions"] ** 2, axis=-1)
    reward = forward_velocity + healthy - control_cost
    return reward, {"forward": forward_velocity, "control_cost": -control_cost}


def compute_observation(state):
    root = state["root_states"]
    ang_vel_local = quat_rotate_inverse(root[:, 3:7], root[:, 10:13])
    return jnp.concatenate([root[:, 2:7], state["dof_pos"], root[:, 7:10], ang_vel_local, state["dof_vel"]], axis=-1)


def compute_torque(action, state):
    return MOTOR_GEAR * action


def compute_terminal(state):
    height = state["root_states"][:, 2]
    return (height < 0.2) | (height > 1.0)


def sample_initial_state(key, state):
    k_pos, k_vel = jax.random.split(key)
    dof_pos = state["dof_pos"] + jax.random.uniform(k_pos, state["dof_pos"].shape, minval=-0.1, maxval=0.1)
    dof_vel = 0.1 * jax.random.normal(k_vel, state["dof_vel"].shape)
    return {"dof_pos": dof_pos, "dof_vel": dof_vel}


def sample_goal(key, state):
    return jnp.zeros((state["dof_pos"].shape[0], 0))


def fitness_step(state):
    return state["root_states"][:, 7]


TASK = Task(
    name="Ant",
    description="Make the four-legged ant run forward (+x) as fast as possible.",
    model_file=Path(__file__).parent / "assets" / "ant.xml",
    substeps=5,
    max_episode_length=1000,
    num_commands=0,
    state_fields={
        "root_states": StateField("[E, 13]", "m, -, m/s, rad/s",
                                  "torso position (3), orientation quaternion (w, x, y, z) (4), "
                                  "linear velocity in the world frame (3), angular velocity in the world frame (3)"),
        "dof_pos": StateField("[E, 8]", "rad", "joint angles: hip_1, ankle_1, …, hip_4, ankle_4 (legs front-left, "
                                               "front-right, back-left, back-right)"),
        "dof_vel": StateField("[E, 8]", "rad/s", "joint velocities, same order"),
        "commands": StateField("[E, 0]", "-", "no goal in this task"),
        "actions": StateField("[E, A]", "-", "last policy action, clipped to [-1, 1] (zero-padded to the run's largest A)"),
        "torques": StateField("[E, 8]", "N·m", "last motor torques, actuator order hip_4, ankle_4, hip_1, ankle_1, "
                                               "hip_2, ankle_2, hip_3, ankle_3"),
        "progress_buf": StateField("[E]", "steps", "control steps since the episode began"),
    },
    build_state=build_state,
    physics_from_state=physics_from_state,
    defaults={
        "compute_reward": compute_reward,
        "compute_observation": compute_observation,
        "compute_torque": compute_torque,
        "compute_terminal": compute_terminal,
        "sample_initial_state": sample_initial_state,
        "sample_goal": sample_goal,
    },
    fitness_step=fitness_step,
    fitness_doc=("mean forward (+x) velocity of the torso in m/s over the 1000-step (50 s) episode; a fall "
                 "ends the episode and the remaining time counts as standing still; higher is better"),
    ppo_overrides={"units": (256, 128, 64), "horizon_length": 16, "mini_epochs": 4, "learning_rate": 3e-4},
)
