"""Grouped double DQN: one Q-network per group (candidate × seed), each with its own replay buffer on the device.

The iteration is `OffPolicyLearner`'s; this module gives it ε-greedy exploration over a Q-network and the update
(double-DQN targets from a target network, Huber loss). A discrete task only: an action is one of the
candidate's own `A` actions, and the padded ones are never chosen. The target network follows the online one by
soft updates after every gradient step (`target_tau`), or by a copy every `num_epochs_to_copy` iterations.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from envcoder.rl.dqn.config import DQNConfig
from envcoder.rl.distributions import masked_logits
from envcoder.rl.networks import apply_q_network, init_q_network, pad_q_network
from envcoder.rl.normalizer import RunningMeanStd
from envcoder.rl.replay import Replay
from envcoder.rl.offpolicy import OffPolicyLearner
from envcoder.rl.learner import TrainState
from envcoder.shaping.api import CRITIC_OBSERVATION


class DQNLossInfo(NamedTuple):
    loss: jnp.ndarray
    q_mean: jnp.ndarray
    target_mean: jnp.ndarray


def q_targets(rewards, terminals, next_q_online, next_q_target, action_mask, gamma: float, double_dqn: bool):
    """`rewards + gamma · (1 − terminals) · Q_target(s', a')`, with `a'` the online network's best action (double
    DQN) or the target network's own (DQN), among the unmasked actions."""
    chooser = next_q_online if double_dqn else next_q_target
    best = jnp.argmax(masked_logits(chooser, action_mask), axis=-1)
    next_value = jnp.take_along_axis(next_q_target, best[..., None], axis=-1)[..., 0]
    return rewards + gamma * (1.0 - terminals) * next_value


def dqn_loss(q_params, target_params, batch: Replay, obs_rms: RunningMeanStd, action_mask, config: DQNConfig):
    """Mean Huber loss (δ = 1) between Q(s, a) and the (stopped) double-DQN target; returns `(loss, info)`."""
    def normalized(x):
        return obs_rms.normalize(x, config.clip_observations) if config.normalize_input else x

    q = apply_q_network(q_params, normalized(batch.obs), config.activation)
    taken = jnp.take_along_axis(q, batch.actions[:, None], axis=-1)[:, 0]
    next_obs = normalized(batch.next_obs)
    targets = jax.lax.stop_gradient(q_targets(
        batch.rewards, batch.terminals, apply_q_network(q_params, next_obs, config.activation),
        apply_q_network(target_params, next_obs, config.activation), action_mask, config.gamma, config.double_dqn))
    loss = jnp.mean(optax.huber_loss(taken, targets, delta=1.0))
    return loss, DQNLossInfo(loss, jnp.mean(taken), jnp.mean(targets))


def epsilon_at(iteration, config: DQNConfig):
    """The exploration rate of an iteration: linear from `epsilon` to `min_epsilon` over `epsilon_decay_epochs`."""
    fraction = jnp.minimum(jnp.asarray(iteration, jnp.float32) / max(config.epsilon_decay_epochs, 1), 1.0)
    return config.epsilon + (config.min_epsilon - config.epsilon) * fraction


