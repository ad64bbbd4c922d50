# offline: from init_missing_term; cross with init_wrong_sign: add 'lin_vel_xy'
"""A structural child of the offline search."""
import jax
import jax.numpy as jnp

W_ADD0_0 = 1.0267698764801025

def _p_compute_reward(state):
    base_quat = state['root_states'][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 10:13])
    lin_vel_error = jnp.sum((state['commands'][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state['commands'][:, 2] - base_ang_vel[:, 2]) ** 2
    dt = 0.014117616228759289
    lin_vel_xy = jnp.exp(-lin_vel_error / 0.18459056317806244) * 0.9131988883018494 * dt
    ang_vel_z = jnp.exp(-ang_vel_error / 0.2943970263004303) * 0.2892431616783142 * dt
    torque = jnp.sum(state['torques'] ** 2, axis=1) * (-2.761514224403072e-05) * dt
    reward = jnp.clip(ang_vel_z + torque, 0.0, None)
    return (reward, {'ang_vel_z': ang_vel_z, 'torque': torque})
def _d0_compute_reward(state):
    base_quat = state['root_states'][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 10:13])
    lin_vel_error = jnp.sum((state['commands'][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state['commands'][:, 2] - base_ang_vel[:, 2]) ** 2
    dt = 0.024295717477798462
    lin_vel_xy = jnp.exp(-lin_vel_error / 0.28106236457824707) * 0.9191223382949829 * dt
    ang_vel_z = jnp.exp(-ang_vel_error / 0.1116744875907898) * (-0.5649003386497498) * dt
    torque = jnp.sum(state['torques'] ** 2, axis=1) * (-3.071768514928408e-05) * dt
    reward = jnp.clip(lin_vel_xy + ang_vel_z + torque, 0.0, None)
    return (reward, {'lin_vel_xy': lin_vel_xy, 'ang_vel_z': ang_vel_z, 'torque': torque})

def _split(out):
    return out if isinstance(out, tuple) else (out, {})

def compute_reward(state):
    reward, terms = _split(_p_compute_reward(state))
    _, donor0 = _split(_d0_compute_reward(state))
    terms = {**terms, 'lin_vel_xy': W_ADD0_0 * donor0['lin_vel_xy']}
    reward = reward + terms['lin_vel_xy']
    return reward, terms
