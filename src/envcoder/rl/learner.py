"""What every grouped learner shares: G independent policies, one per (candidate, seed), trained together.

A learner steps the run's environments (`envcoder.env.GroupedEnv`) and trains one policy per group on them. This
base holds everything that is not the algorithm: the train state's common part, initialization over the groups'
own observation and action sizes, isolation (a group that goes non-finite stops and is reported; the others are
unaffected), each group's best policy, the iteration's metrics, the deterministic evaluation and the host↔device
transfers, and how its functions become programs: jitted with envcoder's XLA options, their traces kept in the trace
cache under a key of what they depend on, the final evaluation compiled in the background while the run trains.
`envcoder.rl.ppo.learner.GroupedPPO`, `envcoder.rl.dqn.learner.GroupedDQN` and `envcoder.rl.sac.learner.GroupedSAC` are its
siblings; each keeps its own state in `TrainState.own`.

Layout: every per-environment array is `[G, E, ...]` (G groups × E envs per candidate). Networks, normalizers and
updates are single-policy functions vmapped over the group axis. Nothing mixes across groups, so a group's result
depends only on its candidate, its seed and the config.

On one device an iteration runs as two programs, the rollout ("collect") and the update ("learn"), which compile
at once (`envcoder.rl.staging.StagedIteration`): XLA compiles one program on one thread, and two programs
compiled at once on a GPU took about the longer one's time (docs/benchmarks/throughput.md). Over several
devices the group axis is sharded (`envcoder.rl.sharding`) and the iteration is one program.

Usage:
    learner = GroupedPPO(task, candidates, config, envs_per_candidate=256, seeds=(0,))   # candidates validated
    state = learner.init()
    for _ in range(config.max_epochs):
        state, metrics = learner.iteration(state)      # jitted, asynchronous
    fitness = learner.evaluate(state)                  # deterministic episodes, task fitness per group
"""

from __future__ import annotations

import concurrent.futures
import copy
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import PartitionSpec

from envcoder.compile_cache import CachedJit, fingerprint, trace_cache_dir, xla_options
from envcoder.env import EnvState, GroupedEnv
from envcoder.rl.networks import init_per_group
from envcoder.rl.normalizer import RunningMeanStd
from envcoder.rl.staging import StagedIteration, in_thread
from envcoder.rl.sharding import GROUP_AXIS, GroupSharding, choose_devices, read, reduce_groups
from envcoder.rl.train_state import (BestPolicy, TrainState, Transition, all_finite_per_group, iteration_metrics, reached,
                               where_group)
from envcoder.candidates import Candidate
from envcoder.env.grouping import group_key
from envcoder.sim import Simulator
from envcoder.tasks.base import Task


EVALUATION_ENVS = 262_144
"""The most environments a device steps at once in the final evaluation by default: its memory (Ant: ~18 KiB an
environment, the physics step's temporaries) and time (one full episode each) stay those of 1,024 groups × 256 envs
however many groups a device trains (8,192 Ant groups × 256 envs needed 36 GiB to evaluate every environment)."""


