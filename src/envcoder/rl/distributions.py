"""The policies' action distributions for one candidate, with masked action dims: a continuous policy is a diagonal
Gaussian (`mu`, a state-independent `log_std`); a discrete one is categorical, its `mu` the logits and an action its
one-hot vector. Padded action dims (or padded logits) are masked out. PPO's loss, DQN's greedy action and SAC's
squashed Gaussian use them.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

LOG_2PI = math.log(2.0 * math.pi)


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
