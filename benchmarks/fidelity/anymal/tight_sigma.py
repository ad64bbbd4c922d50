"""Mis-scaled: a tracking kernel 25 times narrower than the reference's (almost no gradient far from the command)."""
import jax.numpy as jnp


def compute_reward(state):
    base_quat = state["root_states"][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 10:13])
    lin_vel_error = jnp.sum((state["commands"][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state["commands"][:, 2] - base_ang_vel[:, 2]) ** 2
    lin_vel_xy = jnp.exp(-lin_vel_error / 0.01) * 0.02
    ang_vel_z = jnp.exp(-ang_vel_error / 0.01) * 0.01
    return lin_vel_xy + ang_vel_z, {"lin_vel_xy": lin_vel_xy, "ang_vel_z": ang_vel_z}
