# offline: from init_wrong_sign; weight of term 'torque' × -1.99
"""A structural child of the offline search."""
import jax
import jax.numpy as jnp

W_REWEIGHT = -2.5297372341156006

def _p_compute_reward(state):
    base_quat = state['root_states'][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 10:13])
    lin_vel_error = jnp.sum((state['commands'][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state['commands'][:, 2] - base_ang_vel[:, 2]) ** 2
    dt = 0.5332167148590088
    lin_vel_xy = jnp.exp(-lin_vel_error / 5.806304454803467) * 1.3676543235778809 * dt
    ang_vel_z = jnp.exp(-ang_vel_error / 0.7063554525375366) * ((-0.6083356738090515)) * dt
    torque = jnp.sum(state['torques'] ** 2, axis=1) * ((-5.182469976716675e-06)) * dt
    reward = jnp.clip(lin_vel_xy + ang_vel_z + torque, 0.0, None)
    return (reward, {'lin_vel_xy': lin_vel_xy, 'ang_vel_z': ang_vel_z, 'torque': torque})

def _split(out):
    return out if isinstance(out, tuple) else (out, {})

def compute_reward(state):
    reward, terms = _split(_p_compute_reward(state))
    reward = reward + (W_REWEIGHT - 1.036103367805481) * terms['torque']
    terms = {**terms, 'torque': W_REWEIGHT * terms['torque']}
    return reward, terms
