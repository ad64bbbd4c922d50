"""Another plausible form: the negative squared tracking error (no exponential kernel) plus an alive bonus."""
import jax.numpy as jnp


def compute_reward(state):
    base_quat = state["root_states"][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 10:13])
    lin_vel_error = jnp.sum((state["commands"][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state["commands"][:, 2] - base_ang_vel[:, 2]) ** 2
    tracking = -(lin_vel_error + 0.5 * ang_vel_error) * 0.02
    return tracking + 0.02, {"tracking": tracking}
