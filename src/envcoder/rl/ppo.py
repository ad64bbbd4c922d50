"""Pure PPO math for one candidate: GAE, the policy distributions with masked action dims, the loss.

A continuous policy is a diagonal Gaussian (`mu`, a state-independent `log_std`); a discrete one is categorical,
its `mu` the logits and an action its one-hot vector. Padded action dims (or padded logits) are masked out.

The grouped trainer vmaps these over the candidate axis; nothing here knows about groups.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from envcoder.rl.config import PPOConfig
from envcoder.rl.networks import apply_actor, apply_actor_critic
from envcoder.rl.normalizer import RunningMeanStd

LOG_2PI = math.log(2.0 * math.pi)
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


def gaussian_log_prob(actions, mu, log_std, action_mask):
    """Log-density of `actions [..., A]` under N(mu, exp(log_std)²), summed over unmasked dims only."""
    z = (actions - mu) * jnp.exp(-log_std)
    per_dim = -0.5 * z * z - log_std - 0.5 * LOG_2PI
    return jnp.sum(per_dim * action_mask, axis=-1)


def gaussian_entropy(log_std, action_mask):
    """Entropy of the diagonal Gaussian over the unmasked dims."""
    return jnp.sum((0.5 + 0.5 * LOG_2PI + log_std) * action_mask, axis=-1)


def gaussian_kl(mu_old, log_std_old, mu, log_std, action_mask):
    """KL(old || new) per sample, summed over unmasked dims."""
    var_old, var = jnp.exp(2 * log_std_old), jnp.exp(2 * log_std)
    per_dim = log_std - log_std_old + (var_old + (mu_old - mu) ** 2) / (2.0 * var) - 0.5
    return jnp.sum(per_dim * action_mask, axis=-1)


MASKED_LOGIT = -1e9
"""A padded action's logit: it is never sampled, and its probability is exactly 0 in float32."""


def masked_logits(logits, action_mask):
    return jnp.where(action_mask > 0, logits, MASKED_LOGIT)


def categorical_log_prob(actions, logits, action_mask):
    """Log-probability of one-hot `actions [..., A]` under softmax(`logits`) over the unmasked actions."""
    return jnp.sum(actions * jax.nn.log_softmax(masked_logits(logits, action_mask)), axis=-1)


def categorical_entropy(logits, action_mask):
    log_p = jax.nn.log_softmax(masked_logits(logits, action_mask))
    return -jnp.sum(jnp.exp(log_p) * log_p * action_mask, axis=-1)


def categorical_kl(logits_old, logits, action_mask):
    """KL(old || new) per sample, over the unmasked actions."""
    log_p_old = jax.nn.log_softmax(masked_logits(logits_old, action_mask))
    log_p = jax.nn.log_softmax(masked_logits(logits, action_mask))
    return jnp.sum(jnp.exp(log_p_old) * (log_p_old - log_p) * action_mask, axis=-1)


def log_prob(actions, mu, log_std, action_mask, discrete: bool):
    """The policy's log-probability of `actions`: categorical (one-hot actions, `mu` the logits) or Gaussian."""
    if discrete:
        return categorical_log_prob(actions, mu, action_mask)
    return gaussian_log_prob(actions, mu, log_std, action_mask)


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
    the critic trains on its own (`envcoder.rl.central_value`): the loss has no critic term and `params` need
    only the actor's.

    Returns `(total_loss, LossInfo)`; `kl` is KL(acting policy || current policy), for the lr schedule.
    """
    def normalized(x, rms):
        return rms.normalize(x, config.clip_observations) if config.normalize_input else x

    obs = normalized(batch.obs, obs_rms)
    if config.central_value_config is None:
        critic_obs = None if batch.critic_obs is None else normalized(batch.critic_obs, critic_rms)
        mu, log_std, values = apply_actor_critic(params, obs, config.activation, critic_obs)
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