class GroupedDQN(OffPolicyLearner):
    """Trains one double-DQN Q-network per group; see the module docstring. Its `TrainState.params` are
    `{"q": layers, "target": layers}`, and `TrainState.own` holds every group's `Replay`."""

    def _setup_updates(self):
        if not self.discrete:
            raise ValueError(f"--algo dqn needs discrete actions, and task {self.task.name} has continuous ones: "
                             "use --algo ppo" + (", or the task CartpoleDiscrete" if self.task.name == "Cartpole"
                                                 else ""))
        if self.asymmetric:
            raise ValueError(f"{CRITIC_OBSERVATION} is for an actor-critic (--algo ppo); DQN has no critic: "
                             "leave it out of the candidates or --shaper-types")
        self._check_replay()
        return self.adam()

    def _q_values(self, layers, obs_rms, obs):
        return jax.vmap(lambda p, o: apply_q_network(p, o, self.config.activation))(
            layers, self.normalized(obs_rms, obs))

    def _greedy(self, layers, obs_rms, obs):
        """Every group's best action index by its Q-network `[G, E]`, among its own actions."""
        return jnp.argmax(masked_logits(self._q_values(layers, obs_rms, obs), self.action_mask[:, None, :]), axis=-1)

    def act_deterministic(self, params, obs_rms, obs):
        return jax.nn.one_hot(self._greedy(params["q"], obs_rms, obs), self.action_dim_max)

    def _init_params(self, key, obs_dim: int, action_dim: int, critic_obs_dim=None) -> dict:
        q = pad_q_network(init_q_network(key, obs_dim, action_dim, self.config.units), self.obs_dim_max,
                          self.action_dim_max)
        return {"q": q, "target": jax.tree.map(jnp.copy, q)}

    def _optimized(self, params: dict):
        return params["q"]

    def _explore(self, ts: TrainState, obs, keys):
        """ε-greedy: a uniformly random one of the group's own actions with probability ε, else the greedy one."""
        epsilon = epsilon_at(ts.iteration, self.config)
        action_dims = jnp.sum(self.action_mask, axis=-1).astype(jnp.int32)  # [G]: each group's own A
        greedy = self._greedy(ts.params["q"], ts.obs_rms, obs)
        draws = jax.vmap(lambda k: jax.random.uniform(jax.random.fold_in(k, 0xD0), (2, self.envs_per_candidate)))(keys)
        random = jnp.minimum((draws[:, 0] * action_dims[:, None]).astype(jnp.int32), action_dims[:, None] - 1)
        return jax.nn.one_hot(jnp.where(draws[:, 1] < epsilon, random, greedy), self.action_dim_max)

    def _stored(self, actions):
        return jnp.argmax(actions, axis=-1)  # the action's index

    def _update(self, ts: TrainState, obs_rms, replay, keys):
        cfg = self.config
        params, opt_state, info = jax.vmap(self._update_group)(ts.params, ts.opt_state, ts.learning_rate, obs_rms,
                                                               replay, keys, self.action_mask)
        if not cfg.target_tau:  # hard copies
            copy = (ts.iteration + 1) % cfg.num_epochs_to_copy == 0
            params["target"] = jax.tree.map(lambda online, target: jnp.where(copy, online, target), params["q"],
                                            params["target"])
        return params, opt_state, {"q_loss": info.loss, "q_mean": info.q_mean, "q_target_mean": info.target_mean,
                                   "epsilon": jnp.broadcast_to(epsilon_at(ts.iteration, cfg), info.loss.shape)}

    def _update_group(self, params, opt_state, learning_rate, obs_rms, replay: Replay, key, action_mask):
        """`updates_per_epoch` gradient steps of one group (vmapped over groups by the caller); none until its
        buffer holds a batch."""
        cfg = self.config
        grad_fn = jax.grad(dqn_loss, has_aux=True)
        ready = replay.size >= cfg.batch_size

        def gradient_step(carry, step_key):
            q, target, opt_state = carry
            grads, info = grad_fn(q, target, replay.sample(step_key, cfg.batch_size), obs_rms, action_mask, cfg)
            updates, new_opt_state = self.optimizer.update(grads, opt_state, q)
            new_q = optax.apply_updates(q, jax.tree.map(lambda u: -learning_rate * u, updates))
            new_target = optax.incremental_update(new_q, target, cfg.target_tau) if cfg.target_tau else target
            return jax.tree.map(lambda a, b: jnp.where(ready, a, b), (new_q, new_target, new_opt_state),
                                (q, target, opt_state)), info

        (q, target, opt_state), infos = jax.lax.scan(gradient_step, (params["q"], params["target"], opt_state),
                                                     jax.random.split(key, cfg.updates_per_epoch))
        info = jax.tree.map(lambda x: jnp.where(ready, jnp.mean(x), jnp.nan), infos)
        return {"q": q, "target": target}, opt_state, info
