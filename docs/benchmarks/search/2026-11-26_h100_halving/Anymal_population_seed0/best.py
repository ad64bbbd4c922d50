# offline: from init_missing_term; cross with init_wrong_sign: add 'lin_vel_xy'
"""A structural child of the offline search."""
import jax
import jax.numpy as jnp

W_ADD0_0 = 2.433983564376831

def _p_compute_reward(state):
    base_quat = state['root_states'][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 10:13])
    lin_vel_error = jnp.sum((state['commands'][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state['commands'][:, 2] - base_ang_vel[:, 2]) ** 2
    dt = 0.559036910533905
    lin_vel_xy = jnp.exp(-lin_vel_error / 0.10946185141801834) * 0.06825132668018341 * dt
    ang_vel_z = jnp.exp(-ang_vel_error / 0.14681032299995422) * 1.5452845096588135 * dt
    torque = jnp.sum(state['torques'] ** 2, axis=1) * (-8.711219834367512e-07) * dt
    reward = jnp.clip(ang_vel_z + torque, 0.0, None)
    return (reward, {'ang_vel_z': ang_vel_z, 'torque': torque})
def _d0_compute_reward(state):
    base_quat = state['root_states'][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 10:13])
    lin_vel_error = jnp.sum((state['commands'][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state['commands'][:, 2] - base_ang_vel[:, 2]) ** 2
    dt = 0.18739983439445496
    lin_vel_xy = jnp.exp(-lin_vel_error / 0.2032649964094162) * 4.906552314758301 * dt
    ang_vel_z = jnp.exp(-ang_vel_error / 0.1224687322974205) * (-2.0525217056274414) * dt
    torque = jnp.sum(state['torques'] ** 2, axis=1) * (-1.750410046952311e-05) * dt
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
