"""Wrong objective: pays forward base velocity whatever the command says."""
import jax.numpy as jnp


def compute_reward(state):
    base_lin_vel = quat_rotate_inverse(state["root_states"][:, 3:7], state["root_states"][:, 7:10])
    return jnp.clip(base_lin_vel[:, 0], -1.0, 1.0) * 0.02
