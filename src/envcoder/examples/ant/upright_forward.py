"""Forward velocity while the torso stays level, plus a small effort cost."""
import jax.numpy as jnp


def compute_reward(state):
    root = state["root_states"]
    up_in_body = quat_rotate_inverse(root[:, 3:7], jnp.array([0.0, 0.0, 1.0]) * jnp.ones_like(root[:, :3]))
    uprightness = up_in_body[:, 2]
    forward = root[:, 7]
    effort = 0.05 * jnp.sum(state["actions"] ** 2, axis=-1)
    reward = forward * jnp.clip(uprightness, 0.0, 1.0) + 0.5 * uprightness - effort
    return reward, {"forward": forward, "uprightness": uprightness, "effort": -effort}
