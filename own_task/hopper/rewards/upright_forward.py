"""Forward speed, alive, and a cost of the torso's pitch (an upright hopper falls less)."""
import jax.numpy as jnp

PITCH_COST = 0.5


def compute_reward(state):
    forward = state["qvel"][:, 0]
    alive = jnp.ones_like(forward)
    pitch = PITCH_COST * state["qpos"][:, 2] ** 2
    return forward + alive - pitch, {"forward": forward, "alive": alive, "pitch": -pitch}
