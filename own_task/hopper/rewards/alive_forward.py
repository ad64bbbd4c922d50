"""Forward speed and 1 for every step alive."""
import jax.numpy as jnp


def compute_reward(state):
    forward = state["qvel"][:, 0]
    alive = jnp.ones_like(forward)
    return forward + alive, {"forward": forward, "alive": alive}
