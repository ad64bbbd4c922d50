"""Grouped PPO: G independent policies, one per (candidate, seed), trained together in jitted iterations.

The policy is Gaussian on a continuous task and categorical on a discrete one (`Task.num_actions`); a candidate
with `compute_critic_observation` gets an asymmetric actor-critic, and a `central_value_config` trains the critic
apart from the actor (`envcoder.rl.central_value`). `envcoder.rl.dqn.GroupedDQN` and `envcoder.rl.sac.GroupedSAC`
reuse all of the grouped machinery below.

Layout: every per-environment array is `[G, E, ...]` (G groups × E envs per candidate). Physics runs
over all G·E environments at once; shaping functions run per code class (see `GroupPlan.dispatch`);
networks, normalizers, GAE, losses and optimizer steps are the single-policy functions of
`envcoder.rl.ppo` vmapped over the group axis. Nothing mixes across groups, so a group's result depends
only on its candidate, its seed and the config.

On one device an iteration runs as two programs, the rollout (`_collect`) and the update (`_learn`), which
compile at once (`envcoder.compile_cache.StagedIteration`): XLA compiles one program on one thread, and two
programs compiled at once on a GPU took about the longer one's time (docs/benchmarks/throughput.md § 2).

Over several devices the group axis is sharded (`jax.shard_map` over a one-axis mesh): every device steps and
trains its own block of groups (see `GroupPlan.layout`), and only metrics and evaluation results cross devices.
The train state is then held in the layout's row order, padded with inert groups; `to_host` and `to_device`
convert it from and to the plan's order (the same for any device count: checkpoints move between them).

Usage:
    trainer = GroupedTrainer(task, candidates, specs, config, envs_per_candidate=256, seeds=(0,))
    state = trainer.init()
    for _ in range(config.max_epochs):
        state, metrics = trainer.iteration(state)      # jitted, asynchronous
    fitness = trainer.evaluate(state)                  # deterministic episodes, task fitness per group
"""

from __future__ import annotations

import concurrent.futures
import copy
import functools
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

from envcoder.compile_cache import CachedJit, StagedIteration, fingerprint, in_thread, trace_cache_dir, xla_options
from envcoder.env import EnvState, GroupedEnv, ResetPool, StepInfo
from envcoder.rl import central_value
from envcoder.rl.config import PPOConfig
from envcoder.rl.networks import (apply_actor, apply_actor_critic, init_actor_critic, init_per_group,
                                  pad_actor_critic)
from envcoder.rl.normalizer import RunningMeanStd
from envcoder.rl.ppo import (Minibatch, adaptive_learning_rate, compute_gae, linear_learning_rate, log_prob,
                             masked_logits, ppo_loss, shuffled_minibatches)
from envcoder.shaping.candidate import Candidate
from envcoder.shaping.grouping import group_key
from envcoder.shaping.validate import CandidateSpec
from envcoder.sim import Simulator
from envcoder.tasks.base import Task


class BestPolicy(NamedTuple):
    """Each group's best policy so far by the task fitness of the episodes that ended in one iteration (from
    `save_best_after` on): the policy that collected them, kept on the device so that the driver never has to
    read parameters between iterations."""

    params: dict  # stacked over G
    obs_rms: RunningMeanStd  # [G, D_max]
    fitness: jnp.ndarray  # [G] NaN until a group has a best
    iteration: jnp.ndarray  # [G] int32: updates the policy had had (-1 until a group has a best)


class TrainState(NamedTuple):
    params: dict  # stacked over G
    opt_state: object  # stacked over G
    learning_rate: jnp.ndarray  # [G]
    obs_rms: RunningMeanStd  # [G, D_max]
    value_rms: RunningMeanStd  # [G]
    critic_rms: RunningMeanStd | None  # [G, C_max] of the critic's own observations (None: symmetric actor-critic)
    env: EnvState
    key: jnp.ndarray  # [G, 2]
    iteration: jnp.ndarray  # [] int32
    diverged_at: jnp.ndarray  # [G] int32: iteration at which the group went non-finite, -1 while healthy
    solved_at: jnp.ndarray  # [G] int32: iteration whose episodes reached `score_to_win`, -1 until then
    best: BestPolicy
    replay: object = None  # an off-policy algorithm's replay buffers, stacked over G (None for PPO)


