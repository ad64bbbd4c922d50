"""Mis-scaled: forward velocity weighted 10 times against the healthy bonus and control cost."""
import jax.numpy as jnp


def compute_reward(state):
    forward = 10.0 * state["root_states"][:, 7]
    control_cost = 0.5 * jnp.sum(state["actions"] ** 2, axis=-1)
    return forward + 1.0 - control_cost, {"forward": forward, "control_cost": -control_cost}
