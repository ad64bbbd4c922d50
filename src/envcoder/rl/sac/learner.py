"""Grouped SAC: one soft actor-critic per group (candidate × seed), each with its own replay buffer on the device.

The iteration is `OffPolicyLearner`'s; this module gives it a tanh-squashed Gaussian policy, twin critics with
soft-updated targets, and automatic entropy tuning (the target entropy is −scale × the candidate's own action
size). A continuous task only. Padded action dims are zero in every action the critics see and do not count in
the log-probabilities.

Parameters of one group: `{"actor": layers -> [mean (A_max), log_std (A_max)], "q1", "q2", "target1",
"target2": layers of [obs (D_max), action (A_max)] -> 1, "log_alpha": []}`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from envcoder.rl.distributions import LOG_2PI
from envcoder.rl.networks import ACTIVATIONS, apply_mlp, init_mlp
from envcoder.rl.normalizer import RunningMeanStd
from envcoder.rl.offpolicy import OffPolicyLearner
from envcoder.rl.sac.config import SACConfig
from envcoder.rl.replay import Replay
from envcoder.rl.learner import TrainState
from envcoder.shaping.api import CRITIC_OBSERVATION

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
"""The policy's log standard deviation is squashed into this range."""
CRITICS = ("q1", "q2")
TARGETS = ("target1", "target2")


def init_sac(key, obs_dim: int, action_dim: int, units, obs_dim_max: int, action_dim_max: int,
             init_alpha: float) -> dict:
    """One group's SAC parameters at its own sizes, zero-padded to the run's largest (see the module docstring)."""
    k_actor, k1, k2 = jax.random.split(key, 3)
    actor = init_mlp(k_actor, (obs_dim, *units, 2 * action_dim), 0.01)
    (w, b) = actor[-1]
    pad = ((0, 0), (0, action_dim_max - action_dim))
    actor[-1] = (jnp.concatenate([jnp.pad(w[:, :action_dim], pad), jnp.pad(w[:, action_dim:], pad)], axis=1),
                 jnp.concatenate([jnp.pad(b[:action_dim], pad[1]), jnp.pad(b[action_dim:], pad[1])]))
    actor[0] = (jnp.pad(actor[0][0], ((0, obs_dim_max - obs_dim), (0, 0))), actor[0][1])

    def critic(k):
        layers = init_mlp(k, (obs_dim + action_dim, *units, 1), 1.0)
        w, b = layers[0]
        layers[0] = (jnp.concatenate([jnp.pad(w[:obs_dim], ((0, obs_dim_max - obs_dim), (0, 0))),
                                      jnp.pad(w[obs_dim:], ((0, action_dim_max - action_dim), (0, 0)))]), b)
        return layers

    q1, q2 = critic(k1), critic(k2)
    return {"actor": actor, "q1": q1, "q2": q2, "target1": jax.tree.map(jnp.copy, q1),
            "target2": jax.tree.map(jnp.copy, q2), "log_alpha": jnp.log(jnp.float32(init_alpha))}


def policy(actor, obs, activation: str):
    """`(mean, log_std)` `[..., A_max]` of the pre-squash Gaussian."""
    out = apply_mlp(actor, obs, ACTIVATIONS[activation])
    mean, raw = jnp.split(out, 2, axis=-1)
    return mean, LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (jnp.tanh(raw) + 1.0)


def squashed_sample(mean, log_std, noise, action_mask):
    """`(tanh(mean + std · noise) masked, its log-probability over the unmasked dims)`."""
    u = mean + jnp.exp(log_std) * noise
    action = jnp.tanh(u)
    per_dim = -0.5 * noise**2 - log_std - 0.5 * LOG_2PI - jnp.log(1.0 - action**2 + 1e-6)
    return action * action_mask, jnp.sum(per_dim * action_mask, axis=-1)


