"""Cartpole: push a cart along a rail to keep a hinged pole upright.

Follows the IsaacGymEnvs Cartpole task: the same observation, reward and reset distribution. `Cartpole` pushes
with a continuous force; `CartpoleDiscrete` chooses between pushing left and pushing right (as gym's CartPole),
for discrete-action algorithms (categorical PPO, DQN).
"""

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp

from envcoder.tasks.base import IsaacName, Fitness, StateField, Task, action_field

MAX_PUSH_FORCE = 30.0
"""Newtons applied for a policy action of 1."""
UPRIGHT_ANGLE = 0.2
"""Radians: the pole counts as upright for the task fitness while |angle| is below this."""


def build_state(sim, data, contact_forces, commands, actions, torques, progress_buf):
    return {
        "dof_pos": data.qpos,
        "dof_vel": data.qvel,
        "commands": commands,
        "actions": actions,
        "torques": torques,
        "progress_buf": progress_buf,
    }


def physics_from_state(state):
    return state["dof_pos"], state["dof_vel"]


# ---- default shaping (the IsaacGymEnvs Cartpole task) -------------------------------------------

def compute_reward(state):
    cart_pos, pole_angle = state["dof_pos"][:, 0], state["dof_pos"][:, 1]
    cart_vel, pole_vel = state["dof_vel"][:, 0], state["dof_vel"][:, 1]
    reward = 1.0 - pole_angle * pole_angle - 0.01 * jnp.abs(cart_vel) - 0.005 * jnp.abs(pole_vel)
    reward = jnp.where(jnp.abs(cart_pos) > 3.0, -2.0, reward)
    reward = jnp.where(jnp.abs(pole_angle) > jnp.pi / 2, -2.0, reward)
    return reward


def compute_observation(state):
    return jnp.stack([state["dof_pos"][:, 0], state["dof_pos"][:, 1],
                      state["dof_vel"][:, 0], state["dof_vel"][:, 1]], axis=-1)


def compute_torque(action, state):
    return MAX_PUSH_FORCE * action


def compute_terminal(state):
    return (jnp.abs(state["dof_pos"][:, 0]) > 3.0) | (jnp.abs(state["dof_pos"][:, 1]) > jnp.pi / 2)


def sample_initial_state(key, state):
    k_pos, k_vel = jax.random.split(key)
    shape = state["dof_pos"].shape
    return {
        "dof_pos": 0.2 * (jax.random.uniform(k_pos, shape) - 0.5),
        "dof_vel": 0.5 * (jax.random.uniform(k_vel, shape) - 0.5),
    }


def sample_goal(key, state):
    return jnp.zeros((state["dof_pos"].shape[0], 1))


def upright(state):
    return (jnp.abs(state["dof_pos"][:, 1]) < UPRIGHT_ANGLE).astype(jnp.float32)


def _isaac_observation(state):
    """IsaacGymEnvs Cartpole's `obs_buf`: cart position, cart velocity, pole angle, pole velocity."""
    return jnp.stack([state["dof_pos"][:, 0], state["dof_vel"][:, 0], state["dof_pos"][:, 1], state["dof_vel"][:, 1]],
                     axis=-1)


ISAAC_NAMES = {
    "dof_pos": IsaacName(lambda s: s["dof_pos"], "[E, 2]", "m, rad", "cart position; pole angle from upright"),
    "dof_vel": IsaacName(lambda s: s["dof_vel"], "[E, 2]", "m/s, rad/s", "cart velocity; pole angular velocity"),
    "obs_buf": IsaacName(_isaac_observation, "[E, 4]", "m, m/s, rad, rad/s", "Isaac's observation: cart position, "
                         "cart velocity, pole angle, pole velocity (envcoder's default observation orders them "
                         "positions first)"),
    "actions": IsaacName(lambda s: s["actions"][:, :1], "[E, 1]", "-", "the policy's last action in [-1, 1]"),
    "progress_buf": IsaacName(lambda s: s["progress_buf"], "[E]", "steps", "control steps since the reset"),
    "reset_buf": IsaacName(lambda s: jnp.zeros_like(s["progress_buf"]), "[E]", "-",
                           "zeros: envcoder ends episodes with the task's compute_terminal"),
    "reset_dist": IsaacName(lambda s: 3.0, "float", "m", "3.0: the cart's distance from the centre that ends an "
                                                        "episode"),
    "max_push_effort": IsaacName(lambda s: MAX_PUSH_FORCE, "float", "N", f"{MAX_PUSH_FORCE:g}: the largest push"),
    "max_episode_length": IsaacName(lambda s: 500, "float", "steps", "500"),
    "dt": IsaacName(lambda s: 0.02, "float", "s", "the control step, 0.02 s (Isaac's Cartpole: 1/60 s)"),
    "num_dof": IsaacName(lambda s: 2, "int", "-", "2"),
    "num_envs": IsaacName(lambda s: s["progress_buf"].shape[0], "int", "-", "environments in the batch"),
    "num_actions": IsaacName(lambda s: 1, "int", "-", "1: the push"),
    "num_obs": IsaacName(lambda s: 4, "int", "-", "4: the width of obs_buf"),
    "device": IsaacName(lambda s: "cpu", "str", "-", "a device name, ignored (envcoder places the arrays)"),
}
"""IsaacGymEnvs Cartpole's attributes at reward time (a reward written for Isaac Gym takes them by name)."""


TASK = Task(
    name="Cartpole",
    description="Balance a pole on a cart by pushing the cart left and right.",
    model_file=Path(__file__).parent / "assets" / "cartpole.xml",
    substeps=2,
    max_episode_length=500,
    num_commands=1,
    state_fields={
        "dof_pos": StateField("[E, 2]", "m, rad", "cart position on the rail; pole angle from upright"),
        "dof_vel": StateField("[E, 2]", "m/s, rad/s", "cart velocity; pole angular velocity"),
        "commands": StateField("[E, 1]", "m", "target cart position from sample_goal (default 0: the centre; "
                                             "the default reward and observation ignore it)"),
        "actions": action_field(1),
        "torques": StateField("[E, 1]", "N", "last force command applied to the cart"),
        "progress_buf": StateField("[E]", "steps", "control steps since the episode began"),
    },
    build_state=build_state,
    physics_from_state=physics_from_state,
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
        "upright": Fitness(upright, f"fraction of the 500-step episode with the pole upright (|angle| < "
                                    f"{UPRIGHT_ANGLE} rad); higher is better, 1.0 is perfect",
                           bounds=(0.0, 1.0)),
    },
)


def compute_discrete_torque(action, state):
    """Action 0 pushes left, action 1 pushes right, with the full force."""
    return MAX_PUSH_FORCE * (2.0 * action.astype(jnp.float32) - 1.0)[:, None]


DISCRETE_TASK = dataclasses.replace(
    TASK,
    name="CartpoleDiscrete",
    description="Balance a pole on a cart by pushing the cart left or right (a discrete choice each step).",
    num_actions=2,
    state_fields={**TASK.state_fields, "actions": action_field(2, one_hot=True)},
    defaults={**TASK.defaults, "compute_torque": compute_discrete_torque},
)
