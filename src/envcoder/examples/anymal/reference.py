"""IsaacGymEnvs' Anymal reward, written out: xy-velocity and yaw-rate tracking minus a torque penalty."""
import jax.numpy as jnp


def compute_reward(state):
    base_quat = state["root_states"][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 10:13])
    lin_vel_error = jnp.sum((state["commands"][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state["commands"][:, 2] - base_ang_vel[:, 2]) ** 2
    dt = 0.02
    lin_vel_xy = jnp.exp(-lin_vel_error / 0.25) * 1.0 * dt
    ang_vel_z = jnp.exp(-ang_vel_error / 0.25) * 0.5 * dt
    torque = jnp.sum(state["torques"] ** 2, axis=1) * -0.000025 * dt
    reward = jnp.clip(lin_vel_xy + ang_vel_z + torque, 0.0, None)
    return reward, {"lin_vel_xy": lin_vel_xy, "ang_vel_z": ang_vel_z, "torque": torque}
