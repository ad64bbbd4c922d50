# offline: from init_wrong_sign; add the task's fitness as a term (weight 0.65)
"""A structural child of the offline search."""
import jax
import jax.numpy as jnp

W_FITNESS = 2.6057040691375732

def _p_compute_reward(state):
    frame = heading_and_up(state['root_states'], state['targets'])
    to_target = state['targets'][:, 0:2] - state['root_states'][:, 0:2]
    direction = to_target / jnp.maximum(jnp.linalg.norm(to_target, axis=-1, keepdims=True), 3.6573416650753643e-07)
    progress = jnp.sum(state['root_states'][:, 7:9] * direction, axis=-1)
    heading = jnp.where(frame['heading_proj'] > 0.6578696370124817, 0.5926432609558105, 3.5883984565734863 * frame['heading_proj'] / 0.8334271311759949)
    up = jnp.where(frame['up_proj'] > 0.9968700408935547, 0.18046946823596954, 0.0)
    actions = state['actions'][:, :8]
    action_cost = 0.0047456747852265835 * jnp.sum(actions ** 2, axis=-1)
    energy_cost = ((-0.03482014313340187)) * jnp.sum(jnp.abs(actions * (-0.09355960041284561) * state['dof_vel']), axis=-1)
    dof_pos_scaled = unscale(state['dof_pos'], state['dof_limits_lower'], state['dof_limits_upper'])
    limit_cost = 0.09710303694009781 * jnp.sum(jnp.abs(dof_pos_scaled) > 0.45600786805152893, axis=-1)
    alive = 0.4520626366138458
    reward = progress + alive + up + heading - action_cost - energy_cost - limit_cost
    reward = jnp.where(state['root_states'][:, 2] < 0.26145872473716736, ((-2.188215732574463)), reward)
    return (reward, {'progress': progress, 'heading': heading, 'up': up, 'action_cost': -action_cost, 'energy_cost': -energy_cost, 'joints_at_limit_cost': -limit_cost})
def _task_fitness(state):
    return state['root_states'][:, 7]

def _split(out):
    return out if isinstance(out, tuple) else (out, {})

def compute_reward(state):
    reward, terms = _split(_p_compute_reward(state))
    fitness = W_FITNESS * _task_fitness(state)
    reward = reward + fitness
    terms = {**terms, 'task_fitness': fitness}
    return reward, terms
