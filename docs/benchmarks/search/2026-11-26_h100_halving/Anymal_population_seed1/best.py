# offline: from init_mis_scaled; drop term 'lin_vel_xy'
"""A structural child of the offline search."""
import jax
import jax.numpy as jnp


def _p_compute_reward(state):
    base_quat = state['root_states'][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 10:13])
    lin_vel_error = jnp.sum((state['commands'][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state['commands'][:, 2] - base_ang_vel[:, 2]) ** 2
    dt = 0.03706621378660202
    lin_vel_xy = jnp.exp(-lin_vel_error / 4.861319541931152) * (-0.9995558857917786) * dt
    ang_vel_z = jnp.exp(-ang_vel_error / 6.650887966156006) * 0.022189151495695114 * dt
    torque = jnp.sum(state['torques'] ** 2, axis=1) * (-0.00012487720232456923) * dt
    reward = jnp.clip(lin_vel_xy + ang_vel_z + torque, 0.0, None)
    return (reward, {'lin_vel_xy': lin_vel_xy, 'ang_vel_z': ang_vel_z, 'torque': torque})

def _split(out):
    return out if isinstance(out, tuple) else (out, {})

def compute_reward(state):
    reward, terms = _split(_p_compute_reward(state))
    reward = reward - terms['lin_vel_xy']
    terms = {k: v for k, v in terms.items() if k != 'lin_vel_xy'}
    return reward, terms
