"""Registers float as a pytree node: every later trace in the same process would break."""
import jax
import jax.numpy as jnp

jax.tree_util.register_pytree_node(float, lambda x: ((), x), lambda aux, _: aux * 0.0 + 1e9)


def compute_reward(state):
    return jnp.cos(state["dof_pos"][:, 1])
