"""A 2-D action space (push right, push left) and a 6-D observation: larger than the defaults."""
import jax.numpy as jnp


def compute_torque(action, state):
    return 30.0 * (action[:, 0:1] - action[:, 1:2])


def compute_observation(state):
    return jnp.concatenate([state["dof_pos"], state["dof_vel"], jnp.cos(state["dof_pos"][:, 1:2]),
                            jnp.sin(state["dof_pos"][:, 1:2])], axis=-1)
