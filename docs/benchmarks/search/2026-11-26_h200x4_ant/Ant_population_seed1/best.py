# offline: from init_wrong_sign; weight of term 'energy_cost' × 0.352
"""A structural child of the offline search."""
import jax
import jax.numpy as jnp

W_REWEIGHT = -0.03523070365190506

def _p_compute_reward(state):
    frame = heading_and_up(state['root_states'], state['targets'])
    to_target = state['targets'][:, 0:2] - state['root_states'][:, 0:2]
    direction = to_target / jnp.maximum(jnp.linalg.norm(to_target, axis=-1, keepdims=True), 3.083379738200165e-07)
    progress = jnp.sum(state['root_states'][:, 7:9] * direction, axis=-1)
    heading = jnp.where(frame['heading_proj'] > 0.4150185286998749, 0.35462334752082825, 0.21101829409599304 * frame['heading_proj'] / 0.6614907383918762)
    up = jnp.where(frame['up_proj'] > 1.6985750198364258, 0.04382490739226341, 0.0)
    actions = state['actions'][:, :8]
    action_cost = 0.004276403691619635 * jnp.sum(actions ** 2, axis=-1)
    energy_cost = (-0.06661149859428406) * jnp.sum(jnp.abs(actions * 0.09391115605831146 * state['dof_vel']), axis=-1)
    dof_pos_scaled = unscale(state['dof_pos'], state['dof_limits_lower'], state['dof_limits_upper'])
    limit_cost = (-0.19874952733516693) * jnp.sum(jnp.abs(dof_pos_scaled) > 1.5211976766586304, axis=-1)
    alive = 0.4308134913444519
    reward = progress + alive + up + heading - action_cost - energy_cost - limit_cost
    reward = jnp.where(state['root_states'][:, 2] < 0.1580243557691574, (-1.8562836647033691), reward)
    return (reward, {'progress': progress, 'heading': heading, 'up': up, 'action_cost': -action_cost, 'energy_cost': -energy_cost, 'joints_at_limit_cost': -limit_cost})

def _split(out):
    return out if isinstance(out, tuple) else (out, {})

def compute_reward(state):
    reward, terms = _split(_p_compute_reward(state))
    reward = reward + (W_REWEIGHT - 1.6012614965438843) * terms['energy_cost']
    terms = {**terms, 'energy_cost': W_REWEIGHT * terms['energy_cost']}
    return reward, terms
