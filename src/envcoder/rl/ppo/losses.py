"""Pure PPO math for one candidate: GAE, minibatches, learning-rate schedules and the loss (the policy's
distributions are `envcoder.rl.distributions`').

The grouped learner vmaps these over the candidate axis; nothing here knows about groups.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from envcoder.rl.distributions import categorical_entropy, categorical_kl, gaussian_entropy, gaussian_kl, log_prob
from envcoder.rl.networks import apply_actor, apply_actor_critic
from envcoder.rl.normalizer import RunningMeanStd
from envcoder.rl.ppo.config import PPOConfig

BOUNDS_SOFT = 1.1
"""Action means beyond ± this are penalized by the bounds loss."""


def compute_gae(rewards, values, dones, last_value, gamma: float, tau: float):
    """Generalized advantage estimation.

    Args:
      rewards: `[T, E]` rewards of the transitions.
      values: `[T, E]` value estimates of the states the transitions start from.
      dones: `[T, E]` 1.0 where the episode ended with the transition (no bootstrap past it).
      last_value: `[E]` value of the state after the last transition.
    Returns:
      advantages `[T, E]` and returns (advantages + values) `[T, E]`.
    """
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)

    def backward(carry, step):
        reward, value, next_value, done = step
        not_done = 1.0 - done
        delta = reward + gamma * next_value * not_done - value
        advantage = delta + gamma * tau * not_done * carry
        return advantage, advantage

    _, advantages = jax.lax.scan(backward, jnp.zeros_like(last_value), (rewards, values, next_values, dones),
                                 reverse=True)
    return advantages, advantages + values


class Minibatch(NamedTuple):
    """Training samples of one candidate, leading axis `[B]`."""

    obs: jnp.ndarray  # [B, D_max] raw observations
    actions: jnp.ndarray  # [B, A_max] sampled (unclipped) actions
    log_probs: jnp.ndarray  # [B] under the acting policy
    mu: jnp.ndarray  # [B, A_max] acting policy mean
    log_std: jnp.ndarray  # [B, A_max] acting policy log std
    values: jnp.ndarray  # [B] acting value estimates, normalized units
    returns: jnp.ndarray  # [B] GAE returns, normalized units
    advantages: jnp.ndarray  # [B]
    critic_obs: jnp.ndarray | None = None  # [B, C_max] raw critic observations (None: the critic sees `obs`)


class LossInfo(NamedTuple):
    total: jnp.ndarray
    actor: jnp.ndarray
    critic: jnp.ndarray
    entropy: jnp.ndarray
    bounds: jnp.ndarray
    kl: jnp.ndarray


def ppo_loss(params, batch: Minibatch, obs_rms: RunningMeanStd, action_mask, config: PPOConfig,
             discrete: bool = False, critic_rms: RunningMeanStd | None = None):
    """rl_games' PPO loss: clipped actor + 0.5·critic_coef·clipped critic − entropy_coef·entropy + bounds (the
    bounds term only for a Gaussian policy). With `batch.critic_obs`, the critic sees those (normalized by
    `critic_rms`) instead of the actor's observations: an asymmetric actor-critic. With a `central_value_config`
    the critic trains on its own (`envcoder.rl.ppo.central_value`): the loss has no critic term and `params` need
    only the actor's.

    Returns `(total_loss, LossInfo)`; `kl` is KL(acting policy || current policy), for the lr schedule.
    """
    def normalized(x, rms):
        return rms.normalize(x, config.clip_observations) if config.normalize_input else x

    obs = normalized(batch.obs, obs_rms)
    if config.central_value_config is None:
        critic_obs = None if batch.critic_obs is None else normalized(batch.critic_obs, critic_rms)
        mu, log_std, values = apply_actor_critic(params, obs, config.activation, critic_obs,
                                                 shared=not config.separate)
    else:
        (mu, log_std), values = apply_actor(params, obs, config.activation), None
    advantages = batch.advantages
    if config.normalize_advantage:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    log_probs = log_prob(batch.actions, mu, log_std, action_mask, discrete)
    ratio = jnp.exp(log_probs - batch.log_probs)
    clipped_ratio = jnp.clip(ratio, 1.0 - config.e_clip, 1.0 + config.e_clip)
    actor_loss = jnp.mean(jnp.maximum(-advantages * ratio, -advantages * clipped_ratio))

    critic_loss = jnp.zeros(())
    if values is not None:
        values_clipped = batch.values + jnp.clip(values - batch.values, -config.e_clip, config.e_clip)
        critic_loss = jnp.mean(jnp.maximum((values - batch.returns) ** 2, (values_clipped - batch.returns) ** 2))

    if discrete:
        entropy = jnp.mean(categorical_entropy(mu, action_mask))
        bounds_loss = jnp.zeros(())
        kl = jnp.mean(categorical_kl(batch.mu, mu, action_mask))
    else:
        entropy = gaussian_entropy(log_std, action_mask)
        over = jnp.maximum(mu - BOUNDS_SOFT, 0.0) ** 2 + jnp.maximum(-BOUNDS_SOFT - mu, 0.0) ** 2
        bounds_loss = jnp.mean(jnp.sum(over * action_mask, axis=-1))
        kl = jnp.mean(gaussian_kl(batch.mu, batch.log_std, mu, jnp.broadcast_to(log_std, mu.shape), action_mask))

    total = (actor_loss + 0.5 * config.critic_coef * critic_loss - config.entropy_coef * entropy
             + config.bounds_loss_coef * bounds_loss)
    return total, LossInfo(total, actor_loss, critic_loss, entropy, bounds_loss, jax.lax.stop_gradient(kl))


def shuffled_minibatches(key, batch, num_minibatches: int, minibatch_size: int):
    """`batch` (a pytree of `[N, ...]` leaves) in a random order, as `[num_minibatches, minibatch_size, ...]`."""
    perm = jax.random.permutation(key, num_minibatches * minibatch_size)
    return jax.tree.map(lambda x: x[perm].reshape((num_minibatches, minibatch_size) + x.shape[1:]), batch)


def adaptive_learning_rate(learning_rate, kl, kl_threshold: float, min_lr: float = 1e-6, max_lr: float = 1e-2):
    """rl_games' AdaptiveScheduler: ÷1.5 when kl > 2·threshold, ×1.5 when kl < threshold / 2."""
    learning_rate = jnp.where(kl > 2.0 * kl_threshold, jnp.maximum(learning_rate / 1.5, min_lr), learning_rate)
    return jnp.where(kl < 0.5 * kl_threshold, jnp.minimum(learning_rate * 1.5, max_lr), learning_rate)


def linear_learning_rate(initial, iteration, max_epochs: int):
    """rl_games' linear schedule: `initial` at iteration 0, falling to 0 at `max_epochs`."""
    return initial * jnp.maximum(1.0 - jnp.asarray(iteration, jnp.float32) / max_epochs, 0.0)
