# offline: from init_wide_kernel; add the task's fitness as a term (weight 0.4)
"""A structural child of the offline search."""
import jax
import jax.numpy as jnp

W_FITNESS = 0.16768799722194672
FITNESS_SIGMA = 1.1228916645050049

def _p_compute_reward(state):
    base_quat = state['root_states'][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, state['root_states'][:, 10:13])
    lin_vel_error = jnp.sum((state['commands'][:, :2] - base_lin_vel[:, :2]) ** 2, axis=1)
    ang_vel_error = (state['commands'][:, 2] - base_ang_vel[:, 2]) ** 2
    dt = 0.0004597461665980518
    lin_vel_xy = jnp.exp(-lin_vel_error / 0.0029113066848367453) * 0.08361821621656418 * dt
    ang_vel_z = jnp.exp(-ang_vel_error / 4.357299327850342) * 1.017513632774353 * dt
    torque = jnp.sum(state['torques'] ** 2, axis=1) * ((-0.020578056573867798)) * dt
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
