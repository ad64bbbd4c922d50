"""A planar hopper that should hop forward (+x) without falling: a task of one's own (the guide's "Your own task").

    envcoder tasks --check own_task/hopper/hopper.py
    envcoder eval --task own_task/hopper/hopper.py --functions own_task/hopper/rewards --iterations 20

Everything a task is, in one file: its model (hopper.xml, next to this file), the state its shaping functions read,
its default shaping, its fitness, its episode and its training settings.
"""

import jax
import jax.numpy as jnp

from envcoder.tasks import Fitness, StateField, Task, action_field

START_HEIGHT = 1.25
"""m: the torso's height at the start, where the root's z slide reads 0."""
MOTOR = 60.0
"""N·m: each motor's largest torque (its control range in hopper.xml)."""


def build_state(sim, data, contact_forces, commands, actions, torques, progress_buf):
    """One environment's state, from the physics (`data.qpos`, `data.qvel`) and envcoder's buffers."""
    return {"qpos": data.qpos, "qvel": data.qvel, "height": START_HEIGHT + data.qpos[1], "commands": commands,
            "actions": actions, "torques": torques, "progress_buf": progress_buf}


def physics_from_state(state):
    return state["qpos"], state["qvel"]


# ---- default shaping ------------------------------------------------------------------------------

def compute_reward(state):
    forward = state["qvel"][:, 0]
    alive = jnp.ones_like(forward)
    effort = 1e-3 * jnp.sum(state["actions"] ** 2, axis=-1)
    return forward + alive - effort, {"forward": forward, "alive": alive, "effort": -effort}


def compute_observation(state):
    return jnp.concatenate([state["height"][:, None], state["qpos"][:, 2:], jnp.clip(state["qvel"], -10.0, 10.0)],
                           axis=-1)


def compute_torque(action, state):
    return MOTOR * action


def compute_terminal(state):
    return (state["height"] < 0.7) | (jnp.abs(state["qpos"][:, 2]) > 1.0)


def sample_initial_state(key, state):
    k_pos, k_vel = jax.random.split(key)
    return {"qpos": state["qpos"] + jax.random.uniform(k_pos, state["qpos"].shape, minval=-0.005, maxval=0.005),
            "qvel": jax.random.uniform(k_vel, state["qvel"].shape, minval=-0.005, maxval=0.005)}


def sample_goal(key, state):
    return jnp.zeros((state["qpos"].shape[0], 1))


def forward_speed(state):
    return state["qvel"][:, 0]


TASK = Task(
    name="Hopper",
    description="Hop forward (+x) on one leg without falling.",
    model_file="hopper.xml",
    substeps=4,
    max_episode_length=400,
    num_commands=1,
    state_fields={
        "qpos": StateField("[E, 6]", "m, m, rad", "x, z (from the start height), torso pitch, thigh, knee, ankle"),
        "qvel": StateField("[E, 6]", "m/s, rad/s", "their velocities"),
        "height": StateField("[E]", "m", "the torso's height above the floor"),
        "commands": StateField("[E, 1]", "-", "zeros: the task has no goal"),
        "actions": action_field(3),
        "torques": StateField("[E, 3]", "N·m", "last motor torques (thigh, knee, ankle)"),
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
    fitness={
        "forward_speed": Fitness(forward_speed, "mean forward velocity in m/s over the 400-step episode; a fall ends "
                                                "it and the steps left count as 0; higher is better"),
    },
    training={"ppo": {"max_epochs": 100, "horizon_length": 32, "mini_epochs": 4, "num_minibatches": 2,
                      "learning_rate": 3.0e-4, "reward_scale": 0.1, "units": [64, 64]}},
)