class Transition(NamedTuple):
    obs: jnp.ndarray
    critic_obs: jnp.ndarray | None  # the critic's own observations (None: symmetric actor-critic)
    actions: jnp.ndarray  # sampled: a Gaussian action (unclipped), or a one-hot action
    log_probs: jnp.ndarray
    mu: jnp.ndarray
    values: jnp.ndarray  # normalized units
    rewards: jnp.ndarray  # training reward (scaled, time-outs bootstrapped)
    dones: jnp.ndarray  # 1.0 where an episode ended (failure or time-out)
    step_reward: jnp.ndarray  # candidate's reward, unscaled
    components: dict
    completed_return: jnp.ndarray
    completed_fitness: jnp.ndarray
    completed_length: jnp.ndarray
    fitness_step: jnp.ndarray  # the task fitness's per-step quantity (no after-failure fill)
    physics_failures: jnp.ndarray  # 1.0 where the env's physics blew up (non-finite or > max_qvel), reset

    @staticmethod
    def of_step(info: StepInfo, obs, actions, rewards, critic_obs=None, log_probs=None, mu=None,
                values=None) -> "Transition":
        """One step's record: the learner's own fields (`rewards`: the training reward) and the environment's
        report `info` (the fields an off-policy learner has no use for stay None)."""
        return Transition(obs, critic_obs, actions, log_probs, mu, values, rewards, info.done.astype(jnp.float32),
                          info.reward, info.components, info.episode_return, info.episode_fitness,
                          info.episode_length, info.fitness_step, info.physics_failures)


GROUP_AXIS = "groups"
"""The mesh axis the group axis is sharded over."""


def _all_finite_per_group(tree, group_axis: int) -> jnp.ndarray:
    """`[G]` bool: every entry of every leaf of `tree` is finite, per group."""
    def finite(x):
        x = jnp.moveaxis(x, group_axis, 0)
        return jnp.all(jnp.isfinite(x.reshape(x.shape[0], -1)), axis=1)
    return functools.reduce(jnp.logical_and, [finite(x) for x in jax.tree.leaves(tree)])


def _where_group(mask, a, b):
    """`where` over a pytree whose leaves lead with the group axis, `mask [G]`."""
    return jax.tree.map(lambda x, y: jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - 1)), x, y), a, b)


