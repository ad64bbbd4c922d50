"""The grouped environment: G groups × E environments, each group stepped by its own candidate's shaping functions.

Every learner (PPO, DQN, SAC), `envcoder play` and the benchmarks step environments through this one class:

    env = GroupedEnv(task, candidates, envs_per_candidate=256, seeds=(0, 1))   # candidates validated
    state = env.reset(keys, curriculum={})                 # keys [G, 2]; EnvState, every array [G, E, ...]
    pool = env.reset_pool(keys, state.curriculum)          # where finished environments restart
    obs = env.observe(state, keys)                         # [G, E, D_max], with observation noise
    state, info = env.step(state, actions, pool, keys)     # actions [G, E, A_max] in [-1, 1]; info: StepInfo
    returns = env.episodes(act, keys, curriculum={})       # one whole episode per env under a policy `act`

Physics runs over all G·E environments at once; shaping functions run per code class (`GroupPlan.dispatch`);
observations and actions are padded to the run's largest sizes (`obs_dim_max`, `action_dim_max`). A step applies
the candidate's torque at every physics substep, randomized pushes and action latency, catches physics failures
(the env restarts from its last sane state and is counted), computes the reward, terminations and the task's
fitness, and resets the environments whose episode ended from the pool.
"""

from __future__ import annotations

import copy
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from envcoder.env.state import EnvState, ResetPool, StepInfo
from envcoder.candidates import Candidate
from envcoder.shaping.curriculum import CURRICULUM_METRICS
from envcoder.env.grouping import GroupPlan
from envcoder.shaping.api import CRITIC_OBSERVATION, split_reward
from envcoder.sim import Simulator
from envcoder.sim.randomization import FIELDS, MAX_ACTION_LATENCY, MODEL_FIELDS, complete, delayed, pushed
from envcoder.tasks.base import Task


def all_finite_per_env(tree) -> jnp.ndarray:
    """`[G, E]` bool: every entry of every leaf (`[G, E, ...]`) of `tree` is finite, per environment."""
    def finite(x):
        return jnp.all(jnp.isfinite(x.reshape(x.shape[:2] + (-1,))), axis=2)
    return functools.reduce(jnp.logical_and, [finite(x) for x in jax.tree.leaves(tree)])


def _where(mask, a, b):
    """`where` over a pytree, with `mask [G, E]` broadcast over trailing axes."""
    return jax.tree.map(lambda x, y: jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim)), x, y), a, b)


