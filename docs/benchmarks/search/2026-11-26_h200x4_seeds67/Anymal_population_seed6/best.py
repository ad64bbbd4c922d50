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
    dt = 0.001022180076688528
    lin_vel_xy = jnp.exp(-lin_vel_error / 1.5691077709197998) * 11.239290237426758 * dt
    ang_vel_z = jnp.exp(-ang_vel_error / 1611.751220703125) * 3.374567985534668 * dt
    torque = jnp.sum(state['torques'] ** 2, axis=1) * ((-2.9030523364781402e-05)) * dt
    reward = jnp.clip(lin_vel_xy + ang_vel_z + torque, 0.0, None)
    return (reward, {'lin_vel_xy': lin_vel_xy, 'ang_vel_z': ang_vel_z, 'torque': torque})

def _split(out):
    return out if isinstance(out, tuple) else (out, {})

def compute_reward(state):
    reward, terms = _split(_p_compute_reward(state))
    reward = reward - terms['torque']
    terms = {k: v for k, v in terms.items() if k != 'torque'}
    return reward, terms
