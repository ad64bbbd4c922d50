"""Forward velocity, a healthy bonus and a control cost (the Gym/Brax Ant reward)."""
import jax.numpy as jnp


def compute_reward(state):
    forward = state["root_states"][:, 7]
    control_cost = 0.5 * jnp.sum(state["actions"] ** 2, axis=-1)
    return forward + 1.0 - control_cost, {"forward": forward, "control_cost": -control_cost}
