# offline: from init_missing_term; add the task's fitness as a term (weight 0.115)
"""A structural child of the offline search."""
import jax
import jax.numpy as jnp

W_FITNESS = 1.2310740947723389

def _p_compute_reward(state):
    cart_pos, pole_angle = (state['dof_pos'][:, 0], state['dof_pos'][:, 1])
    cart_vel, pole_vel = (state['dof_vel'][:, 0], state['dof_vel'][:, 1])
    upright = 0.0628562644124031 - pole_angle ** 2
    motion = 0.09289968758821487 * jnp.abs(cart_vel) + 0.000233035723795183 * jnp.abs(pole_vel)
    fell = (jnp.abs(cart_pos) > 14.714505195617676) | (jnp.abs(pole_angle) > jnp.pi / 2)
    reward = jnp.where(fell, ((-0.1486572027206421)), -motion)
    return (reward, {'upright': upright, 'motion': -motion})
UPRIGHT_ANGLE = 0.958652913570404
def _task_fitness(state):
    return (jnp.abs(state['dof_pos'][:, 1]) < UPRIGHT_ANGLE).astype(jnp.float32)

def _split(out):
    return out if isinstance(out, tuple) else (out, {})

def compute_reward(state):
    reward, terms = _split(_p_compute_reward(state))
    fitness = W_FITNESS * _task_fitness(state)
    reward = reward + fitness
    terms = {**terms, 'task_fitness': fitness}
    return reward, terms