class GroupedTrainer:
    """Trains one PPO policy per group; see the module docstring."""

    def __init__(self, task: Task, candidates: Sequence[Candidate], specs: dict[str, CandidateSpec],
                 config: PPOConfig, envs_per_candidate: int, seeds: Sequence[int] = (0,),
                 simulator: Simulator | None = None, fitness: str | None = None, physics: str | None = None,
                 devices: int | None = None, sharded: bool | None = None):
        """`simulator`: the physics for all groups' environments; without one, a simulator of `physics`
        ("jax" or "warp"; None: "jax") is built. `devices`: how many of the visible devices to shard the groups over
        (None: all). `sharded`: build the sharded program (None: where there are several devices; True on one device
        measures its cost against the plain one)."""
        self.task, self.config, self.num_envs = task, config, envs_per_candidate
        visible = jax.devices()
        devices = len(visible) if devices is None else devices
        if not 1 <= devices <= len(visible):
            raise ValueError(f"--devices {devices}: JAX sees {len(visible)} device(s) here ({visible[0].device_kind}); "
                             f"pass a number from 1 to {len(visible)}")
        if jax.process_count() > 1 and devices != len(visible):
            raise ValueError(f"--devices {devices}: a multi-host run uses every device of every process "
                             f"({len(visible)}); leave --devices out")
        if devices > 1 and (physics == "warp" or (simulator is not None and simulator.physics == "warp")):
            raise ValueError(f"--physics warp runs on one device: pass --devices 1, or --physics jax to shard the "
                             f"groups over {devices} devices")
        self.env = GroupedEnv(task, candidates, specs, envs_per_candidate, seeds, simulator, fitness, physics)
        env = self.env
        self.plan, self.groups, self.sim, self.physics = env.plan, env.groups, env.sim, env.physics
        self.fitness_name, self.fitness, self.specs = env.fitness_name, env.fitness, env.specs
        self.discrete = env.discrete  # a categorical policy over `action_dims` actions, else a Gaussian one
        self.obs_dims, self.action_dims = env.obs_dims, env.action_dims
        self.obs_dim_max, self.action_dim_max = env.obs_dim_max, env.action_dim_max
        # An asymmetric actor-critic where some candidate gives its critic observations of its own.
        self.asymmetric, self.critic_obs_dims, self.critic_obs_dim_max = (env.asymmetric, env.critic_obs_dims,
                                                                          env.critic_obs_dim_max)
        self.component_names = env.component_names
        self.devices = visible[:devices]
        self.layout = self.plan.layout(devices) if (devices > 1 if sharded is None else sharded) else None
        self.mesh = jax.sharding.Mesh(np.array(self.devices), (GROUP_AXIS,))
        self.rows = self.layout.per_device if self.layout else len(self.groups)  # groups a traced function sees
        # rl_games' central value: the critic trains on its own (`envcoder.rl.central_value`).
        self.central_value = getattr(config, "central_value_config", None)
        cv = self.central_value
        self.critic_activation = (cv and cv.activation) or config.activation
        self.critic_normalized = cv.normalize_input if cv else config.normalize_input
        # Per-group constants of the traced functions (each device's rows of them in a sharded run).
        sizes = list(zip(self.obs_dims.tolist(), self.action_dims.tolist(),
                         (self.critic_obs_dims.tolist() if self.asymmetric else [None] * len(self.groups))))
        self._dims = sorted(set(sizes))
        constants = {**env.masks(), "dims_class": np.array([self._dims.index(d) for d in sizes]),
                     "inert": np.zeros(len(self.groups), bool)}
        if self.layout is None:
            self.action_mask, self.dims_class, self.inert = (jnp.asarray(constants[k]) for k in
                                                             ("action_mask", "dims_class", "inert"))
            self._local = None
        else:
            rows = np.maximum(self.layout.order, 0)
            constants = {k: v[rows] for k, v in constants.items()}
            constants["inert"] = self.layout.inert
            self._local = {"plan": self.layout.local, **{
                k: v.reshape((devices, self.rows) + v.shape[1:]) for k, v in constants.items()}}
        self.optimizer = self._setup_updates()
        # Buffer donation saves a copy of the train state on GPU; the CPU backend does not support it.
        donate = () if jax.default_backend() == "cpu" else (0,)
        if self.layout is None:
            self.iteration = StagedIteration(self._jit(self._collect, "collect"),
                                             self._jit(self._learn, "learn", donate))
            self.evaluate = self._jit(self._evaluate, "evaluate")
            self.evaluate_recorded = self._jit(functools.partial(self._evaluate, record=True), "evaluate_recorded")
            self._init_program = self._jit(self._init, "init")
        else:
            options = xla_options()
            self.iteration = jax.jit(self._sharded_iteration, donate_argnums=donate, compiler_options=options)
            self.evaluate = jax.jit(self._sharded_evaluate, compiler_options=options)
            self.evaluate_recorded = jax.jit(functools.partial(self._sharded_evaluate, record=True),
                                             compiler_options=options)
        self.device_copy = jax.jit(lambda tree: jax.tree.map(jnp.copy, tree))
        self.compiled_device_copy = None  # `device_copy` compiled ahead for the train state (`compile_evaluation`)

    def programs(self) -> dict:
        """The trainer's jitted programs on one device: "init" (`keys [G, 2]` -> `TrainState`), "collect" and
        "learn" (the iteration's two stages) and "evaluate"; with the trace cache on, each says whether its trace
        was `loaded` from the cache or `stored` in it."""
        return {"init": self._init_program, "collect": self.iteration.collect, "learn": self.iteration.learn,
                "evaluate": self.evaluate}

    def functions(self) -> dict:
        """The plain functions behind the programs, to lower for shapes or to jit with other options: "init"
        (`keys [G, 2]`), "iteration" (the whole iteration as one function, as a sharded run compiles it),
        "collect" (`ts` -> what "learn" takes with `ts`), "learn" (`(ts, collected)`), "evaluate" (`ts`)."""
        return {"init": self._init, "iteration": self._iteration, "collect": self._collect, "learn": self._learn,
                "evaluate": self._evaluate}

    def _jit(self, function, name: str, donate_argnums=()):
        """`jax.jit(function)` with envcoder's XLA options (`xla_options`); with the trace cache on
        (`envcoder.compile_cache`) and JAX physics, one whose traced program a later run of the same job loads
        instead of tracing (MuJoCo Warp's kernels do not serialize)."""
        if trace_cache_dir() is None or self.physics != "jax":
            return jax.jit(function, donate_argnums=donate_argnums, compiler_options=xla_options())
        return CachedJit(function, f"{self._trace_key}:{name}", donate_argnums, xla_options())

    @functools.cached_property
    def _trace_key(self) -> str:
        """What this trainer's traces depend on besides envcoder's code and the argument shapes: the algorithm,
        the task (its functions and model), the simulator, the groups and their candidates' code, constants and
        sizes, the settings."""
        candidates = {g.candidate.name: g.candidate for g in self.groups}
        return repr((fingerprint(type(self)), fingerprint(self.task), self.fitness_name, fingerprint(type(self.sim)),
                     fingerprint(self.sim.model_file), self.physics, self.sim.substeps, self.num_envs,
                     [g.label for g in self.groups],
                     {name: (sorted((api, c.function_keys.get(api) or fingerprint(f)) for api, f in c.functions.items()),
                             {api: dict(p) for api, p in c.function_params.items()}, c.action_dim)
                      for name, c in candidates.items()},
                     [repr(spec) for spec in self.specs], repr(self.config)))

    def _setup_updates(self) -> optax.GradientTransformation:
        """Check the algorithm's settings against the run's sizes, derive the update's (PPO: minibatches), and
        return the optimizer of one group."""
        batch = self.num_envs * self.config.horizon_length
        self.minibatch_size = self.config.minibatch_size or max(batch // self.config.num_minibatches, 1)
        if batch % self.minibatch_size:
            raise ValueError(f"minibatch_size {self.minibatch_size} must divide envs_per_candidate × horizon_length "
                             f"= {batch}")
        self.num_minibatches = batch // self.minibatch_size
        cv = self.central_value
        if cv is not None:
            self.critic_minibatch_size = cv.minibatch_size or max(batch // cv.num_minibatches, 1)
            if batch % self.critic_minibatch_size:
                raise ValueError(f"central_value_config.minibatch_size {self.critic_minibatch_size} must divide "
                                 f"envs_per_candidate × horizon_length = {batch}")
            self.critic_num_minibatches = batch // self.critic_minibatch_size
            self.critic_optimizer = central_value.optimizer(cv)
        return self._adam()

    def _adam(self) -> optax.GradientTransformation:
        """Adam's scaling (the step size is applied by the update), after gradient clipping where configured."""
        tx = [optax.scale_by_adam(eps=1e-8)]
        if self.config.truncate_grads:
            tx.insert(0, optax.clip_by_global_norm(self.config.grad_norm))
        return optax.chain(*tx)

    # ---- sharding over devices -------------------------------------------------------------------

    def _on_device(self, local: dict) -> "GroupedTrainer":
        """The trainer as one device of a sharded run sees it: its rows of the per-group constants and its
        plan (`local`: its slice of `self._local`)."""
        view = copy.copy(self)
        view.plan = self.plan.localized(local["plan"])
        view.env = self.env.localized(view.plan, self.rows, local["action_mask"], local["obs_mask"])
        view.action_mask, view.dims_class, view.inert = local["action_mask"], local["dims_class"], local["inert"]
        return view

    def _sharded(self, method, in_specs, out_specs):
        """`method(trainer_on_device, *args)` run by every device on its block of the group axis."""
        def body(*args):
            device = jax.lax.axis_index(GROUP_AXIS)
            local = jax.tree.map(lambda table: jnp.asarray(table)[device], self._local)
            return method(self._on_device(local), *args)
        return jax.shard_map(body, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)

    def _canonical(self, x, axis: int = 0):
        """Rows of a layout-ordered array in the plan's group order (inert rows dropped), on every device (so
        that every process of a multi-host run can read them)."""
        return jax.lax.with_sharding_constraint(jnp.take(x, self.layout.position, axis=axis),
                                                NamedSharding(self.mesh, PartitionSpec()))

    def _sharded_iteration(self, ts: TrainState):
        specs = _state_specs()
        ts, metrics = self._sharded(GroupedTrainer._iteration, (specs,), (specs, PartitionSpec(GROUP_AXIS)))(ts)
        return ts, jax.tree.map(self._canonical, metrics)

    def _sharded_evaluate(self, ts: TrainState, record: bool = False):
        def evaluate(trainer, ts):
            out = trainer._evaluate(ts, record=record)
            if record:
                out["qpos"] = out["qpos"].swapaxes(0, 1)  # group axis first inside
            return out
        out = self._sharded(evaluate, (_state_specs(),), PartitionSpec(GROUP_AXIS))(ts)
        out = jax.tree.map(self._canonical, out)
        if record:
            out["qpos"] = out["qpos"].swapaxes(0, 1)
        return out

    def _reduce_groups(self, x, op: str):
        """`all`/`any` of a `[groups]` bool over every group of the run, on every device."""
        local = jnp.all(x) if op == "all" else jnp.any(x)
        if self.layout is None:
            return local
        reduce = jax.lax.pmin if op == "all" else jax.lax.pmax
        return reduce(local.astype(jnp.int32), GROUP_AXIS) > 0

    def _put(self, x) -> jax.Array:
        """A host array of this process (every process holds all of it) laid out over the mesh: sharded on its
        leading (group) axis, or held by every device where it is a scalar."""
        sharding = NamedSharding(self.mesh, PartitionSpec() if np.ndim(x) == 0 else PartitionSpec(GROUP_AXIS))
        return jax.make_array_from_callback(np.shape(x), sharding, lambda index: np.asarray(x)[index])

    def to_host(self, train_state: TrainState) -> TrainState:
        """`train_state` as numpy arrays in the plan's group order (the same for every device count)."""
        host = _read(train_state)
        if self.layout is None:
            return host
        return jax.tree.map(lambda x: x if np.ndim(x) == 0 else np.take(x, self.layout.position, axis=0), host)

    def to_device(self, host_state: TrainState) -> TrainState:
        """A state from `to_host` (of a run over any number of devices), laid out over this trainer's devices."""
        if self.layout is None:
            return jax.device_put(host_state)
        rows = np.maximum(self.layout.order, 0)
        state = jax.tree.map(lambda x: x if np.ndim(x) == 0 else np.take(x, rows, axis=0), host_state)
        state = state._replace(diverged_at=np.where(self.layout.inert, 0, state.diverged_at))  # inert rows stay out
        return jax.tree.map(self._put, state)

    def host_shapes(self, train_state: TrainState):
        """The shapes of `to_host(train_state)`, without reading it."""
        G = len(self.groups)
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct((G,) + x.shape[1:] if x.ndim else (), x.dtype), train_state)

    def group_status(self, train_state: TrainState) -> tuple[np.ndarray, np.ndarray]:
        """`(diverged_at, solved_at)` `[G]` in the plan's order."""
        diverged_at, solved_at = _read((train_state.diverged_at, train_state.solved_at))
        if self.layout is not None:
            diverged_at, solved_at = diverged_at[self.layout.position], solved_at[self.layout.position]
        return diverged_at, solved_at

    @property
    def labels(self) -> list[str]:
        return [g.label for g in self.groups]

    # ---- acting ---------------------------------------------------------------------------------

    def _normalized(self, rms, obs, normalize: bool | None = None):
        """Every group's `obs` normalized by its `rms` (where `normalize`, by default the config's
        `normalize_input`)."""
        if not (self.config.normalize_input if normalize is None else normalize):
            return obs
        return jax.vmap(lambda r, o: r.normalize(o, self.config.clip_observations))(rms, obs)

    def policy(self, params, obs_rms, obs, critic_rms=None, critic_obs=None):
        """`(mu or logits, log_std, value)` of every group; the value of `critic_obs` where the critic has its own."""
        obs = self._normalized(obs_rms, obs)
        act, critic_act = self.config.activation, self.critic_activation
        if critic_obs is None:
            return jax.vmap(lambda p, o: apply_actor_critic(p, o, act, critic_activation=critic_act))(params, obs)
        critic_obs = self._normalized(critic_rms, critic_obs, self.critic_normalized)
        return jax.vmap(lambda p, o, c: apply_actor_critic(p, o, act, c, critic_act))(params, obs, critic_obs)

    def _act_deterministic(self, params, obs_rms, obs):
        """Every group's deterministic action: the mean (clipped), or the most likely action (one-hot)."""
        mu, _ = jax.vmap(lambda p, o: apply_actor(p, o, self.config.activation))(params, self._normalized(obs_rms,
                                                                                                         obs))
        if self.discrete:
            best = jnp.argmax(masked_logits(mu, self.action_mask[:, None, :]), axis=-1)
            return jax.nn.one_hot(best, self.action_dim_max)
        return jnp.clip(mu * self.action_mask[:, None, :], -1.0, 1.0)

    def _sample(self, mu, log_std, keys):
        """Every group's sampled actions `[G, E, A_max]` and their log-probabilities; `keys [G, 2]`. One key per
        action dimension, so that a candidate's draws do not depend on the run's A_max."""
        noise = jax.vmap(lambda k: jax.vmap(lambda j: jax.random.normal(jax.random.fold_in(k, j), (self.num_envs,)),
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
            mu, log_std, values = self.policy(ts.params, ts.obs_rms, obs, ts.critic_rms, critic_obs)
            actions, log_probs = self._sample(mu, log_std, step_keys)
            env, info = self.env.step(env, jnp.clip(actions, -1.0, 1.0), pool, env_keys)
            values_raw = jax.vmap(RunningMeanStd.denormalize)(ts.value_rms, values) if cfg.normalize_value else values
            rewards = info.reward * cfg.reward_scale
            if cfg.value_bootstrap:
                rewards = rewards + cfg.gamma * values_raw * info.truncated
            return env, Transition.of_step(info, obs, actions, rewards, critic_obs=critic_obs, log_probs=log_probs,
                                           mu=mu, values=values)

        step_keys = jax.vmap(lambda k: jax.random.split(k, cfg.horizon_length))(keys).swapaxes(0, 1)
        return jax.lax.scan(step, ts.env, step_keys)

    # ---- one training iteration ------------------------------------------------------------------

    def _iteration(self, ts: TrainState):
        """One training iteration: `(next train state, metrics)`. The sharded program runs it whole; on one
        device it runs as its two stages, each its own program (`StagedIteration`)."""
        return self._learn((ts, self._collect(ts)))

    def _collect(self, ts: TrainState) -> dict:
        """The iteration's first stage: the rollout from `ts` (`env`: the environments after it; `traj` fields
        `[T, G, E, ...]`), the critic's values of its last observations, and the keys the second stage uses."""
        keys = jax.vmap(lambda k: jax.random.split(k, 4))(ts.key)
        next_key, reset_key, rollout_key, update_key = (keys[:, i] for i in range(4))
        pool = self.env.reset_pool(reset_key, ts.env.curriculum)
        env, traj = self._rollout(ts, rollout_key, pool)
        last_obs, last_critic_obs = self.env.observe(env, next_key, critic=True)
        _, _, last_values = self.policy(ts.params, ts.obs_rms, last_obs, ts.critic_rms, last_critic_obs)
        return dict(env=env, traj=traj, last_values=last_values, next_key=next_key, update_key=update_key)

    def _learn(self, args: tuple[TrainState, dict]):
        """The iteration's second stage, from `(ts, ts's _collect)`: normalizers, GAE, the PPO epochs, isolation
        and metrics. One argument, so that a program can donate all of it."""
        ts, collected = args
        cfg = self.config
        env, traj, last_values = collected["env"], collected["traj"], collected["last_values"]
        next_key, update_key = collected["next_key"], collected["update_key"]
        obs_rms, critic_rms = ts.obs_rms, ts.critic_rms
        update = jax.vmap(lambda rms, o: rms.update(o.reshape(-1, o.shape[-1])))
        if cfg.normalize_input:
            obs_rms = update(obs_rms, traj.obs.swapaxes(0, 1))
        if self.asymmetric and self.critic_normalized:
            critic_rms = update(critic_rms, traj.critic_obs.swapaxes(0, 1))

        def per_group(x):
            return x.swapaxes(0, 1)  # [T, G, ...] -> [G, T, ...]

        denorm = jax.vmap(RunningMeanStd.denormalize)
        values_raw = denorm(ts.value_rms, per_group(traj.values)) if cfg.normalize_value else per_group(traj.values)
        last_raw = denorm(ts.value_rms, last_values) if cfg.normalize_value else last_values
        advantages, returns = jax.vmap(lambda r, v, d, lv: compute_gae(r, v, d, lv, cfg.gamma, cfg.tau))(
            per_group(traj.rewards), values_raw, per_group(traj.dones), last_raw)
        value_rms = ts.value_rms
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
            params, opt_state, learning_rate, losses = jax.vmap(self._update_group)(
                ts.params, ts.opt_state, learning_rate, obs_rms, critic_rms, batch, update_key, self.action_mask)
        else:
            params, opt_state, learning_rate, losses = jax.vmap(self._update_group_central_value, in_axes=(
                0, 0, 0, 0, 0, 0, 0, 0, None))(ts.params, ts.opt_state, learning_rate, obs_rms, critic_rms, batch,
                                               update_key, self.action_mask, ts.iteration)
        updates = {"actor_loss": losses.actor, "critic_loss": losses.critic, "entropy": losses.entropy,
                   "bounds_loss": losses.bounds, "kl": losses.kl}
        return self._conclude(ts, env, traj, next_key, dict(params=params, opt_state=opt_state,
                                                            learning_rate=learning_rate, obs_rms=obs_rms,
                                                            value_rms=value_rms, critic_rms=critic_rms), updates)

    def _conclude(self, ts: TrainState, env: EnvState, traj: Transition, next_key, new: dict, updates: dict):
        """The next train state and the iteration's metrics, from the rollout's `env` and `traj` and the update's
        `new` train-state fields (stacked over groups), applied only to the groups that are still training; the
        update's own metrics `updates` (name -> `[G]`) are NaN for the others."""
        cfg = self.config
        # Isolation: a group whose data or parameters went non-finite keeps its last finite policy, stops
        # updating and is reported; nothing crosses groups, so the others are unaffected. A group whose
        # episodes reached score_to_win keeps the policy that collected them (this update is dropped).
        finite = (_all_finite_per_group((traj.obs, traj.actions, traj.step_reward), group_axis=1)
                  & _all_finite_per_group(new["params"], group_axis=0))
        training = (ts.diverged_at < 0) & (ts.solved_at < 0)
        solved_now = training & finite & self._reached(traj)
        updated = training & finite & ~solved_now
        new = _where_group(updated, new, {name: getattr(ts, name) for name in new})
        diverged_at = jnp.where(training & ~finite, ts.iteration, ts.diverged_at)
        solved_at = jnp.where(solved_now, ts.iteration, ts.solved_at)

        metrics = self._metrics(traj, updates, new["learning_rate"])
        metrics = {k: jnp.where(diverged_at >= 0, jnp.nan, v) for k, v in metrics.items()}
        for name in updates:  # no update was applied to these groups
            metrics[name] = jnp.where(updated, metrics[name], jnp.nan)
        metrics["diverged"] = (diverged_at >= 0).astype(jnp.float32)
        metrics["solved"] = (solved_at >= 0).astype(jnp.float32)
        best = self._best(ts, metrics["task_fitness"], diverged_at)
        if self.env.curriculum_shapes:
            env = env._replace(curriculum=self.env.curriculum(ts.iteration + 1, metrics, env.curriculum))
            for name, value in env.curriculum.items():  # logged as scalars: curriculum/NAME or curriculum/NAME/i
                flat = value.reshape(value.shape[0], -1)
                for i in range(flat.shape[1]):
                    metrics[f"curriculum/{name}" + (f"/{i}" if value.ndim > 1 else "")] = flat[:, i]
        new_ts = ts._replace(**new, env=env, key=next_key, iteration=ts.iteration + 1, diverged_at=diverged_at,
                             solved_at=solved_at, best=best)
        if cfg.score_to_win is not None:
            # Once every group is solved or diverged the run is over: an iteration dispatched after that (the
            # driver dispatches one ahead of reading metrics) leaves the state as it is.
            over = (self._reduce_groups((ts.diverged_at >= 0) | (ts.solved_at >= 0), "all")
                    & self._reduce_groups(ts.solved_at >= 0, "any"))
            new_ts = jax.tree.map(lambda old, new: jnp.where(over, old, new), ts, new_ts)
        return new_ts, metrics

    def _best(self, ts: TrainState, fitness, diverged_at) -> BestPolicy:
        """`ts.best` with the groups whose episodes of this iteration beat their best so far replaced by the
        policy that collected them (`ts.params`, before this iteration's update)."""
        best = ts.best
        beats = (fitness > best.fitness) if self.fitness.higher_is_better else (fitness < best.fitness)
        improved = ((ts.iteration + 1 >= self.config.save_best_after) & ~jnp.isnan(fitness) & (diverged_at < 0)
                    & (jnp.isnan(best.fitness) | beats))
        return _where_group(improved, BestPolicy(ts.params, ts.obs_rms, fitness, jnp.broadcast_to(
            ts.iteration, improved.shape)), best)

    def _reached(self, traj: Transition) -> jnp.ndarray:
        """`[G]` bool: the episodes that ended in this rollout reached `score_to_win` on average."""
        if self.config.score_to_win is None:
            return jnp.zeros(traj.dones.shape[1], bool)
        count = traj.dones.sum(axis=(0, 2))
        fitness = (traj.completed_fitness * traj.dones).sum(axis=(0, 2)) / jnp.maximum(count, 1)
        reached = fitness >= self.config.score_to_win if self.fitness.higher_is_better else (
            fitness <= self.config.score_to_win)
        return (count > 0) & reached

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
        epochs on the value loss (`envcoder.rl.central_value.train`)."""
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

    def _init_optimizer(self, params):
        """One group's optimizer state (with a central value, the actor's and the critic's)."""
        if self.central_value is None:
            return self.optimizer.init(params)
        return {"actor": self.optimizer.init({k: v for k, v in params.items() if k != "critic"}),
                "critic": self.critic_optimizer.init(params["critic"])}

    def _metrics(self, traj: Transition, updates: dict, learning_rate):
        """Per-group metrics `[G]` of one iteration (`updates`: the update's own). Episode means are NaN when no
        episode ended."""
        count = traj.dones.sum(axis=(0, 2))

        def episode_mean(x):
            return jnp.where(count > 0, (x * traj.dones).sum(axis=(0, 2)) / jnp.maximum(count, 1), jnp.nan)

        metrics = {
            "episodes": count,
            "task_fitness": episode_mean(traj.completed_fitness),
            # Available every iteration, also before any long episode has ended.
            "task_fitness_per_step": traj.fitness_step.mean(axis=(0, 2)),
            "physics_failures": traj.physics_failures.sum(axis=(0, 2)),
            "shaped_return": episode_mean(traj.completed_return),
            "episode_length": episode_mean(traj.completed_length),
            "step_reward": traj.step_reward.mean(axis=(0, 2)),
            **updates, "learning_rate": learning_rate,
        }
        for name, value in traj.components.items():
            metrics[f"reward/{name}"] = value.mean(axis=(0, 2))
        return metrics

    # ---- initialization and evaluation -----------------------------------------------------------

    def init(self, prepare_iteration: bool = False) -> TrainState:
        """Initial train state; every group's randomness comes from `group_key(name, seed)`. `prepare_iteration`
        (for a caller that trains next; one device): trace the training iteration for the state's shapes while
        `init` compiles, and compile it in the background (`StagedIteration.prepare`), so that the first iteration
        waits only for what is left of its compile (H100, README job: init + compile + first iteration 30.9 -> 25.7 s,
        docs/benchmarks/throughput.md § 2)."""
        keys = np.stack([jax.device_get(group_key(g.candidate.name, g.seed)) for g in self.groups])
        if self.layout is None:
            lowered = self._init_program.lower(keys)
            compiled = in_thread(lowered.compile, "envcoder-compile-init")
            if prepare_iteration:
                self.iteration.prepare(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                                                    lowered.out_info))
            state = compiled.result()(keys)
        else:
            keys = keys[np.maximum(self.layout.order, 0)]
            keys = self._put(keys)
            state = jax.jit(self._sharded(GroupedTrainer._init, (PartitionSpec(GROUP_AXIS),), _state_specs()),
                            compiler_options=xla_options())(keys)
        # The best policy gets buffers of its own: the iteration donates the train state, and one buffer may
        # not be donated twice.
        return state._replace(best=state.best._replace(
            params=jax.tree.map(jnp.copy, state.best.params), obs_rms=jax.tree.map(jnp.copy, state.best.obs_rms)))

    def _init(self, keys) -> TrainState:
        """`init` as one function (one compilation, one persistent-cache entry); `keys [G, 2]`."""
        cfg = self.config
        keys = jax.vmap(lambda k: jax.random.split(k, 3))(keys)
        param_keys, env_keys, next_keys = keys[:, 0], keys[:, 1], keys[:, 2]

        # Every group is initialized at its own (obs size, action size), then padded: each size class is
        # initialized for all groups and each group keeps its own class's (a handful of classes, once per run).
        params = None
        critic_units = self.central_value.units if self.central_value else None
        for index, (obs_dim, action_dim, critic_dim) in enumerate(self._dims):
            sized = init_per_group(lambda k, o=obs_dim, a=action_dim, c=critic_dim: pad_actor_critic(
                init_actor_critic(k, o, a, cfg.units, cfg.sigma_init, c, critic_units), self.obs_dim_max,
                self.action_dim_max, self.critic_obs_dim_max), param_keys)
            params = sized if params is None else _where_group(self.dims_class == index, sized, params)

        G = self.rows
        obs_rms = jax.vmap(lambda _: RunningMeanStd.create((self.obs_dim_max,)))(jnp.arange(G))
        value_rms = jax.vmap(lambda _: RunningMeanStd.create(()))(jnp.arange(G))
        critic_rms = (jax.vmap(lambda _: RunningMeanStd.create((self.critic_obs_dim_max,)))(jnp.arange(G))
                      if self.asymmetric else None)
        best = BestPolicy(params, obs_rms, jnp.full((G,), jnp.nan, jnp.float32), jnp.full((G,), -1, jnp.int32))
        return TrainState(params, jax.vmap(self._init_optimizer)(params),
                          jnp.full((G,), cfg.learning_rate, jnp.float32),
                          obs_rms, value_rms, critic_rms, self.env.reset(env_keys, self.env.first_curriculum()),
                          next_keys, jnp.asarray(0, jnp.int32),
                          jnp.where(self.inert, 0, -1).astype(jnp.int32), jnp.full((G,), -1, jnp.int32), best)

    def snapshot(self, train_state: TrainState) -> TrainState | None:
        """A copy of `train_state` on the device (it survives the next iteration, which donates its input), or
        None where the device lacks the free memory for one (twice its size) or reports none (the CPU), and in a
        multi-host run (reading it back is a collective of all processes, which the caller's thread must make)."""
        if jax.process_count() > 1:
            return None
        stats = self.devices[0].memory_stats() if jax.default_backend() != "cpu" else None
        size = sum(x.nbytes for x in jax.tree.leaves(train_state)) / len(self.devices)  # per device
        if not stats or stats.get("bytes_limit", 0) - stats.get("bytes_in_use", 0) < 2 * size:
            return None
        return (self.compiled_device_copy or self.device_copy)(train_state)

    def compile_evaluation(self, train_state: TrainState) -> concurrent.futures.Future:
        """Compile `evaluate` for `train_state`'s shapes in a background thread, to overlap with training (start
        it once the iteration is compiled); the future gives the compiled function. The checkpoints' device copy
        (`snapshot`) is compiled first in the same thread: compiled at the first checkpoint, it stalled training
        for about 0.5 s there (H100, README job)."""
        shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), train_state)

        def compile_():
            try:
                self.compiled_device_copy = self.device_copy.lower(shapes).compile()
            except Exception:  # noqa: BLE001 - `snapshot` compiles it where it is used, as before
                pass
            return self.evaluate.lower(shapes).compile()
        # A daemon thread: a run that fails before it evaluates exits without waiting for this compile.
        return in_thread(compile_, "envcoder-compile-evaluation")

    def _evaluate(self, ts: TrainState, seed_offset: int = 1_000_003, record: bool = False):
        """Task fitness of every group's deterministic policy over one full episode per env.

        Returns `{"task_fitness": [G, E], "episode_length": [G, E], "shaped_return": [G, E]}`; with `record`,
        also `"qpos": [T, G, E, nq]`, the pose before each step (for rendering).
        """
        keys = jax.vmap(lambda k: jax.random.fold_in(k, seed_offset))(ts.key)
        env = self.env.reset(keys, ts.env.curriculum, held_out=self.fitness.physics)
        pool = ResetPool.of(env)
        alive = jnp.ones((self.rows, self.num_envs), bool)
        totals = (jnp.zeros(alive.shape), jnp.zeros(alive.shape), jnp.zeros(alive.shape))

        def step(carry, index):
            env, alive, (fitness, length, ret) = carry
            step_keys = jax.vmap(lambda k: jax.random.fold_in(k, index))(keys)
            obs = self.env.observe(env, step_keys)
            env, info = self.env.step(env, self._act_deterministic(ts.params, ts.obs_rms, obs), pool, step_keys)
            ended = alive & info.done
            fitness = jnp.where(ended, info.episode_fitness, fitness)
            length = jnp.where(ended, info.episode_length, length)
            ret = jnp.where(ended, info.episode_return, ret)
            return (env, alive & ~info.done, (fitness, length, ret)), env.data.qpos if record else None

        (_, _, (fitness, length, ret)), qpos = jax.lax.scan(
            step, (env, alive, totals), jnp.arange(self.task.max_episode_length))
        diverged = (ts.diverged_at >= 0)[:, None]
        out = {k: jnp.where(diverged, jnp.nan, v)
               for k, v in {"task_fitness": fitness, "episode_length": length, "shaped_return": ret}.items()}
        if record:
            out["qpos"] = jnp.concatenate([env.data.qpos[None], qpos[:-1]])  # the pose each step starts from
        return out


def _read(tree):
    """`tree` as numpy arrays on this host; in a multi-host run a collective that every process must make."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    from jax.experimental import multihost_utils
    return multihost_utils.process_allgather(tree, tiled=True)


def _state_specs() -> TrainState:
    """`shard_map` specs of a `TrainState` (a prefix of its tree): the group axis leads every array but the
    iteration counter, which every device holds."""
    group = PartitionSpec(GROUP_AXIS)
    return TrainState(*([group] * len(TrainState._fields)))._replace(iteration=PartitionSpec())
