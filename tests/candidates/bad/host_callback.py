import jax
import jax.numpy as jnp


def compute_reward(state):
    # Arbitrary host code, called from inside the compiled iteration.
    value = jax.pure_callback(lambda x: x, jax.ShapeDtypeStruct((), jnp.float32), 1.0)
    return state["dof_pos"][:, 1] * value
