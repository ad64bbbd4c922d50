# offline: from init_wrong_sign; kernel constant on line 13: 0.25 -> 0.0273
"""Wrong sign: the reference reward with its yaw-rate tracking term negated (turning away from the command pays)."""
import jax.numpy as jnp


def compute_reward(state):
    base_quat = state["root_states"][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 10:13])
    lin_vel_error = jnp.sum((state["commands"][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state["commands"][:, 2] - base_ang_vel[:, 2]) ** 2
    dt = 0.00047738075954839587
    lin_vel_xy = jnp.exp(-lin_vel_error / 10.243441581726074) * 16.430360794067383 * dt
    ang_vel_z = jnp.exp(-ang_vel_error / 9.768461227416992) * ((-6.601993083953857)) * dt
    torque = jnp.sum(state["torques"] ** 2, axis=1) * ((-9.067452629096806e-05)) * dt
    reward = jnp.clip(lin_vel_xy + ang_vel_z + torque, 0.0, None)
    return reward, {"lin_vel_xy": lin_vel_xy, "ang_vel_z": ang_vel_z, "torque": torque}
