"""Goal: a target cart position in [-1, 1] m, tracked by the reward and seen by the policy."""
import jax
import jax.numpy as jnp


def sample_goal(key, state):
    return jax.random.uniform(key, (state["dof_pos"].shape[0], 1), minval=-1.0, maxval=1.0)


def compute_reward(state):
    error = state["dof_pos"][:, 0] - state["commands"][:, 0]
    return 1.0 - state["dof_pos"][:, 1] ** 2 - 0.1 * error**2


def compute_observation(state):
    return jnp.concatenate([state["dof_pos"], state["dof_vel"], state["commands"]], axis=-1)
