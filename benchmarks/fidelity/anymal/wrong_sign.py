"""Wrong sign: pays for tracking error (the velocity kernel enters negatively), an alive bonus keeps it standing."""
import jax.numpy as jnp


def compute_reward(state):
    base_quat = state["root_states"][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 7:10])
    lin_vel_error = jnp.sum((state["commands"][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    lin_vel_xy = -jnp.exp(-lin_vel_error / 0.25) * 0.02
    return lin_vel_xy + 0.02, {"lin_vel_xy": lin_vel_xy}
