"""Grouped PPO (rl_games' continuous and discrete PPO): one actor-critic per group, trained on its own rollouts.

The policy is Gaussian on a continuous task and categorical on a discrete one (`Task.num_actions`); a candidate
with a critic observation of its own (`CRITIC_OBSERVATION`) gets an asymmetric actor-critic, and a
`central_value_config` trains the critic apart from the actor (`envcoder.rl.ppo.central_value`). Normalizers, GAE, the loss and the optimizer steps are the
single-policy functions of `envcoder.rl.ppo.losses`, vmapped over the group axis; the environments, isolation, best
policies, metrics and evaluation are `envcoder.rl.learner.GroupedLearner`'s.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from envcoder.rl.distributions import log_prob, masked_logits
from envcoder.rl.config import minibatch_size
from envcoder.rl.learner import GroupedLearner, Transition, TrainState
from envcoder.rl.networks import apply_actor, apply_actor_critic, init_actor_critic, pad_actor_critic
from envcoder.rl.normalizer import RunningMeanStd
from envcoder.rl.ppo import central_value
from envcoder.rl.ppo.losses import (Minibatch, adaptive_learning_rate, compute_gae, linear_learning_rate, ppo_loss,
                                    shuffled_minibatches)


class PPOState(NamedTuple):
    """PPO's own part of the train state (`TrainState.own`), stacked over groups."""

    value_rms: RunningMeanStd  # [G] of the returns (the critic's targets)
    critic_rms: RunningMeanStd | None  # [G, C_max] of the critic's own observations (None: symmetric actor-critic)


