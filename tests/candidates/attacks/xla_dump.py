"""Asks XLA to write files where it likes."""
import jax
import jax.numpy as jnp


def compute_reward(state):
    f = jax.jit(lambda x: jnp.cos(x), compiler_options={"xla_dump_to": "/tmp/envcoder_attack_dump"})
    return f(state["dof_pos"][:, 1])
