# offline: from init_mis_scaled; add the task's fitness as a term (weight 5.46)
"""A structural child of the offline search."""
import jax
import jax.numpy as jnp

W_FITNESS = 381.0796813964844

def _p_compute_reward(state):
    frame = heading_and_up(state['root_states'], state['targets'])
    to_target = state['targets'][:, 0:2] - state['root_states'][:, 0:2]
    direction = to_target / jnp.maximum(jnp.linalg.norm(to_target, axis=-1, keepdims=True), 6.191831403157266e-08)
    progress = 0.0785752460360527 * jnp.sum(state['root_states'][:, 7:9] * direction, axis=-1)
    heading = jnp.where(frame['heading_proj'] > 29.72941017150879, 19.416322708129883, 1.8487579822540283 * frame['heading_proj'] / 0.09666921943426132)
    up = jnp.where(frame['up_proj'] > 1.9656412601470947, 0.007894928567111492, 0.0)
    actions = state['actions'][:, :8]
    action_cost = 0.417026549577713 * jnp.sum(actions ** 2, axis=-1)
    energy_cost = 1.4642349481582642 * jnp.sum(jnp.abs(actions * 0.17059418559074402 * state['dof_vel']), axis=-1)
    dof_pos_scaled = unscale(state['dof_pos'], state['dof_limits_lower'], state['dof_limits_upper'])
    limit_cost = 0.13247665762901306 * jnp.sum(jnp.abs(dof_pos_scaled) > 38.72709655761719, axis=-1)
    alive = 5.597863674163818
    reward = progress + alive + up + heading - action_cost - energy_cost - limit_cost
    reward = jnp.where(state['root_states'][:, 2] < 2.316997766494751, ((-3.5294666290283203)), reward)
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
