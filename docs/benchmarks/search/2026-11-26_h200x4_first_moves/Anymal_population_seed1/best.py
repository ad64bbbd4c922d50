# offline: from init_mis_scaled; add the task's fitness as a term (weight 5.18)
"""A structural child of the offline search."""
import jax
import jax.numpy as jnp

W_FITNESS = 6.741549015045166
FITNESS_SIGMA = 0.39927539229393005

def _p_compute_reward(state):
    base_quat = state['root_states'][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 10:13])
    lin_vel_error = jnp.sum((state['commands'][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state['commands'][:, 2] - base_ang_vel[:, 2]) ** 2
    dt = 0.006169147323817015
    lin_vel_xy = jnp.exp(-lin_vel_error / 1.833268642425537) * 0.002567937830463052 * dt
    ang_vel_z = jnp.exp(-ang_vel_error / 0.18131497502326965) * 0.03991122916340828 * dt
    torque = jnp.sum(state['torques'] ** 2, axis=1) * ((-0.0012802033452317119)) * dt
    reward = jnp.clip(lin_vel_xy + ang_vel_z + torque, 0.0, None)
    return (reward, {'lin_vel_xy': lin_vel_xy, 'ang_vel_z': ang_vel_z, 'torque': torque})
def _task_fitness(state):
    base_lin_vel = quat_rotate_inverse(state['root_states'][:, 3:7], state['root_states'][:, 7:10])
    return jnp.linalg.norm(state['commands'][:, :2] - base_lin_vel[:, :2], axis=1)

def _split(out):
    return out if isinstance(out, tuple) else (out, {})

def compute_reward(state):
    reward, terms = _split(_p_compute_reward(state))
    fitness = W_FITNESS * jnp.exp(-_task_fitness(state) ** 2 / FITNESS_SIGMA)
    reward = reward + fitness
    terms = {**terms, 'task_fitness': fitness}
    return reward, terms