class GroupedEnv:
    """The environments of every group of a run; see the module docstring."""

    def __init__(self, task: Task, candidates: Sequence[Candidate], envs_per_candidate: int,
                 seeds: Sequence[int] = (0,), simulator: Simulator | None = None, fitness: str | None = None,
                 physics: str | None = None):
        """`candidates`: validated, each with its sizes (`Candidate.validated`); `simulator`: the physics of all G·E
        environments (without one, a simulator of `physics`, "jax" or "warp", None: "jax"); `fitness`: the name of
        the task's fitness that the step reports (None: the task's default)."""
        unvalidated = [c.name for c in candidates if not c.validated]
        if unvalidated:
            raise ValueError(f"GroupedEnv: {', '.join(unvalidated)} not validated (no sizes): take candidates from "
                             "envcoder.candidates.prepare.sandboxed_candidates, or pass each through "
                             "envcoder.candidates.validate.validate_candidate")
        self.task, self.envs_per_candidate = task, envs_per_candidate
        self.fitness_name, self.fitness = task.get_fitness(fitness)
        self.plan = GroupPlan(task, candidates, seeds)
        self.groups = self.plan.groups
        self.rows = len(self.groups)  # groups a traced function sees (a device's block in a sharded run)
        worlds = len(self.groups) * envs_per_candidate
        self.sim = simulator or Simulator(task.model_file, task.substeps, physics or "jax", worlds)
        if self.sim.physics == "warp" and self.sim.worlds != worlds:
            raise ValueError(f"a Warp simulator for {self.sim.worlds} environments cannot step this run's {worlds}")
        self.physics = self.sim.physics
        per_group = [g.candidate for g in self.groups]
        self.discrete = task.discrete  # a one-hot action over `action_dims` actions, else a continuous one
        self.obs_dims = np.array([c.obs_dim for c in per_group])
        self.action_dims = np.array([c.action_dim for c in per_group])
        self.obs_dim_max, self.action_dim_max = int(self.obs_dims.max()), int(self.action_dims.max())
        # Some candidate gives its critic observations of its own; the others' critics then read their actor's
        # observations (unperturbed by observation noise).
        self.asymmetric = any(c.critic_obs_dim is not None for c in per_group)
        self.critic_obs_dims = np.array([c.critic_obs_dim or c.obs_dim for c in per_group])
        self.critic_obs_dim_max = int(self.critic_obs_dims.max()) if self.asymmetric else None
        masks = self.masks()  # put as they are: `jnp.asarray` would compile a conversion for each dtype
        self.action_mask, self.obs_mask = jax.device_put(masks["action_mask"]), jax.device_put(masks["obs_mask"])
        self.component_names = sorted({n for c in per_group for n in c.reward_components})
        self.curriculum_shapes = self._curriculum_shapes()
        self.physics_fields = self._physics_fields()
        if self.physics == "warp" and (self.physics_fields or self.fitness.physics is not None):
            raise ValueError("physics randomization (a candidate's sample_physics, or the fitness "
                             f"{self.fitness_name!r}) needs --physics jax: MuJoCo Warp's model is shared by all "
                             "environments here")

    def masks(self) -> dict[str, np.ndarray]:
        """Each group's valid action and observation entries, `[G, A_max]` and `[G, D_max]` floats."""
        return {"action_mask": (np.arange(self.action_dim_max)[None, :] < self.action_dims[:, None]).astype(
                    np.float32),
                "obs_mask": (np.arange(self.obs_dim_max)[None, :] < self.obs_dims[:, None]).astype(np.float32)}

    def _view(self, **changes) -> "GroupedEnv":
        """A view of these environments that differs only in `changes` (everything else shared)."""
        view = copy.copy(self)
        view.__dict__.update(changes)
        return view

    def localized(self, plan: GroupPlan, rows: int, action_mask, obs_mask) -> "GroupedEnv":
        """The environment as one device of a sharded run sees it: its `rows` groups, their plan and masks."""
        return self._view(plan=plan, rows=rows, action_mask=action_mask, obs_mask=obs_mask)

    def reading(self, constants: dict) -> "GroupedEnv":
        """The environment whose shaping functions, traced, read their constants from `constants` (a learner's
        program's input: `GroupPlan.reading`)."""
        return self._view(plan=self.plan.reading(constants))

    def with_envs(self, envs_per_candidate: int) -> "GroupedEnv":
        """The same groups with `envs_per_candidate` environments each (the final evaluation's, JAX physics)."""
        return self._view(envs_per_candidate=envs_per_candidate)

    def _curriculum_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every curriculum value's name and shape over all candidates (a candidate that lacks one holds 0)."""
        shapes, owner = {}, {}
        for c in self.plan.classes["curriculum"]:
            n = len(c.indices)
            row = jax.ShapeDtypeStruct((n,), jnp.float32)
            out = jax.eval_shape(c.apply, row, {name: row for name in CURRICULUM_METRICS}, None)
            for name, value in out.items():
                if name in shapes and shapes[name] != value.shape[1:]:
                    raise ValueError(f"the curriculum value {name!r} has shape {value.shape[1:]} in {', '.join(c.names)} "
                                     f"but {shapes[name]} in {', '.join(owner[name])}: rename one of them")
                shapes[name], owner[name] = value.shape[1:], c.names
        return dict(sorted(shapes.items()))

    def _physics_fields(self) -> list[str]:
        """The physics fields that some candidate randomizes (the others stay the task's everywhere)."""
        fields = set()
        for c in self.plan.classes["sample_physics"]:
            n = len(c.indices)
            keys = jax.ShapeDtypeStruct((n, self.envs_per_candidate, 2), jnp.uint32)
            params = {name: jax.ShapeDtypeStruct((n,) + shape, jnp.float32)
                      for name, shape in self.curriculum_shapes.items()}
            out = jax.eval_shape(c.apply, keys, params)
            unknown = set(out) - set(FIELDS)
            if unknown:
                raise ValueError(f"sample_physics of {', '.join(c.names)} returned {', '.join(sorted(unknown))}, "
                                 f"which is not a physics field; fields: {', '.join(FIELDS)}")
            fields |= set(out)
        return sorted(fields)

    # ---- shaping functions over the group axis ---------------------------------------------------

    def state(self, env: EnvState) -> dict:
        """The task state that shaping functions read (`envcoder tasks --task T` lists it), `[G, E, ...]`."""
        build = jax.vmap(jax.vmap(functools.partial(self.task.build_state, self.sim)))
        state = build(self.sim.expand(env.data), env.contact_forces, env.commands, env.actions, env.torques,
                      env.progress)
        if env.curriculum:  # each group's values, repeated for its environments
            state["curriculum"] = jax.tree.map(
                lambda x: jnp.broadcast_to(x[:, None], (x.shape[0], self.envs_per_candidate) + x.shape[1:]), env.curriculum)
        return state

    def observation(self, state: dict) -> jnp.ndarray:
        """Every group's observation of the task state `state`, `[G, E, D_max]` (zero-padded, no noise)."""
        def pad(outputs, classes):
            padded = [jnp.pad(o, ((0, 0), (0, 0), (0, self.obs_dim_max - o.shape[-1]))) for o in outputs]
            return self.plan.concat(padded, classes)
        return self.plan.dispatch("compute_observation", (state,), pad)

    def critic_observation(self, state: dict) -> jnp.ndarray:
        """The critic's own observations `[G, E, C_max]` (a candidate without them: its actor's, noiseless)."""
        def pad(outputs, classes):
            padded = [jnp.pad(o, ((0, 0), (0, 0), (0, self.critic_obs_dim_max - o.shape[-1]))) for o in outputs]
            return self.plan.concat(padded, classes)
        return self.plan.dispatch(CRITIC_OBSERVATION, (state,), pad)

    def observe(self, env: EnvState, key, critic: bool = False):
        """The policy's observation `[G, E, D_max]`, with the env's randomized observation noise (`key [G, 2]`);
        with `critic`, `(observation, the critic's observation or None)`."""
        state = self.state(env)
        obs = self.observation(state)
        if "observation_noise" in env.physics:
            noise = jax.vmap(lambda k: jax.random.normal(jax.random.fold_in(k, 0x0B5), obs.shape[1:]))(key)
            obs = obs + env.physics["observation_noise"][..., None] * noise * self.obs_mask[:, None, :]
        if not critic:
            return obs
        return obs, self.critic_observation(state) if self.asymmetric else None

    def _torque(self, actions, state):
        outputs = []
        for c in self.plan.classes["compute_torque"]:
            dim = int(self.action_dims[c.indices[0]])  # one code, one action size
            action = c.take(actions)[:, :, :dim]
            if self.discrete:  # the index of the one-hot action
                action = jnp.argmax(action, axis=-1).astype(jnp.int32)
            outputs.append(c.apply(action, jax.tree.map(c.take, state)))
        return self.plan.concat(outputs, self.plan.classes["compute_torque"])

    def _reward(self, state):
        def merge(outputs, classes):
            rewards, comps = [], []
            for out in outputs:
                reward, components = split_reward(out, "candidate")
                zeros = jnp.zeros_like(reward)
                rewards.append(reward)
                comps.append({n: components.get(n, zeros) for n in self.component_names})
            return self.plan.concat(rewards, classes), self.plan.concat(comps, classes)
        return self.plan.dispatch("compute_reward", (state,), merge)

    # ---- resets -----------------------------------------------------------------------------------

    def reset_pool(self, keys, curriculum: dict, held_out=None) -> ResetPool:
        """Fresh reset states for every environment (`keys [G, 2]`). `curriculum`: each group's values; `held_out`:
        a fitness's own `sample_physics`, used for every group instead of the candidates' (an evaluation under a
        fixed randomization).

        A reset places the robot (`Simulator.place`) without a physics pass, as Isaac Gym's resets do: the
        environment's first state has no contact forces (zeros) until its first physics step."""
        G, E, nu = self.rows, self.envs_per_candidate, self.sim.mj_model.nu
        forces = jnp.zeros((G, E, len(self.task.contact_geoms), 3))
        base_env = EnvState(self.sim.compact(self.sim.place(
                                jnp.broadcast_to(self.sim.qpos0, (G, E, self.sim.mj_model.nq)),
                                jnp.zeros((G, E, self.sim.mj_model.nv)))),
                            jnp.zeros((G, E, self.task.num_commands)),
                            jnp.zeros((G, E, nu)), jnp.zeros((G, E, nu)), jnp.zeros((G, E), jnp.int32), None, None,
                            forces, {}, None, curriculum)
        base = self.state(base_env)
        k_init, k_goal = jnp.split(jax.vmap(jax.random.split)(keys), 2, axis=1)
        k_init, k_goal = k_init[:, 0], k_goal[:, 0]
        physics = self._sample_physics(keys, curriculum, held_out)

        def fill(outputs, classes):  # each class may change a different subset of fields
            return self.plan.concat([{**jax.tree.map(c.take, base), **o} for o, c in zip(outputs, classes)], classes)
        reset_state = self.plan.dispatch("sample_initial_state", (k_init, base), fill)
        qpos, qvel = jax.vmap(self.task.physics_from_state)(reset_state)
        data = self.sim.compact(self.sim.place(qpos.astype(jnp.float32), qvel.astype(jnp.float32)))
        commands = self.plan.dispatch("sample_goal", (k_goal, base)).astype(jnp.float32)
        return ResetPool(data, commands, forces, physics)

    def _sample_physics(self, keys, curriculum: dict, held_out=None) -> dict:
        """Every environment's randomized fields `[G, E, ...]` for its next episode ({} when nothing is
        randomized), each field that a group's candidate leaves out at its neutral value."""
        fields = self.physics_fields if held_out is None else sorted(jax.eval_shape(
            held_out, jax.random.PRNGKey(0), {}))
        if not fields:
            return {}
        # A key of its own, so that the other reset draws are those of a run without randomization.
        env_keys = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, 0x5EED), self.envs_per_candidate))(keys)
        lead = (self.rows, self.envs_per_candidate)
        if held_out is not None:
            sampled = jax.vmap(jax.vmap(lambda k: held_out(k, {})))(env_keys)
            return complete(sampled, fields, self.sim.mj_model, lead)

        def merge(outputs, classes):
            return self.plan.concat([complete(o, fields, self.sim.mj_model, c.take(env_keys).shape[:2])
                                     for o, c in zip(outputs, classes)], classes)
        return self.plan.dispatch("sample_physics", (env_keys, curriculum), merge)

    def reset(self, keys, curriculum: dict, held_out=None) -> EnvState:
        """Every environment at the start of an episode (`keys [G, 2]`; see `reset_pool`)."""
        pool = self.reset_pool(keys, curriculum, held_out)
        G, E = self.rows, self.envs_per_candidate
        zeros = jnp.zeros((G, E))
        past = (jnp.zeros((G, E, MAX_ACTION_LATENCY, self.action_dim_max)) if "action_latency" in pool.physics
                else None)
        return EnvState(pool.data, pool.commands, jnp.zeros((G, E, self.action_dim_max)),
                        jnp.zeros((G, E, self.sim.mj_model.nu)), jnp.zeros((G, E), jnp.int32), zeros, zeros,
                        pool.contact_forces, pool.physics, past, curriculum)

    def curriculum(self, iteration, metrics: dict, previous: dict | None) -> dict:
        """Each group's curriculum values `[G, ...]` after `iteration` iterations, from the group's `metrics` of
        the iteration just run (NaN before the first) and its previous values (None before the first)."""
        if not self.curriculum_shapes:
            return {}
        iterations = jnp.broadcast_to(jnp.asarray(iteration, jnp.float32), (self.rows,))
        metrics = {name: metrics[name] for name in CURRICULUM_METRICS}

        def merge(outputs, classes):
            filled = []
            for out, c in zip(outputs, classes):
                rows = c.take(iterations).shape[0]
                filled.append({name: jnp.asarray(out[name], jnp.float32) if name in out else
                               jnp.zeros((rows,) + shape, jnp.float32) for name, shape in self.curriculum_shapes.items()})
            return self.plan.concat(filled, classes)
        return self.plan.dispatch("curriculum", (iterations, metrics, previous), merge)

    def first_curriculum(self) -> dict:
        """Each group's curriculum values before training: from iteration 0, NaN metrics and no previous values."""
        nan = jnp.full((self.rows,), jnp.nan, jnp.float32)
        return self.curriculum(0, {name: nan for name in CURRICULUM_METRICS}, None)

    def _select(self, mask, a: EnvState, b: EnvState) -> EnvState:
        """Per environment (`mask [G, E]`), `a` else `b` (the curriculum, per group, is `b`'s)."""
        return _where(mask, a._replace(data=None, curriculum={}), b._replace(data=None, curriculum={}))._replace(
            data=self.sim.select(mask, a.data, b.data), curriculum=b.curriculum)

    # ---- the step ---------------------------------------------------------------------------------

    def step(self, env: EnvState, clipped_actions, pool: ResetPool, key) -> tuple[EnvState, StepInfo]:
        """Apply actions (`[G, E, A_max]`, in [-1, 1]), step physics, compute reward/terminal/fitness, reset the
        environments whose episode ended from `pool`. `key [G, 2]`: the step's randomness (pushes)."""
        applied, past_actions = (clipped_actions, None) if env.past_actions is None else delayed(
            clipped_actions, env.past_actions, env.physics["action_latency"])
        data, ctrl = self._physics(env, applied)
        stepped_forces = self.sim.task_contact_forces(self.task, data)
        if "push_interval" in env.physics:
            data = data.replace(qvel=pushed(data.qvel, env.physics, env.progress, key, self.sim.randomizer.push_dofs))
        # An env whose physics blew up under finite controls (MJX can, under extreme contacts: non-finite,
        # or finite but faster than the task's max_qvel) ends as a failure from its last sane state and is
        # counted, instead of turning the whole candidate's data into NaN or paying it for a solver
        # artefact: one env's solver failure is not the candidate's divergence. Non-finite controls are
        # the candidate's own doing and propagate, so the candidate is reported as diverged.
        sane = all_finite_per_env((data.qpos, data.qvel))
        sane = sane & (jnp.max(jnp.abs(data.qvel), axis=-1) <= self.task.max_qvel)
        physics_ok = sane | ~all_finite_per_env(ctrl)
        forces = jnp.where(physics_ok[..., None, None], stepped_forces, env.contact_forces)
        data = self.sim.select(physics_ok, self.sim.compact(data), env.data)
        ctrl = jnp.where(physics_ok[..., None], ctrl, env.torques)
        progress = env.progress + 1
        stepped = env._replace(data=data, actions=clipped_actions, torques=ctrl, progress=progress,
                               contact_forces=forces, past_actions=past_actions)
        new_state = self.state(stepped)
        reward, components = self._reward(new_state)
        terminal = self.plan.dispatch("compute_terminal", (new_state,)) | ~physics_ok
        truncated = (progress >= self.task.max_episode_length) & ~terminal
        done = terminal | truncated
        fitness = fitness_step = jax.vmap(self.fitness.step)(new_state)
        if self.fitness.after_failure is not None:  # the steps a failure cut off count at this value
            remaining = (self.task.max_episode_length - progress).astype(fitness.dtype)
            fitness = fitness + jnp.where(terminal, remaining * jax.vmap(self.fitness.after_failure)(new_state), 0.0)
        episode_return = env.episode_return + reward
        # An episode that the physics failed in scores as a failure at its first step, whatever it did before: a
        # policy that drives the solver past its limits (feet flung through the floor, joints past their stops)
        # gains no fitness by it.
        failed = (self.task.max_episode_length * jax.vmap(self.fitness.after_failure)(new_state)
                  if self.fitness.after_failure is not None else jnp.zeros_like(fitness))
        episode_fitness = jnp.where(physics_ok, env.episode_fitness + fitness, failed)
        info = StepInfo(reward=reward, components=components, terminal=terminal, truncated=truncated, done=done,
                        episode_return=episode_return,
                        episode_fitness=episode_fitness / self.task.max_episode_length,
                        episode_length=progress.astype(jnp.float32), fitness_step=fitness_step,
                        physics_failures=(~physics_ok).astype(jnp.float32), state=new_state)
        zeros = jnp.zeros_like(reward)
        after = stepped._replace(episode_return=episode_return, episode_fitness=episode_fitness)
        reset = EnvState(pool.data, pool.commands, jnp.zeros_like(clipped_actions), jnp.zeros_like(ctrl),
                         jnp.zeros_like(progress), zeros, zeros, pool.contact_forces, pool.physics,
                         None if past_actions is None else jnp.zeros_like(past_actions), env.curriculum)
        return self._select(done, reset, after), info

    def _physics(self, env: EnvState, applied):
        """The control step's physics substeps: `(data, the last substep's controls)`."""
        model_fields = {name: value for name, value in env.physics.items() if name in MODEL_FIELDS}

        def physics_step(i, carry):
            # compute_torque runs at every physics step with the action held (a PD controller sees the
            # joints move), as legged_gym does within its decimation loop. The contact forces it sees are the
            # last physics step's: the control step's own at the first substep (zero after a reset, whose
            # data holds no solve yet). They are computed here, not carried, so that XLA drops them where the
            # torque does not read them (most controllers): over Warp's all-world contact list they are a
            # scatter that cost as much as the physics step.
            data, ctrl = carry
            forces = jnp.where(i == 0, env.contact_forces, self.sim.task_contact_forces(self.task, data))
            now = env._replace(data=data, torques=ctrl, contact_forces=forces)
            ctrl = self.sim.clip_ctrl(self._torque(applied, self.state(now)))
            if self.physics != "jax":  # Warp's all-world arrays have no environment axes to merge
                return jax.vmap(jax.vmap(self.sim.physics_step))(data, ctrl, model_fields), ctrl
            # MJX traced under one vmap over all G·E environments, not two nested ones: the same program, traced
            # in 30% less time (the rollout's tracing precedes its compile on the first iteration's critical path).
            worlds = ctrl.shape[0] * ctrl.shape[1]
            stepped = jax.vmap(self.sim.world_step)(*jax.tree.map(
                lambda x: x.reshape((worlds,) + x.shape[2:]), (data, ctrl, model_fields)))
            return jax.tree.map(lambda x, like: x.reshape(like.shape), stepped, data), ctrl

        return jax.lax.fori_loop(0, self.sim.substeps, physics_step, (self.sim.expand(env.data), env.torques))

    # ---- whole episodes -----------------------------------------------------------------------------

    def episodes(self, act, keys, curriculum: dict, held_out=None, record: bool = False) -> dict:
        """One full episode per environment from a fresh reset (`keys [G, 2]`; `held_out`: see `reset_pool`), with
        actions `act(obs [G, E, D_max]) -> [G, E, A_max]`. Returns `{"task_fitness": [G, E], "episode_length":
        [G, E], "shaped_return": [G, E]}` of each environment's first episode; with `record`, also `"qpos": [T, G,
        E, nq]` and `"qvel": [T, G, E, nv]`, the pose and velocity before each step (for rendering, for measuring a
        gait)."""
        env = self.reset(keys, curriculum, held_out=held_out)
        pool = ResetPool.of(env)
        alive = jnp.ones((self.rows, self.envs_per_candidate), bool)
        totals = (jnp.zeros(alive.shape), jnp.zeros(alive.shape), jnp.zeros(alive.shape))

        def step(carry, index):
            env, alive, (fitness, length, ret) = carry
            step_keys = jax.vmap(lambda k: jax.random.fold_in(k, index))(keys)
            env, info = self.step(env, act(self.observe(env, step_keys)), pool, step_keys)
            ended = alive & info.done
            fitness = jnp.where(ended, info.episode_fitness, fitness)
            length = jnp.where(ended, info.episode_length, length)
            ret = jnp.where(ended, info.episode_return, ret)
            return (env, alive & ~info.done, (fitness, length, ret)), (env.data.qpos, env.data.qvel) if record else None

        (_, _, (fitness, length, ret)), path = jax.lax.scan(
            step, (env, alive, totals), jnp.arange(self.task.max_episode_length))
        out = {"task_fitness": fitness, "episode_length": length, "shaped_return": ret}
        if record:  # the state each step starts from
            out["qpos"] = jnp.concatenate([env.data.qpos[None], path[0][:-1]])
            out["qvel"] = jnp.concatenate([env.data.qvel[None], path[1][:-1]])
        return out
