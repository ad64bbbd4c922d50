"""A mutable default argument: the second trace returns something else."""
import jax.numpy as jnp


def compute_reward(state, _calls=[]):
    _calls.append(1)
    return jnp.cos(state["dof_pos"][:, 1]) * len(_calls)
