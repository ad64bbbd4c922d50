import jax.numpy as jnp


def compute_reward(state):
    # Working memory that grows as the square of the number of environments (every pair of environments, times 512):
    # 9 MiB at the 68 sample environments, 32 GiB at 4,096 (where it does 8e7 operations per environment).
    angle = state["dof_pos"][:, 1]
    pairs = angle[:, None, None] * angle[None, :, None] * jnp.arange(512, dtype=jnp.float32)
    return jnp.cos(angle) + 1e-9 * jnp.sort(pairs, axis=2)[:, :, -1].mean(axis=1)
