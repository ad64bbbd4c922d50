"""Mis-shaped: forward velocity paid only up to 0.5 m/s."""
import jax.numpy as jnp


def compute_reward(state):
    forward = jnp.minimum(state["root_states"][:, 7], 0.5)
    control_cost = 0.5 * jnp.sum(state["actions"] ** 2, axis=-1)
    return forward + 1.0 - control_cost, {"forward": forward, "control_cost": -control_cost}
