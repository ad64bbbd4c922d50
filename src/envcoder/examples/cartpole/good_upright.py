"""Keep the pole upright and the cart slow; a large penalty for falling (the IsaacGymEnvs reward)."""
import jax.numpy as jnp


def compute_reward(state):
    cart_pos, pole_angle = state["dof_pos"][:, 0], state["dof_pos"][:, 1]
    cart_vel, pole_vel = state["dof_vel"][:, 0], state["dof_vel"][:, 1]
    upright = 1.0 - pole_angle**2
    motion = 0.01 * jnp.abs(cart_vel) + 0.005 * jnp.abs(pole_vel)
    fell = (jnp.abs(cart_pos) > 3.0) | (jnp.abs(pole_angle) > jnp.pi / 2)
    reward = jnp.where(fell, -2.0, upright - motion)
    return reward, {"upright": upright, "motion": -motion}