def evaluation_envs_per_group(asked: int | None, groups: int, envs_per_candidate: int, physics: str) -> int:
    """Environments per group of the final evaluation, for `groups` groups on a device: `asked` (None: the training
    environments, at most `EVALUATION_ENVS` over the device's groups), never more than a group trains; MuJoCo Warp
    steps every training environment (its worlds are fixed)."""
    if physics == "warp":
        return envs_per_candidate
    if asked is not None:
        if asked < 1:
            raise ValueError(f"--evaluation-envs {asked}: give 1 or more environments per group")
        return min(asked, envs_per_candidate)
    return max(1, min(envs_per_candidate, EVALUATION_ENVS // groups))


RECORDED = ("qpos", "qvel")
"""What a recorded evaluation adds per step, time first (`GroupedEnv.episodes`): kept as is for a diverged group."""

class GroupedLearner:
    """Trains one policy per group; see the module docstring. A subclass is the algorithm: it sets up its update
    (`_setup_updates`), initializes one group's parameters, optimizer and own state, acts (`act_deterministic`)
    and implements the iteration's two stages (`_collect`, then `_learn`, which ends with `_conclude`)."""

    def __init__(self, task: Task, candidates: Sequence[Candidate], config, envs_per_candidate: int,
                 seeds: Sequence[int] = (0,), simulator: Simulator | None = None, fitness: str | None = None,
                 physics: str | None = None, devices: int | None = None, sharded: bool | None = None,
                 evaluation_envs: int | None = None):
        """`candidates`: validated (`envcoder.env.GroupedEnv`). `simulator`: the physics for all groups'
        environments; without one, a simulator of `physics` ("jax" or "warp"; None: "jax") is built. `devices`: how
        many of the visible devices to shard the groups over (None: all). `sharded`: build the sharded program (None:
        where there are several devices; True on one device measures its cost against the plain one).
        `evaluation_envs`: environments per group of `evaluate` (`evaluation_envs_per_group`)."""
        self.task, self.config, self.envs_per_candidate = task, config, envs_per_candidate
        self.devices = choose_devices(devices, simulator.physics if simulator is not None else physics)
        self.env = env = GroupedEnv(task, candidates, envs_per_candidate, seeds, simulator, fitness, physics)
        self.evaluation_envs = evaluation_envs_per_group(evaluation_envs, -(-len(env.groups) // len(self.devices)),
                                                         envs_per_candidate, env.physics)
        # Per-group constants of the traced functions (each device's rows of them in a sharded run).
        sizes = list(zip(self.obs_dims.tolist(), self.action_dims.tolist(),
                         (self.critic_obs_dims.tolist() if self.asymmetric else [None] * len(self.groups))))
        self._network_sizes = sorted(set(sizes))
        constants = {**env.masks(), "size_index": np.array([self._network_sizes.index(d) for d in sizes]),
                     "inert": np.zeros(len(self.groups), bool)}
        shard = len(self.devices) > 1 if sharded is None else sharded
        self.sharding = GroupSharding(self.plan, self.devices, constants) if shard else None
        self.layout = self.sharding.layout if shard else None
        self.rows = self.sharding.rows if shard else len(self.groups)  # groups a traced function sees
        self.action_mask, self.size_index, self.inert = (jax.device_put(constants[k]) for k in
                                                         ("action_mask", "size_index", "inert"))
        self.optimizer = self._setup_updates()
        # Buffer donation saves a copy of the train state on GPU; the CPU backend does not support it.
        donate = () if jax.default_backend() == "cpu" else (0,)
        if not shard:
            self.iteration = StagedIteration(self._jit(self._collect_stage, "collect"),
                                             self._jit(self._learn_stage, "learn", donate))
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

    # The environments' sizes and plan, read through `env` (a view of the learner has its own env: `reading`,
    # `on_device`). `discrete`: a policy over `action_dims` discrete actions, else a continuous one; `asymmetric`: an
    # actor-critic where some candidate gives its critic observations of its own.
    plan = property(lambda self: self.env.plan)
    groups = property(lambda self: self.env.groups)
    sim = property(lambda self: self.env.sim)
    physics = property(lambda self: self.env.physics)
    fitness_name = property(lambda self: self.env.fitness_name)
    fitness = property(lambda self: self.env.fitness)
    discrete = property(lambda self: self.env.discrete)
    obs_dims = property(lambda self: self.env.obs_dims)
    action_dims = property(lambda self: self.env.action_dims)
    obs_dim_max = property(lambda self: self.env.obs_dim_max)
    action_dim_max = property(lambda self: self.env.action_dim_max)
    asymmetric = property(lambda self: self.env.asymmetric)
    critic_obs_dims = property(lambda self: self.env.critic_obs_dims)
    critic_obs_dim_max = property(lambda self: self.env.critic_obs_dim_max)
    component_names = property(lambda self: self.env.component_names)

    def _view(self, **changes) -> "GroupedLearner":
        """A view of this learner that differs only in `changes` (everything else shared)."""
        view = copy.copy(self)
        view.__dict__.update(changes)
        return view

    # ---- what an algorithm provides ---------------------------------------------------------------

    def _setup_updates(self):
        """Check the algorithm's settings against the run's sizes and return the optimizer of one group."""
        raise NotImplementedError

    def _init_params(self, key, obs_dim: int, action_dim: int, critic_obs_dim: int | None) -> dict:
        """One group's parameters at its own sizes, zero-padded to the run's largest."""
        raise NotImplementedError

    def _init_optimizer(self, params):
        """One group's optimizer state."""
        raise NotImplementedError

    def _init_own(self, groups: int):
        """The algorithm's own state of `groups` groups (`TrainState.own`)."""
        raise NotImplementedError

    def act_deterministic(self, params, obs_rms, obs):
        """Every group's deterministic action `[G, E, A_max]` for observations `obs [G, E, D_max]`."""
        raise NotImplementedError

    def _collect(self, ts: TrainState) -> dict:
        """The iteration's first stage: the rollout from `ts` and whatever the second stage needs of it."""
        raise NotImplementedError

    def _learn(self, args: tuple[TrainState, dict]):
        """The iteration's second stage, from `(ts, ts's _collect)`: `(next train state, metrics)`. One argument, so
        that a program can donate all of it."""
        raise NotImplementedError

    # ---- helpers of every algorithm ----------------------------------------------------------------

    def normalized(self, rms, obs, normalize: bool | None = None):
        """Every group's `obs` normalized by its `rms` (where `normalize`, by default the config's
        `normalize_input`)."""
        if not (self.config.normalize_input if normalize is None else normalize):
            return obs
        return jax.vmap(lambda r, o: r.normalize(o, self.config.clip_observations))(rms, obs)

    def adam(self) -> optax.GradientTransformation:
        """Adam's scaling (the step size is applied by the update), after gradient clipping where configured."""
        tx = [optax.scale_by_adam(eps=1e-8)]
        if self.config.truncate_grads:
            tx.insert(0, optax.clip_by_global_norm(self.config.grad_norm))
        return optax.chain(*tx)

    # ---- sharding over devices ----------------------------------------------------------------------

    def on_device(self, local: dict) -> "GroupedLearner":
        """The learner as one device of a sharded run sees it: its rows of the per-group constants and its plan
        (`local`: its slice of `GroupSharding.local`)."""
        env = self.env.localized(self.plan.localized(local["plan"]), self.rows, local["action_mask"], local["obs_mask"])
        return self._view(env=env, action_mask=local["action_mask"], size_index=local["size_index"],
                          inert=local["inert"])

    def _sharded_iteration(self, ts: TrainState):
        specs = _state_specs()
        ts, metrics = self.sharding.map(self, type(self)._iteration, (specs,), (specs, PartitionSpec(GROUP_AXIS)))(ts)
        return ts, jax.tree.map(self.sharding.canonical, metrics)

    def _sharded_evaluate(self, ts: TrainState, record: bool = False):
        def evaluate(learner, ts):
            out = learner._evaluate(ts, record=record)
            return {k: v.swapaxes(0, 1) if k in RECORDED else v for k, v in out.items()}  # group axis first inside
        out = self.sharding.map(self, evaluate, (_state_specs(),), PartitionSpec(GROUP_AXIS))(ts)
        out = jax.tree.map(self.sharding.canonical, out)
        return {k: v.swapaxes(0, 1) if k in RECORDED else v for k, v in out.items()}

    def to_host(self, train_state: TrainState) -> TrainState:
        """`train_state` as numpy arrays in the plan's group order (the same for every device count)."""
        host = read(train_state)
        return host if self.sharding is None else self.sharding.to_host(host)

    def to_device(self, host_state: TrainState) -> TrainState:
        """A state from `to_host` (of a run over any number of devices), laid out over this learner's devices."""
        return jax.device_put(host_state) if self.sharding is None else self.sharding.to_device(host_state)

    def state_shapes(self) -> TrainState:
        """The shapes of a fresh train state (`init`'s), traced only: nothing is compiled or run."""
        keys = jax.ShapeDtypeStruct((len(self.groups), 2), jnp.uint32)
        return jax.eval_shape(self._init_program, keys, self.plan.constants())

    def host_shapes(self, train_state: TrainState):
        """The shapes of `to_host(train_state)`, without reading it."""
        G = len(self.groups)
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct((G,) + x.shape[1:] if x.ndim else (), x.dtype), train_state)

    def group_status(self, train_state: TrainState) -> tuple[np.ndarray, np.ndarray]:
        """`(diverged_at, solved_at)` `[G]` in the plan's order."""
        diverged_at, solved_at = read((train_state.diverged_at, train_state.solved_at))
        if self.sharding is not None:
            diverged_at, solved_at = (self.sharding.in_plan_order(x) for x in (diverged_at, solved_at))
        return diverged_at, solved_at

    @property
    def labels(self) -> list[str]:
        return [g.label for g in self.groups]

    # ---- one training iteration ---------------------------------------------------------------------

    def _iteration(self, ts: TrainState):
        """One training iteration: `(next train state, metrics)`. The sharded program runs it whole; on one
        device it runs as its two stages, each its own program (`StagedIteration`)."""
        learner = self.reading(ts.constants)
        return learner._learn((ts, learner._collect(ts)))

    def _collect_stage(self, ts: TrainState) -> dict:
        """`_collect` as the first stage of the iteration on one device (`StagedIteration`)."""
        return self.reading(ts.constants)._collect(ts)

    def _learn_stage(self, args: tuple[TrainState, dict]):
        """`_learn` as the second stage."""
        return self.reading(args[0].constants)._learn(args)

    def reading(self, constants: dict) -> "GroupedLearner":
        """The learner whose shaping functions, traced, read their constants from `constants` (the train state's:
        its programs' input, so that candidates that differ only in constants share them; `GroupPlan.reading`)."""
        return self._view(env=self.env.reading(constants))

    def _conclude(self, ts: TrainState, env: EnvState, traj: Transition, next_key, new: dict, updates: dict):
        """The next train state and the iteration's metrics, from the rollout's `env` and `traj` and the update's
        `new` train-state fields (stacked over groups), applied only to the groups that are still training; the
        update's own metrics `updates` (name -> `[G]`) are NaN for the others."""
        cfg = self.config
        # Isolation: a group whose data or parameters went non-finite keeps its last finite policy, stops
        # updating and is reported; nothing crosses groups, so the others are unaffected. A group whose
        # episodes reached score_to_win keeps the policy that collected them (this update is dropped).
        finite = (all_finite_per_group((traj.obs, traj.actions, traj.step_reward), group_axis=1)
                  & all_finite_per_group(new["params"], group_axis=0))
        training = (ts.diverged_at < 0) & (ts.solved_at < 0)
        solved_now = training & finite & reached(traj, cfg.score_to_win, self.fitness.higher_is_better)
        updated = training & finite & ~solved_now
        new = where_group(updated, new, {name: getattr(ts, name) for name in new})
        diverged_at = jnp.where(training & ~finite, ts.iteration, ts.diverged_at)
        solved_at = jnp.where(solved_now, ts.iteration, ts.solved_at)

        metrics = iteration_metrics(traj, updates, new["learning_rate"])
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
            sharded = self.sharding is not None
            over = (reduce_groups((ts.diverged_at >= 0) | (ts.solved_at >= 0), "all", sharded)
                    & reduce_groups(ts.solved_at >= 0, "any", sharded))
            new_ts = jax.tree.map(lambda old, new: jnp.where(over, old, new), ts, new_ts)
        return new_ts, metrics

    def _best(self, ts: TrainState, fitness, diverged_at) -> BestPolicy:
        """`ts.best` with the groups whose episodes of this iteration beat their best so far replaced by the
        policy that collected them (`ts.params`, before this iteration's update)."""
        best = ts.best
        beats = (fitness > best.fitness) if self.fitness.higher_is_better else (fitness < best.fitness)
        improved = ((ts.iteration + 1 >= self.config.save_best_after) & ~jnp.isnan(fitness) & (diverged_at < 0)
                    & (jnp.isnan(best.fitness) | beats))
        return where_group(improved, BestPolicy(ts.params, ts.obs_rms, fitness, jnp.broadcast_to(
            ts.iteration, improved.shape)), best)

    # ---- how its functions become programs --------------------------------------------------------------

    def programs(self) -> dict:
        """The learner's jitted programs on one device: "init" (`keys [G, 2]` -> `TrainState`), "collect" and
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

    def traces(self) -> dict:
        """`{"traced", "loaded"}`: how many of the programs' traces were traced and written to the trace cache, and
        how many were loaded from it (`{}` for a sharded run: its programs are traced every time)."""
        if self.sharding is not None:
            return {}
        programs = self.programs().values()
        return {"traced": sum(getattr(p, "stored", 0) for p in programs),
                "loaded": sum(getattr(p, "loaded", 0) for p in programs)}

    def _jit(self, function, name: str, donate_argnums=()):
        """`jax.jit(function)` with envcoder's XLA options (`xla_options`); with the trace cache on
        (`envcoder.compile_cache`) and JAX physics, one whose traced program a later run of the same job loads
        instead of tracing (MuJoCo Warp's kernels do not serialize)."""
        if trace_cache_dir() is None or self.physics != "jax":
            return jax.jit(function, donate_argnums=donate_argnums, compiler_options=xla_options())
        return CachedJit(function, f"{self._trace_key}:{name}", donate_argnums, xla_options())

    @functools.cached_property
    def _trace_key(self) -> str:
        """What this learner's traces depend on besides envcoder's code and the argument shapes: the algorithm,
        the task (its functions and model), the simulator, the function classes (their code, groups and constants'
        names: the constants' values are inputs), each group's sizes, the settings. Not the candidates' names: a
        search's next generation that changes only constants loads the traces of the one before."""
        functions = sorted({(c.key, fingerprint(c.function) if c.key.endswith(":default") else "")
                            for classes in self.plan.classes.values() for c in classes})
        return repr((fingerprint(type(self)), fingerprint(self.task), self.fitness_name, fingerprint(type(self.sim)),
                     fingerprint(self.sim.model_file), self.physics, self.sim.substeps, self.envs_per_candidate,
                     self.plan.signature(), functions, [_sizes(g.candidate) for g in self.groups], repr(self.config)))

    @property
    def compiles_evaluation_early(self) -> bool:
        """Whether `evaluate` may compile while the run trains (`compile_evaluation`): not where a device steps more
        environments than `EVALUATION_ENVS`. XLA's compile takes device memory for its autotuning, and where the
        iteration's buffers fill most of a device, those allocations split its pool: 8,192 Ant groups × 256 envs on
        an 80 GB GPU then found no block of 34.6 GiB for the second iteration with 48 GiB free (compiled after
        training, the run fits: docs/benchmarks/multigpu.md)."""
        return self.rows * self.envs_per_candidate <= EVALUATION_ENVS

    def compile_evaluation(self, train_state: TrainState) -> concurrent.futures.Future:
        """Compile `evaluate` for `train_state`'s shapes in a background thread, to overlap with training (start
        it once the iteration is compiled); the future gives the compiled function. The checkpoints' device copy
        (`snapshot`) is compiled first in the same thread: compiled at the first checkpoint, it stalled training
        for about 0.5 s there."""
        shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), train_state)

        def compile_():
            try:
                self.compiled_device_copy = self.device_copy.lower(shapes).compile()
            except Exception:  # noqa: BLE001 - `snapshot` compiles it where it is used, as before
                pass
            return self.evaluate.lower(shapes).compile()
        # A daemon thread: a run that fails before it evaluates exits without waiting for this compile.
        return in_thread(compile_, "envcoder-compile-evaluation")

    # ---- initialization and evaluation --------------------------------------------------------------

    def init(self, prepare_iteration: bool = False) -> TrainState:
        """Initial train state; every group's randomness comes from `group_key(name, seed)`. `prepare_iteration`
        (for a caller that trains next; one device): the iteration is traced for the state's shapes (`init` traced
        only) and compiled in the background first, `init`'s compile started once the rollout's stage compiles:
        that stage is a cold start's critical path (docs/benchmarks/throughput.md)."""
        constants = self.plan.constants()
        keys_shape = jax.ShapeDtypeStruct((len(self.groups), 2), jnp.uint32)
        if self.sharding is None:
            init, pending = self._init_program, []

            def compile_init():
                pending.append(in_thread(init.lower(keys_shape, constants).compile, "envcoder-compile-init"))
            if prepare_iteration:
                shapes = (init.out_shapes(keys_shape, constants) if isinstance(init, CachedJit)
                          else init.trace(keys_shape, constants).out_info)
                self.iteration.prepare(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), shapes),
                                       meanwhile=compile_init)
            if not pending:  # not prepared, or its compile failed to start there (it raises here)
                compile_init()
        keys = np.stack([jax.device_get(group_key(g.candidate.name, g.seed)) for g in self.groups])  # meanwhile
        if self.sharding is None:
            state = pending[0].result()(keys, constants)
        else:
            keys, constants = jax.tree.map(lambda x: self.sharding.put(x[np.maximum(self.layout.order, 0)]),
                                           (keys, constants))
            state = jax.jit(self.sharding.map(self, type(self)._init, (PartitionSpec(GROUP_AXIS),) * 2,
                                              _state_specs()), compiler_options=xla_options())(keys, constants)
        # The best policy gets buffers of its own: the iteration donates the train state, and one buffer may
        # not be donated twice.
        params, obs_rms = _copy((state.best.params, state.best.obs_rms))  # one program, not one a leaf
        return state._replace(best=state.best._replace(params=params, obs_rms=obs_rms))

    def _init(self, keys, constants: dict | None = None) -> TrainState:
        """`init` as one function (one compilation, one persistent-cache entry); `keys [G, 2]`; `constants`: the
        shaping functions' (`GroupPlan.constants`; None: the plan's, as literals of the program)."""
        constants = jax.tree.map(jnp.asarray, self.plan.constants() if constants is None else constants)
        return self.reading(constants)._init_with(keys, constants)

    def _init_with(self, keys, constants: dict) -> TrainState:
        keys = jax.vmap(lambda k: jax.random.split(k, 3))(keys)
        param_keys, env_keys, next_keys = keys[:, 0], keys[:, 1], keys[:, 2]
        # Every group is initialized at its own (obs size, action size), then padded: each network size is
        # initialized for all groups and each group keeps its own size's (a handful of sizes, once per run).
        params = None
        for index, (obs_dim, action_dim, critic_dim) in enumerate(self._network_sizes):
            sized = init_per_group(lambda k, o=obs_dim, a=action_dim, c=critic_dim: self._init_params(k, o, a, c),
                                   param_keys)
            params = sized if params is None else where_group(self.size_index == index, sized, params)
        G = self.rows
        obs_rms = jax.vmap(lambda _: RunningMeanStd.create((self.obs_dim_max,)))(jnp.arange(G))
        best = BestPolicy(params, obs_rms, jnp.full((G,), jnp.nan, jnp.float32), jnp.full((G,), -1, jnp.int32))
        return TrainState(params, jax.vmap(self._init_optimizer)(params),
                          jnp.full((G,), self.config.learning_rate, jnp.float32), obs_rms, self._init_own(G),
                          self.env.reset(env_keys, self.env.first_curriculum()), next_keys,
                          jnp.asarray(0, jnp.int32), jnp.where(self.inert, 0, -1).astype(jnp.int32),
                          jnp.full((G,), -1, jnp.int32), best, constants)

    def snapshot(self, train_state: TrainState, free_bytes: int | None) -> TrainState | None:
        """A copy of `train_state` on the device (it survives the next iteration, which donates its input), or
        None where the device lacks the free memory for one (`free_bytes` per device, under twice its size; None:
        not known, as on a CPU), and in a multi-host run (reading it back is a collective of all processes, which
        the caller's thread must make)."""
        size = sum(x.nbytes for x in jax.tree.leaves(train_state)) / len(self.devices)  # per device
        if jax.process_count() > 1 or free_bytes is None or free_bytes < 2 * size:
            return None
        return (self.compiled_device_copy or self.device_copy)(train_state)

    def _evaluate(self, ts: TrainState, seed_offset: int = 1_000_003, record: bool = False):
        """Task fitness of every group's deterministic policy over one full episode per env (`GroupedEnv.episodes`,
        under the fitness's own physics where it has one); NaN for the groups that diverged."""
        keys = jax.vmap(lambda k: jax.random.fold_in(k, seed_offset))(ts.key)
        env = self.env if self.evaluation_envs == self.envs_per_candidate else self.env.with_envs(self.evaluation_envs)
        out = env.reading(ts.constants).episodes(lambda obs: self.act_deterministic(ts.params, ts.obs_rms, obs),
                                                 keys, ts.env.curriculum, held_out=self.fitness.physics, record=record)
        diverged = (ts.diverged_at >= 0)[:, None]
        return {k: v if k in RECORDED else jnp.where(diverged, jnp.nan, v) for k, v in out.items()}



_copy = jax.jit(lambda tree: jax.tree.map(jnp.copy, tree))
"""A copy of a pytree on the device, as one program (`jnp.copy` leaf by leaf compiles one per leaf's shape)."""


def _state_specs() -> TrainState:
    """`shard_map` specs of a `TrainState` (a prefix of its tree): the group axis leads every array but the
    iteration counter, which every device holds."""
    group = PartitionSpec(GROUP_AXIS)
    return TrainState(*([group] * len(TrainState._fields)))._replace(iteration=PartitionSpec())


def _sizes(candidate: Candidate) -> tuple:
    """What validation found of a candidate that its traces depend on."""
    return (candidate.obs_dim, candidate.action_dim, candidate.reward_components, candidate.critic_obs_dim,
            candidate.constants_as_data)
