"""The reference reward with the width of the tracking kernels swept (IsaacGymEnvs uses 0.25)."""
import jax.numpy as jnp

PARAMS = {"SIGMA": [0.1, 0.25, 0.5]}
SIGMA = 0.25


def compute_reward(state):
    base_quat = state["root_states"][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 10:13])
    lin_vel_error = jnp.sum((state["commands"][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state["commands"][:, 2] - base_ang_vel[:, 2]) ** 2
    lin_vel_xy = 0.02 * jnp.exp(-lin_vel_error / SIGMA)
    ang_vel_z = 0.01 * jnp.exp(-ang_vel_error / SIGMA)
    torque = -5e-7 * jnp.sum(state["torques"] ** 2, axis=1)
    return jnp.clip(lin_vel_xy + ang_vel_z + torque, 0.0, None), {"lin_vel_xy": lin_vel_xy, "ang_vel_z": ang_vel_z}
