# offline: from init_wide_kernel; drop term 'torque'
"""A structural child of the offline search."""
import jax
import jax.numpy as jnp


def _p_compute_reward(state):
    base_quat = state['root_states'][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 10:13])
    lin_vel_error = jnp.sum((state['commands'][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state['commands'][:, 2] - base_ang_vel[:, 2]) ** 2
    dt = 0.032750412821769714
    lin_vel_xy = jnp.exp(-lin_vel_error / 0.82635498046875) * 6.575785160064697 * dt
    ang_vel_z = jnp.exp(-ang_vel_error / 680.3574829101562) * 0.9302080273628235 * dt
    torque = jnp.sum(state['torques'] ** 2, axis=1) * ((-7.194239969976479e-06)) * dt
    reward = jnp.clip(lin_vel_xy + ang_vel_z + torque, 0.0, None)
    return (reward, {'lin_vel_xy': lin_vel_xy, 'ang_vel_z': ang_vel_z, 'torque': torque})

def _split(out):
    return out if isinstance(out, tuple) else (out, {})

def compute_reward(state):
    reward, terms = _split(_p_compute_reward(state))
    reward = reward - terms['torque']
    terms = {k: v for k, v in terms.items() if k != 'torque'}
    return reward, terms
