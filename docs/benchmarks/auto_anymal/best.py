# offline: from init_trot_gait; line 13: 0.02 -> 0.02127, line 13: 0.25 -> 0.38, line 14: 0.25 -> 0.7426, line 15: 5e-7 -> 3.64e-07, line 16: 1.0 -> 3.044, line 18: 1.0 -> 0.4945, line 20: 0.2 -> 0.1907, line 21: 0.005 -> 0.02396, line 21: 0.0 -> 0.0
"""The reference reward plus a trot term: diagonal feet (LF+RH, LH+RF) in contact together, the pairs
alternating. Contacts are read from the feet's vertical contact force."""
import jax.numpy as jnp


def compute_reward(state):
    base_quat = state["root_states"][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 10:13])
    lin_vel_error = jnp.sum((state["commands"][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state["commands"][:, 2] - base_ang_vel[:, 2]) ** 2
    lin_vel_xy = 0.02127 * jnp.exp(-lin_vel_error / 0.38)
    ang_vel_z = 0.01 * jnp.exp(-ang_vel_error / 0.7426)
    torque = -3.64e-07 * jnp.sum(state["torques"] ** 2, axis=1)
    contact = (state["contact_forces"][:, :, 2] > 3.044).astype(jnp.float32)  # feet LF, LH, RF, RH
    lf, lh, rf, rh = contact[:, 0], contact[:, 1], contact[:, 2], contact[:, 3]
    diagonal_sync = 0.4945 - 0.5 * (jnp.abs(lf - rh) + jnp.abs(lh - rf))
    pairs_alternate = jnp.abs(lf - lh)
    moving = jnp.linalg.norm(state["commands"][:, :2], axis=1) > 0.1907
    trot = 0.02396 * jnp.where(moving, diagonal_sync * pairs_alternate, 0.0)
    reward = jnp.clip(lin_vel_xy + ang_vel_z + torque, 0.0, None) + trot
    return reward, {"lin_vel_xy": lin_vel_xy, "ang_vel_z": ang_vel_z, "torque": torque, "trot": trot}