def per_dim(draw, key, shape, action_dim: int):
    """`draw(key, shape)` for each action dim with a key of its own, stacked last `[*shape, action_dim]`: a group's
    draws do not depend on the run's largest action size."""
    return jax.vmap(lambda j: draw(jax.random.fold_in(key, j), shape), out_axes=-1)(jnp.arange(action_dim))


def q_value(layers, obs, action, activation: str):
    return apply_mlp(layers, jnp.concatenate([obs, action], axis=-1), ACTIVATIONS[activation])[..., 0]


class SACLossInfo(NamedTuple):
    critic: jnp.ndarray
    actor: jnp.ndarray
    alpha_loss: jnp.ndarray
    alpha: jnp.ndarray
    entropy: jnp.ndarray  # −log π of the policy's actions
    q_mean: jnp.ndarray


def sac_loss(params, batch: Replay, obs_rms: RunningMeanStd, action_mask, key, config: SACConfig):
    """Critic + actor + temperature losses of one group, each reaching only its own parameters.

    critic: Σ_i mean((Q_i(s, a) − y)²), y = r + γ(1 − d)(min_i Q̄_i(s', a') − α log π(a'|s')), a' ~ π(s');
    actor: mean(α log π(ã|s) − min_i Q_i(s, ã)), ã ~ π(s) reparameterized;
    temperature: mean(−α (log π(ã|s) + target entropy)).
    """
    act = config.activation

    def normalized(x):
        return obs_rms.normalize(x, config.clip_observations) if config.normalize_input else x

    obs, next_obs = normalized(batch.obs), normalized(batch.next_obs)
    alpha = jnp.exp(params["log_alpha"])
    k_next, k_now = jax.random.split(key)
    batch_size, action_dim = batch.actions.shape

    mean, log_std = policy(params["actor"], next_obs, act)
    next_action, next_log_prob = squashed_sample(mean, log_std, per_dim(jax.random.normal, k_next, (batch_size,),
                                                                         action_dim), action_mask)
    next_q = jnp.minimum(*(q_value(params[t], next_obs, next_action, act) for t in TARGETS))
    target = jax.lax.stop_gradient(batch.rewards + config.gamma * (1.0 - batch.terminals)
                                   * (next_q - alpha * next_log_prob))
    q_taken = [q_value(params[c], obs, batch.actions, act) for c in CRITICS]
    critic_loss = sum(jnp.mean((q - target) ** 2) for q in q_taken)

    mean, log_std = policy(params["actor"], obs, act)
    action, log_prob = squashed_sample(mean, log_std, per_dim(jax.random.normal, k_now, (batch_size,), action_dim),
                                       action_mask)
    frozen = jax.lax.stop_gradient({c: params[c] for c in CRITICS})
    q_policy = jnp.minimum(*(q_value(frozen[c], obs, action, act) for c in CRITICS))
    actor_loss = jnp.mean(jax.lax.stop_gradient(alpha) * log_prob - q_policy)

    target_entropy = -config.target_entropy_scale * jnp.sum(action_mask)
    alpha_loss = jnp.mean(-alpha * jax.lax.stop_gradient(log_prob + target_entropy))
    info = SACLossInfo(critic_loss, actor_loss, alpha_loss, alpha, -jnp.mean(log_prob), jnp.mean(q_taken[0]))
    return critic_loss + actor_loss + alpha_loss, info