class GroupedPPO(GroupedLearner):
    """Trains one PPO actor-critic per group; see the module docstring."""

    def __init__(self, task, candidates, config, envs_per_candidate: int, seeds=(0,), simulator=None,
                 fitness: str | None = None, physics: str | None = None, devices: int | None = None,
                 sharded: bool | None = None, evaluation_envs: int | None = None):
        """See `GroupedLearner`; `config`: a `PPOConfig`."""
        # rl_games' central value: the critic trains on its own (`envcoder.rl.ppo.central_value`).
        self.central_value = cv = config.central_value_config
        self.critic_activation = (cv and cv.activation) or config.activation
        self.critic_normalized = cv.normalize_input if cv else config.normalize_input
        super().__init__(task, candidates, config, envs_per_candidate, seeds, simulator, fitness, physics,
                         devices, sharded, evaluation_envs)

    def _setup_updates(self) -> optax.GradientTransformation:
        """Check the algorithm's settings against the run's sizes, derive the update's (PPO: minibatches), and
        return the optimizer of one group."""
        if not self.config.separate and (self.central_value is not None or self.asymmetric):
            raise ValueError("separate: false (one MLP for actor and critic) cannot train "
                             + ("a central value (central_value_config)" if self.central_value is not None else
                                "a critic on a candidate's own critic observation (compute_critic_observation)")
                             + ": add ppo.separate=true to the command (the isaac presets share the MLP, as "
                             "IsaacGymEnvs does), or leave that out")
        batch = self.envs_per_candidate * self.config.horizon_length
        self.minibatch_size = minibatch_size(self.config, batch)
        if batch % self.minibatch_size:
            raise ValueError(f"minibatch_size {self.minibatch_size} must divide envs_per_candidate × horizon_length "
                             f"= {batch}")
        self.num_minibatches = batch // self.minibatch_size
        cv = self.central_value
        if cv is not None:
            self.critic_minibatch_size = minibatch_size(cv, batch)
            if batch % self.critic_minibatch_size:
                raise ValueError(f"central_value_config.minibatch_size {self.critic_minibatch_size} must divide "
                                 f"envs_per_candidate × horizon_length = {batch}")
            self.critic_num_minibatches = batch // self.critic_minibatch_size
            self.critic_optimizer = central_value.optimizer(cv)
        return self.adam()

    def _init_params(self, key, obs_dim: int, action_dim: int, critic_obs_dim: int | None) -> dict:
        cfg = self.config
        critic_units = self.central_value.units if self.central_value else None
        shared = not cfg.separate
        return pad_actor_critic(init_actor_critic(key, obs_dim, action_dim, cfg.units, cfg.sigma_init, critic_obs_dim,
                                                  critic_units, shared), self.obs_dim_max, self.action_dim_max,
                                self.critic_obs_dim_max, shared)

    def _init_optimizer(self, params):
        """One group's optimizer state (with a central value, the actor's and the critic's)."""
        if self.central_value is None:
            return self.optimizer.init(params)
        return {"actor": self.optimizer.init({k: v for k, v in params.items() if k != "critic"}),
                "critic": self.critic_optimizer.init(params["critic"])}

    def _init_own(self, groups: int) -> PPOState:
        value_rms = jax.vmap(lambda _: RunningMeanStd.create(()))(jnp.arange(groups))
        critic_rms = (jax.vmap(lambda _: RunningMeanStd.create((self.critic_obs_dim_max,)))(jnp.arange(groups))
                      if self.asymmetric else None)
        return PPOState(value_rms, critic_rms)

    # ---- acting ---------------------------------------------------------------------------------

    def policy(self, params, obs_rms, obs, critic_rms=None, critic_obs=None):
        """`(mu or logits, log_std, value)` of every group; the value of `critic_obs` where the critic has its own."""
        obs = self.normalized(obs_rms, obs)
        act, critic_act = self.config.activation, self.critic_activation
        if critic_obs is None:
            shared = not self.config.separate
            return jax.vmap(lambda p, o: apply_actor_critic(p, o, act, critic_activation=critic_act, shared=shared))(
                params, obs)
        critic_obs = self.normalized(critic_rms, critic_obs, self.critic_normalized)
        return jax.vmap(lambda p, o, c: apply_actor_critic(p, o, act, c, critic_act))(params, obs, critic_obs)

    def act_deterministic(self, params, obs_rms, obs):
        """Every group's deterministic action: the mean (clipped), or the most likely action (one-hot)."""
        mu, _ = jax.vmap(lambda p, o: apply_actor(p, o, self.config.activation))(params, self.normalized(obs_rms,
                                                                                                         obs))
        if self.discrete:
            best = jnp.argmax(masked_logits(mu, self.action_mask[:, None, :]), axis=-1)
            return jax.nn.one_hot(best, self.action_dim_max)
        return jnp.clip(mu * self.action_mask[:, None, :], -1.0, 1.0)

    def _sample(self, mu, log_std, keys):
        """Every group's sampled actions `[G, E, A_max]` and their log-probabilities; `keys [G, 2]`. One key per
        action dimension, so that a candidate's draws do not depend on the run's A_max."""
        noise = jax.vmap(lambda k: jax.vmap(lambda j: jax.random.normal(jax.random.fold_in(k, j), (self.envs_per_candidate,)),
                                            out_axes=-1)(jnp.arange(self.action_dim_max)))(keys)
        mask = self.action_mask[:, None, :]
        if self.discrete:  # Gumbel-max: the same normal draws, turned into Gumbel noise per action
            gumbel = -jnp.log(-jax.scipy.special.log_ndtr(noise))
            actions = jax.nn.one_hot(jnp.argmax(masked_logits(mu, mask) + gumbel, axis=-1), self.action_dim_max)
        else:
            actions = (mu + jnp.exp(log_std)[:, None, :] * noise) * mask
        log_std = log_std[:, None, :]
        return actions, jax.vmap(lambda a, m, s, am: log_prob(a, m, s, am, self.discrete))(actions, mu, log_std, mask)

    def _rollout(self, ts: TrainState, keys, pool):
        cfg = self.config

        def step(env, step_keys):
            env_keys = jax.vmap(lambda k: jax.random.fold_in(k, 0xE57))(step_keys)
            obs, critic_obs = self.env.observe(env, env_keys, critic=True)
            mu, log_std, values = self.policy(ts.params, ts.obs_rms, obs, ts.own.critic_rms, critic_obs)
            actions, log_probs = self._sample(mu, log_std, step_keys)
            env, info = self.env.step(env, jnp.clip(actions, -1.0, 1.0), pool, env_keys)
            values_raw = jax.vmap(RunningMeanStd.denormalize)(ts.own.value_rms, values) if cfg.normalize_value else values
            rewards = info.reward * cfg.reward_scale
            if cfg.value_bootstrap:
                rewards = rewards + cfg.gamma * values_raw * info.truncated
            return env, Transition.of_step(info, obs, actions, rewards, critic_obs=critic_obs, log_probs=log_probs,
                                           mu=mu, values=values)

        step_keys = jax.vmap(lambda k: jax.random.split(k, cfg.horizon_length))(keys).swapaxes(0, 1)
        return jax.lax.scan(step, ts.env, step_keys)

    # ---- the iteration's two stages ----------------------------------------------------------------

    def _collect(self, ts: TrainState) -> dict:
        """The iteration's first stage: the rollout from `ts` (`env`: the environments after it; `traj` fields
        `[T, G, E, ...]`), the critic's values of its last observations, and the keys the second stage uses."""
        keys = jax.vmap(lambda k: jax.random.split(k, 4))(ts.key)
        next_key, reset_key, rollout_key, update_key = (keys[:, i] for i in range(4))
        pool = self.env.reset_pool(reset_key, ts.env.curriculum)
        env, traj = self._rollout(ts, rollout_key, pool)
        last_obs, last_critic_obs = self.env.observe(env, next_key, critic=True)
        _, _, last_values = self.policy(ts.params, ts.obs_rms, last_obs, ts.own.critic_rms, last_critic_obs)
        return dict(env=env, traj=traj, last_values=last_values, next_key=next_key, update_key=update_key)

    def _learn(self, args: tuple[TrainState, dict]):
        """The iteration's second stage, from `(ts, ts's _collect)`: normalizers, GAE, the PPO epochs, isolation
        and metrics. One argument, so that a program can donate all of it."""
        ts, collected = args
        cfg = self.config
        env, traj, last_values = collected["env"], collected["traj"], collected["last_values"]
        next_key, update_key = collected["next_key"], collected["update_key"]
        obs_rms, critic_rms = ts.obs_rms, ts.own.critic_rms
        update = jax.vmap(lambda rms, o: rms.update(o.reshape(-1, o.shape[-1])))
        if cfg.normalize_input:
            obs_rms = update(obs_rms, traj.obs.swapaxes(0, 1))
        if self.asymmetric and self.critic_normalized:
            critic_rms = update(critic_rms, traj.critic_obs.swapaxes(0, 1))

        def per_group(x):
            return x.swapaxes(0, 1)  # [T, G, ...] -> [G, T, ...]

        denorm = jax.vmap(RunningMeanStd.denormalize)
        values_raw = denorm(ts.own.value_rms, per_group(traj.values)) if cfg.normalize_value else per_group(traj.values)
        last_raw = denorm(ts.own.value_rms, last_values) if cfg.normalize_value else last_values
        advantages, returns = jax.vmap(lambda r, v, d, lv: compute_gae(r, v, d, lv, cfg.gamma, cfg.tau))(
            per_group(traj.rewards), values_raw, per_group(traj.dones), last_raw)
        value_rms = ts.own.value_rms
        if cfg.normalize_value:
            value_rms = jax.vmap(lambda rms, r: rms.update(r.reshape(-1)))(value_rms, returns)
            norm = jax.vmap(lambda rms, x: rms.normalize(x))
            values_n, returns_n = norm(value_rms, values_raw), norm(value_rms, returns)
        else:
            values_n, returns_n = values_raw, returns

        log_std = jnp.broadcast_to(ts.params["log_std"][:, None, None, :], per_group(traj.mu).shape)
        batch = Minibatch(per_group(traj.obs), per_group(traj.actions), per_group(traj.log_probs),
                          per_group(traj.mu), log_std, values_n, returns_n, advantages,
                          None if traj.critic_obs is None else per_group(traj.critic_obs))
        batch = jax.tree.map(lambda x: x.reshape((x.shape[0], -1) + x.shape[3:]), batch)  # [G, T*E, ...]

        learning_rate = ts.learning_rate
        if cfg.lr_schedule == "linear":
            learning_rate = jnp.full_like(learning_rate, linear_learning_rate(cfg.learning_rate, ts.iteration,
                                                                              cfg.max_epochs))
        if self.central_value is None:
            update = self._update_group
        else:
            update = functools.partial(self._update_group_central_value, iteration=ts.iteration)
        params, opt_state, learning_rate, losses = self._per_group_blocks(
            update, ts.params, ts.opt_state, learning_rate, obs_rms, critic_rms, batch, update_key, self.action_mask)
        updates = {"actor_loss": losses.actor, "critic_loss": losses.critic, "entropy": losses.entropy,
                   "bounds_loss": losses.bounds, "kl": losses.kl}
        return self._conclude(ts, env, traj, next_key, dict(params=params, opt_state=opt_state,
                                                            learning_rate=learning_rate, obs_rms=obs_rms,
                                                            own=PPOState(value_rms, critic_rms)), updates)

    def _per_group_blocks(self, update, *args):
        """`jax.vmap(update)(*args)` over the group axis, in blocks of `config.update_block_envs` environments' groups
        one after another where the run has more (`jax.lax.map`): each group's update is its own, whatever runs
        beside it."""
        block = max(self.config.update_block_envs // self.envs_per_candidate, 1)
        if self.rows <= block:
            return jax.vmap(update)(*args)
        return jax.lax.map(lambda group: update(*group), args, batch_size=block)

    def _update_group(self, params, opt_state, learning_rate, obs_rms, critic_rms, batch: Minibatch, key,
                      action_mask):
        """PPO epochs for one group (vmapped over groups by the caller)."""
        cfg = self.config
        grad_fn = jax.grad(ppo_loss, has_aux=True)

        def minibatch_step(carry, mb):
            params, opt_state, lr = carry
            grads, info = grad_fn(params, mb, obs_rms, action_mask, cfg, self.discrete, critic_rms)
            updates, opt_state = self.optimizer.update(grads, opt_state, params)
            params = optax.apply_updates(params, jax.tree.map(lambda u: -lr * u, updates))
            if cfg.lr_schedule == "adaptive":
                lr = adaptive_learning_rate(lr, info.kl, cfg.kl_threshold)
            return (params, opt_state, lr), info

        def epoch(carry, epoch_key):
            return jax.lax.scan(minibatch_step, carry, shuffled_minibatches(epoch_key, batch, self.num_minibatches,
                                                                            self.minibatch_size))

        (params, opt_state, learning_rate), infos = jax.lax.scan(
            epoch, (params, opt_state, learning_rate), jax.random.split(key, cfg.mini_epochs))
        return params, opt_state, learning_rate, jax.tree.map(jnp.mean, infos)

    def _update_group_central_value(self, params, opt_state, learning_rate, obs_rms, critic_rms, batch: Minibatch,
                                    key, action_mask, iteration):
        """`_update_group` with a central value: the actor's PPO epochs (no critic term), then the critic's own
        epochs on the value loss (`envcoder.rl.ppo.central_value.train`)."""
        cv = self.central_value
        actor_key, critic_key = jax.random.split(key)
        actor = {k: v for k, v in params.items() if k != "critic"}
        actor, actor_opt, learning_rate, info = self._update_group(
            actor, opt_state["actor"], learning_rate, obs_rms, None, batch._replace(critic_obs=None), actor_key,
            action_mask)
        clip = self.config.clip_observations
        if batch.critic_obs is None:  # the critic reads the actor's observation, as the actor does
            critic_obs = obs_rms.normalize(batch.obs, clip) if self.config.normalize_input else batch.obs
        else:
            critic_obs = critic_rms.normalize(batch.critic_obs, clip) if self.critic_normalized else batch.critic_obs
        critic, critic_opt, critic_loss = central_value.train(
            params["critic"], opt_state["critic"], central_value.learning_rate(cv, iteration, self.config.max_epochs),
            critic_obs, batch.values, batch.returns, critic_key, cv, self.critic_optimizer,
            self.critic_num_minibatches, self.critic_minibatch_size, self.critic_activation)
        return ({**actor, "critic": critic}, {"actor": actor_opt, "critic": critic_opt}, learning_rate,
                info._replace(critic=critic_loss))
