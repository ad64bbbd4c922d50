"""What the grouped off-policy algorithms (DQN, SAC) share: every iteration, each environment takes
`steps_per_epoch` exploring steps; the transitions go into its group's own replay buffer on the device (`Replay`);
then the algorithm's update runs `updates_per_epoch` gradient steps per group on samples of that buffer.

The environments, shaping functions, isolation, metrics, checkpoints and evaluation are `GroupedLearner`'s. A
time-out is not a terminal: its target bootstraps from the state the episode was cut off in (`next_obs` is
observed before the auto-reset).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from envcoder.rl.replay import Replay
from envcoder.rl.learner import GroupedLearner, Transition, TrainState


class OffPolicyLearner(GroupedLearner):
    """A grouped off-policy algorithm: subclasses say how to explore and how to update."""

    def _check_replay(self) -> None:
        cfg = self.config
        if cfg.batch_size > cfg.replay_buffer_size:
            raise ValueError(f"batch_size {cfg.batch_size} exceeds replay_buffer_size {cfg.replay_buffer_size}")
        if self.envs_per_candidate * cfg.steps_per_epoch > cfg.replay_buffer_size:
            raise ValueError(f"one iteration collects {self.envs_per_candidate * cfg.steps_per_epoch} transitions per candidate "
                             f"(envs × steps_per_epoch), more than replay_buffer_size {cfg.replay_buffer_size} holds")

    def _init_optimizer(self, params):
        return self.optimizer.init(self._optimized(params))

    def _init_own(self, groups: int) -> Replay:
        action_size = None if self.discrete else self.action_dim_max  # an index, or an action
        return jax.vmap(lambda _: Replay.create(self.config.replay_buffer_size, self.obs_dim_max, action_size))(
            jnp.arange(groups))

    def _optimized(self, params: dict):
        """The part of a group's parameters that its optimizer updates (all of them)."""
        return params

    def _explore(self, ts: TrainState, obs, keys):
        """Every group's exploring actions `[G, E, A_max]` for observations `obs`; `keys [G, 2]`."""
        raise NotImplementedError

    def _stored(self, actions):
        """What the replay buffer keeps of the actions `[..., A_max]` (the actions themselves)."""
        return actions

    def _update(self, ts: TrainState, obs_rms, replay, keys) -> tuple[dict, object, dict]:
        """`(params, opt_state, metrics)`: every group's update from its buffer `replay` (metrics name -> `[G]`)."""
        raise NotImplementedError

    def _rollout(self, ts: TrainState, keys, pool):
        """`steps_per_epoch` exploring steps of every environment: the final env state, the steps' `Transition`
        (for the metrics) and `(next_obs, terminals)` `[T, G, E, ...]` for the replay buffers."""
        def step(env, step_keys):
            env_keys = jax.vmap(lambda k: jax.random.fold_in(k, 0xE57))(step_keys)
            obs = self.env.observe(env, env_keys)
            actions = self._explore(ts, obs, step_keys)
            env, info = self.env.step(env, actions, pool, env_keys)
            next_obs = self.env.observation(info.state)  # before the auto-reset, for the bootstrap
            traj = Transition.of_step(info, obs, actions, info.reward * self.config.reward_scale)
            return env, (traj, next_obs, info.terminal.astype(jnp.float32))

        step_keys = jax.vmap(lambda k: jax.random.split(k, self.config.steps_per_epoch))(keys).swapaxes(0, 1)
        env, (traj, next_obs, terminals) = jax.lax.scan(step, ts.env, step_keys)
        return env, traj, next_obs, terminals

    def _collect(self, ts: TrainState) -> dict:
        keys = jax.vmap(lambda k: jax.random.split(k, 4))(ts.key)
        next_key, reset_key, rollout_key, update_key = (keys[:, i] for i in range(4))
        pool = self.env.reset_pool(reset_key, ts.env.curriculum)
        env, traj, next_obs, terminals = self._rollout(ts, rollout_key, pool)
        return dict(env=env, traj=traj, next_obs=next_obs, terminals=terminals, next_key=next_key,
                    update_key=update_key)

    def _learn(self, args: tuple[TrainState, dict]):
        ts, collected = args
        env, traj, next_obs, terminals = (collected[k] for k in ("env", "traj", "next_obs", "terminals"))
        next_key, update_key = collected["next_key"], collected["update_key"]

        def per_group(x):  # [T, G, E, ...] -> [G, T·E, ...]
            x = x.swapaxes(0, 1)
            return x.reshape((x.shape[0], -1) + x.shape[3:])

        replay = jax.vmap(Replay.add)(ts.own, per_group(traj.obs), per_group(self._stored(traj.actions)),
                                      per_group(traj.rewards), per_group(next_obs), per_group(terminals))
        obs_rms = ts.obs_rms
        if self.config.normalize_input:
            obs_rms = jax.vmap(lambda rms, o: rms.update(o))(obs_rms, per_group(traj.obs))
        params, opt_state, updates = self._update(ts, obs_rms, replay, update_key)
        return self._conclude(ts, env, traj, next_key, dict(params=params, opt_state=opt_state,
                                                            learning_rate=ts.learning_rate, obs_rms=obs_rms,
                                                            own=replay), updates)
