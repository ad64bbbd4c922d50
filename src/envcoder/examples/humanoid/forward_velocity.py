"""The simplest running reward: world +x velocity, an alive bonus and a small action cost."""
import jax.numpy as jnp


def compute_reward(state):
    forward = state["root_states"][:, 7]
    action_cost = 0.01 * jnp.sum(state["actions"] ** 2, axis=-1)
    reward = 1.25 * forward + 2.0 - action_cost
    return reward, {"forward": forward, "action_cost": -action_cost}
