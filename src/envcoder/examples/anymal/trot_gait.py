"""The reference reward plus a trot term: diagonal feet (LF+RH, LH+RF) in contact together, the pairs
alternating. Contacts are read from the feet's vertical contact force."""
import jax.numpy as jnp


def compute_reward(state):
    base_quat = state["root_states"][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 10:13])
    lin_vel_error = jnp.sum((state["commands"][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state["commands"][:, 2] - base_ang_vel[:, 2]) ** 2
    lin_vel_xy = 0.02 * jnp.exp(-lin_vel_error / 0.25)
    ang_vel_z = 0.01 * jnp.exp(-ang_vel_error / 0.25)
    torque = -5e-7 * jnp.sum(state["torques"] ** 2, axis=1)
    contact = (state["contact_forces"][:, :, 2] > 1.0).astype(jnp.float32)  # feet LF, LH, RF, RH
    lf, lh, rf, rh = contact[:, 0], contact[:, 1], contact[:, 2], contact[:, 3]
    diagonal_sync = 1.0 - 0.5 * (jnp.abs(lf - rh) + jnp.abs(lh - rf))
    pairs_alternate = jnp.abs(lf - lh)
    moving = jnp.linalg.norm(state["commands"][:, :2], axis=1) > 0.2
    trot = 0.005 * jnp.where(moving, diagonal_sync * pairs_alternate, 0.0)
    reward = jnp.clip(lin_vel_xy + ang_vel_z + torque, 0.0, None) + trot
    return reward, {"lin_vel_xy": lin_vel_xy, "ang_vel_z": ang_vel_z, "torque": torque, "trot": trot}