class GroupedSAC(OffPolicyLearner):
    """Trains one SAC agent per group; see the module docstring."""

    def _setup_updates(self):
        if self.discrete:
            raise ValueError(f"--algo sac needs continuous actions, and task {self.task.name} has discrete ones: use "
                             "--algo ppo or --algo dqn")
        if self.asymmetric:
            raise ValueError(f"{CRITIC_OBSERVATION} is for PPO's actor-critic (--algo ppo); leave it out of the "
                             "candidates or --shaper-types")
        self._check_replay()
        cfg = self.config
        labels = {"actor": "actor", "q1": "critic", "q2": "critic", "target1": "frozen", "target2": "frozen",
                  "log_alpha": "alpha"}

        def step(lr):
            chain = [optax.adam(lr)]
            if cfg.truncate_grads:
                chain.insert(0, optax.clip_by_global_norm(cfg.grad_norm))
            return optax.chain(*chain)
        return optax.multi_transform({"actor": step(cfg.actor_lr), "critic": step(cfg.critic_lr),
                                      "alpha": optax.adam(cfg.alpha_lr), "frozen": optax.set_to_zero()},
                                     lambda params: {k: jax.tree.map(lambda _: labels[k], v) for k, v in params.items()})

    def _actor(self, params, obs_rms, obs):
        return jax.vmap(lambda p, o: policy(p["actor"], o, self.config.activation))(params,
                                                                                     self.normalized(obs_rms, obs))

    def act_deterministic(self, params, obs_rms, obs):
        mean, _ = self._actor(params, obs_rms, obs)
        return jnp.tanh(mean) * self.action_mask[:, None, :]

    def _explore(self, ts: TrainState, obs, keys):
        """The policy's samples; uniformly random actions for the first `learning_starts` iterations."""
        mask = self.action_mask[:, None, :]
        mean, log_std = self._actor(ts.params, ts.obs_rms, obs)
        E, A = mean.shape[1:]
        noise = jax.vmap(lambda k: per_dim(jax.random.normal, jax.random.fold_in(k, 0x5AC), (E,), A))(keys)
        sampled, _ = squashed_sample(mean, log_std, noise, mask)
        uniform = jax.vmap(lambda k: per_dim(lambda k2, shape: jax.random.uniform(k2, shape, minval=-1.0, maxval=1.0),
                                             jax.random.fold_in(k, 0x5AD), (E,), A))(keys) * mask
        return jnp.where(ts.iteration < self.config.learning_starts, uniform, sampled)

    def _init_params(self, key, obs_dim: int, action_dim: int, critic_obs_dim=None) -> dict:
        cfg = self.config
        return init_sac(key, obs_dim, action_dim, cfg.units, self.obs_dim_max, self.action_dim_max, cfg.init_alpha)

    def _update(self, ts: TrainState, obs_rms, replay, keys):
        learning = ts.iteration >= self.config.learning_starts
        params, opt_state, info = jax.vmap(self._update_group, in_axes=(0, 0, 0, 0, 0, 0, None))(
            ts.params, ts.opt_state, obs_rms, replay, keys, self.action_mask, learning)
        return params, opt_state, {"critic_loss": info.critic, "actor_loss": info.actor, "alpha": info.alpha,
                                   "entropy": info.entropy, "q_mean": info.q_mean}

    def _update_group(self, params, opt_state, obs_rms, replay: Replay, key, action_mask, learning):
        """`updates_per_epoch` gradient steps of one group (vmapped over groups by the caller); none before
        `learning_starts` or until its buffer holds a batch."""
        cfg = self.config
        grad_fn = jax.grad(sac_loss, has_aux=True)
        ready = learning & (replay.size >= cfg.batch_size)

        def gradient_step(carry, step_key):
            params, opt_state = carry
            k_sample, k_loss = jax.random.split(step_key)
            grads, info = grad_fn(params, replay.sample(k_sample, cfg.batch_size), obs_rms, action_mask, k_loss, cfg)
            updates, new_opt_state = self.optimizer.update(grads, opt_state, params)
            new = optax.apply_updates(params, updates)
            for critic, target in zip(CRITICS, TARGETS):
                new[target] = optax.incremental_update(new[critic], params[target], cfg.critic_tau)
            return jax.tree.map(lambda a, b: jnp.where(ready, a, b), (new, new_opt_state), (params, opt_state)), info

        (params, opt_state), infos = jax.lax.scan(gradient_step, (params, opt_state),
                                                  jax.random.split(key, cfg.updates_per_epoch))
        return params, opt_state, jax.tree.map(lambda x: jnp.where(ready, jnp.mean(x), jnp.nan), infos)
