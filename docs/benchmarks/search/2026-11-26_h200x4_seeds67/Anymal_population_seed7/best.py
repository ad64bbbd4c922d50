"""Wrong sign: the reference reward with its yaw-rate tracking term negated (turning away from the command pays)."""
import jax.numpy as jnp


def compute_reward(state):
    base_quat = state["root_states"][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 10:13])
    lin_vel_error = jnp.sum((state["commands"][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state["commands"][:, 2] - base_ang_vel[:, 2]) ** 2
    dt = 0.1214057659450185
    lin_vel_xy = jnp.exp(-lin_vel_error / 1.0497897711725743) * 11.196441825691643 * dt
    ang_vel_z = jnp.exp(-ang_vel_error / 0.8757297040574316) * 2.546942745568231 * dt
    torque = jnp.sum(state["torques"] ** 2, axis=1) * (-6.351459262615106e-06) * dt
    reward = jnp.clip(lin_vel_xy + ang_vel_z + torque, 0.0, None)
    return reward, {"lin_vel_xy": lin_vel_xy, "ang_vel_z": ang_vel_z, "torque": torque}
