"""rl_games' central value: the critic as a network of its own, set by a PPO config's `central_value_config`.

The critic then trains apart from the actor, as in rl_games: its own Adam state and step size (constant, or linear
to 0), its own epochs over the iteration's samples in minibatches of its own size, on the value loss alone; the
actor's PPO loss has no critic term. It reads the candidate's own critic observation (`CRITIC_OBSERVATION`) where
there is one (the usual asymmetric actor-critic), else the actor's observation.

These are one group's functions; the grouped learner vmaps them over the group axis as the rest of PPO.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from envcoder.rl.ppo.config import CentralValueConfig
from envcoder.rl.networks import apply_critic
from envcoder.rl.ppo.losses import linear_learning_rate, shuffled_minibatches


def value_loss(critic, obs, old_values, returns, cv: CentralValueConfig, activation: str):
    """Mean squared error of the critic's values of `obs [B, C]` (normalized) against `returns [B]`, clipped to
    ± `e_clip` around the acting critic's `old_values` when `clip_value` (values in normalized units)."""
    values = apply_critic(critic, obs, activation)
    loss = (values - returns) ** 2
    if cv.clip_value:
        clipped = old_values + jnp.clip(values - old_values, -cv.e_clip, cv.e_clip)
        loss = jnp.maximum(loss, (clipped - returns) ** 2)
    return jnp.mean(loss)


def optimizer(cv: CentralValueConfig) -> optax.GradientTransformation:
    """Adam's scaling for the critic (the step size is applied by `train`), after clipping where configured."""
    tx = [optax.scale_by_adam(eps=1e-8)]
    if cv.truncate_grads:
        tx.insert(0, optax.clip_by_global_norm(cv.grad_norm))
    return optax.chain(*tx)


def learning_rate(cv: CentralValueConfig, iteration, max_epochs: int):
    """The critic's step size at `iteration`: linear to 0 at `max_epochs`, or constant."""
    if cv.lr_schedule == "linear":
        return linear_learning_rate(cv.learning_rate, iteration, max_epochs)
    return jnp.asarray(cv.learning_rate, jnp.float32)


def train(critic, opt_state, step_size, obs, old_values, returns, key, cv: CentralValueConfig,
          tx: optax.GradientTransformation, num_minibatches: int, minibatch_size: int, activation: str):
    """`cv.mini_epochs` passes over the samples (`obs [N, C]` normalized, `old_values`, `returns [N]`), each in
    `num_minibatches` shuffled minibatches. Returns the critic, its optimizer state and the mean loss."""
    grad_fn = jax.value_and_grad(value_loss)

    def minibatch_step(carry, mb):
        critic, opt_state = carry
        loss, grads = grad_fn(critic, *mb, cv, activation)
        updates, opt_state = tx.update(grads, opt_state, critic)
        critic = optax.apply_updates(critic, jax.tree.map(lambda u: -step_size * u, updates))
        return (critic, opt_state), loss

    def epoch(carry, epoch_key):
        return jax.lax.scan(minibatch_step, carry, shuffled_minibatches(
            epoch_key, (obs, old_values, returns), num_minibatches, minibatch_size))

    (critic, opt_state), losses = jax.lax.scan(epoch, (critic, opt_state), jax.random.split(key, cv.mini_epochs))
    return critic, opt_state, jnp.mean(losses)
