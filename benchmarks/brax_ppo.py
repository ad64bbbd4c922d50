"""envcoder's PPO against Brax PPO on the same task model (issue: benchmarks, item 5).

One candidate (the task's reference shaping), trained twice in this process with the same physics,
shaping code, env count, PPO settings and env-step budget:

- by envcoder's `GroupedPPO` (one group);
- by `brax.training.agents.ppo.train`, through a Brax `Env` whose reset and step are envcoder's own
  (reset pool, `compute_torque` at every substep, reward, terminal and task fitness), so only the RL
  loop differs. Brax's own wrappers handle episodes and auto-reset, as a Brax user gets them.

Reported: steady training throughput (Brax: its `training/sps`, which leaves out evaluations; envcoder:
iterations after the first), wall time with compilation, and the final task fitness of the
deterministic policy over one full episode per environment (Brax: its evaluator with the per-step
fitness as an episode metric; envcoder: `GroupedLearner.evaluate`). Both networks are envcoder's MLP
sizes and activation for actor and critic.

Brax runs with one or both settings presets (`--brax-presets`):
- `matched`: envcoder's PPO settings translated to Brax's arguments, envcoder's network sizes;
- `published`: the hyperparameters Brax publishes for its Ant (reward scaling 10, discount 0.97, unroll 5,
  32 minibatches of 2048, entropy 0.01, no gradient clipping, its default networks), on this task's model.

Brax is a benchmark-only dependency: brax 0.14.2, ml_collections, mediapy, jaxopt and tensorboardX.
brax 0.14.2 calls `jax.device_put_replicated`, which JAX 0.10+ no longer has; `_jax_shims` adds it
(and `device_put_sharded`) for this process only.

    python benchmarks/brax_ppo.py --task Ant --envs 4096 --iterations 300 --brax-presets matched published \
        --out docs/benchmarks/brax_ppo_ant.json
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from envcoder.rl.ppo.config import PPOConfig
from envcoder.env import EnvState, ResetPool
from envcoder.rl.ppo.learner import GroupedPPO
from envcoder.candidates import Candidate
from envcoder.candidates.validate import sample_state, validate_candidate
from envcoder.sim import Simulator
from envcoder.tasks import get_task

from core import peak_memory_gb, stamp


def _jax_shims() -> None:
    """`jax.device_put_replicated` / `device_put_sharded` as brax 0.14.2 uses them: arrays with a leading
    device axis, placed the way `jax.pmap` places its outputs (so the next pmapped call does not recompile)."""
    def sharded(shards, devices):
        return jax.pmap(lambda x: x, devices=devices)(jax.tree.map(lambda *xs: np.stack(xs), *shards))

    def replicated(value, devices):
        return sharded([value] * len(devices), devices)

    if not hasattr(jax, "device_put_replicated"):
        jax.device_put_replicated = replicated
    if not hasattr(jax, "device_put_sharded"):
        jax.device_put_sharded = sharded


def reference_trainer(task, sim, config, envs, seed):
    reference = validate_candidate(task, sim, Candidate("reference", None, "", {}, "reference"), sample_state(task, sim))
    return GroupedPPO(task, [reference], config, envs, (seed,), sim)


def make_brax_env(trainer: GroupedPPO):
    """A Brax `Env` of one environment whose dynamics, shaping and fitness are `trainer`'s (one group, one env)."""
    from brax.envs.base import Env, State

    task = trainer.task

    class EnvcoderEnv(Env):
        def reset(self, rng):
            env = trainer.env.reset(rng[None], {})
            zero = jnp.zeros(())
            return State(env, self._obs(env), zero, zero, {"task_fitness": zero}, {})

        def step(self, state, action):
            env = state.pipeline_state
            # envcoder's own auto-reset is made a no-op (its pool is the current state); Brax's wrappers
            # end episodes at the same length and reset them.
            new, info = trainer.env.step(env, jnp.clip(action, -1.0, 1.0)[None, None], ResetPool.of(env),
                                         jax.random.PRNGKey(0)[None])  # no pushes: unused
            fitness = info.episode_fitness[0, 0] - env.episode_fitness[0, 0] / task.max_episode_length
            return state.replace(pipeline_state=new, obs=self._obs(new), reward=info.reward[0, 0],
                                 done=info.terminal[0, 0].astype(jnp.float32),
                                 metrics={**state.metrics, "task_fitness": fitness})

        def _obs(self, env: EnvState):
            return trainer.env.observation(trainer.env.state(env))[0, 0]

        @property
        def observation_size(self):
            return int(trainer.obs_dims[0])

        @property
        def action_size(self):
            return int(trainer.action_dims[0])

        @property
        def backend(self):
            return "mjx"

    return EnvcoderEnv()


def run_envcoder(trainer, iterations):
    steps_per_iteration = trainer.envs_per_candidate * trainer.config.horizon_length
    start = time.perf_counter()
    state = trainer.init()
    state, metrics = trainer.iteration(state)
    jax.block_until_ready(metrics)
    first = time.perf_counter() - start
    curve = []
    for i in range(1, iterations):
        state, metrics = trainer.iteration(state)
        if i % 25 == 0 or i == iterations - 1:
            m = jax.device_get(metrics)
            curve.append({"iteration": i, "env_steps": (i + 1) * steps_per_iteration,
                          "wall_s": time.perf_counter() - start, "task_fitness": float(m["task_fitness"][0])})
    jax.block_until_ready(state)
    train_s = time.perf_counter() - start
    evaluation = jax.device_get(trainer.evaluate(state))
    return {"steady_env_steps_per_s": (iterations - 1) * steps_per_iteration / (train_s - first),
            "compile_and_first_iteration_s": first, "train_wall_s": train_s,
            "env_steps": iterations * steps_per_iteration,
            "final_task_fitness": float(np.mean(evaluation["task_fitness"])),
            "final_episode_length": float(np.mean(evaluation["episode_length"])), "curve": curve}


def brax_settings(trainer, preset: str, iterations: int) -> tuple[dict, dict]:
    """`(ppo.train arguments, network sizes)` of a preset, for the same env count and env-step budget."""
    import flax.linen as nn

    cfg, envs = trainer.config, trainer.envs_per_candidate
    common = dict(num_timesteps=iterations * envs * cfg.horizon_length, num_envs=envs,
                  episode_length=trainer.task.max_episode_length, normalize_observations=True, seed=0)
    if preset == "published":
        return {**common, "unroll_length": 5, "batch_size": 2048, "num_minibatches": 32, "num_updates_per_batch": 4,
                "learning_rate": 3e-4, "entropy_cost": 1e-2, "discounting": 0.97, "reward_scaling": 10.0}, {}
    # One rollout of horizon_length steps of every env per update, split into num_minibatches, mini_epochs
    # passes: envcoder's schedule. Brax's value loss is 0.5 · coefficient · MSE, as envcoder's critic_coef.
    # Brax leaves truncated steps out of its GAE where envcoder bootstraps them (value_bootstrap).
    activation = {"elu": nn.elu, "relu": nn.relu, "tanh": nn.tanh, "silu": nn.swish}[cfg.activation]
    return {**common, "unroll_length": cfg.horizon_length, "batch_size": envs // cfg.num_minibatches,
            "num_minibatches": cfg.num_minibatches, "num_updates_per_batch": cfg.mini_epochs,
            "learning_rate": cfg.learning_rate, "entropy_cost": cfg.entropy_coef, "discounting": cfg.gamma,
            "gae_lambda": cfg.tau, "clipping_epsilon": cfg.e_clip, "reward_scaling": cfg.reward_scale,
            "normalize_observations": cfg.normalize_input,
            "max_grad_norm": cfg.grad_norm if cfg.truncate_grads else None, "vf_loss_coefficient": cfg.critic_coef,
            "learning_rate_schedule": "ADAPTIVE_KL" if cfg.lr_schedule == "adaptive" else None,
            "desired_kl": cfg.kl_threshold}, {
        "policy_hidden_layer_sizes": cfg.units, "value_hidden_layer_sizes": cfg.units, "activation": activation}


def run_brax(trainer, iterations, evals, eval_envs, preset):
    _jax_shims()
    from brax.training.agents.ppo import networks as ppo_networks
    from brax.training.agents.ppo import train as ppo

    settings, network = brax_settings(trainer, preset, iterations)
    settings.update(num_evals=evals, num_eval_envs=eval_envs, deterministic_eval=True)
    factory = functools.partial(ppo_networks.make_ppo_networks, **network)
    points = []
    start = time.perf_counter()

    def progress(step, metrics):
        points.append({"env_steps": int(step), "wall_s": time.perf_counter() - start,
                       **{k: float(v) for k, v in metrics.items() if np.ndim(v) == 0}})
        print(f"brax {preset} {step:>11,} steps {points[-1]['wall_s']:6.1f}s fitness "
              f"{points[-1].get('eval/episode_task_fitness', float('nan')):.3f} "
              f"sps {points[-1].get('training/sps', float('nan')):,.0f}", flush=True)

    ppo.train(environment=make_brax_env(reference_trainer(trainer.task, trainer.sim, trainer.config, 1, 0)),
              network_factory=factory, progress_fn=progress, **settings)
    wall = time.perf_counter() - start
    sps = [p["training/sps"] for p in points[2:] if "training/sps" in p]  # after the epoch that compiled
    return {"steady_env_steps_per_s": float(np.median(sps)) if sps else None,
            "train_wall_s": wall, "env_steps": points[-1]["env_steps"],
            "final_task_fitness": points[-1]["eval/episode_task_fitness"],
            "final_episode_length": points[-1].get("eval/avg_episode_length"),
            "settings": settings, "networks": {k: str(v) for k, v in network.items()} or "Brax's defaults",
            "curve": points}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="Ant")
    parser.add_argument("--envs", type=int, default=4096)
    parser.add_argument("--iterations", type=int, default=300, help="PPO iterations (env steps = this × envs × horizon)")
    parser.add_argument("--evals", type=int, default=6, help="Brax evaluations, the initial one included")
    parser.add_argument("--eval-envs", type=int, default=1024)
    parser.add_argument("--brax-presets", nargs="+", choices=("matched", "published"), default=["matched"])
    parser.add_argument("--skip", choices=("envcoder", "brax"), default=None)
    parser.add_argument("--ppo", default="{}", help="JSON dict of PPO overrides")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    task = get_task(args.task)
    sim = Simulator(task.model_file, task.substeps)
    config = PPOConfig.for_task(task, **json.loads(args.ppo))
    trainer = reference_trainer(task, sim, config, args.envs, 0)
    result = {"task": task.name, "envs": args.envs, "iterations": args.iterations, "fitness": trainer.fitness_name,
              "fitness_doc": trainer.fitness.doc, "ppo": json.loads(json.dumps(config.__dict__)), **stamp()}
    if args.skip != "envcoder":
        result["envcoder"] = run_envcoder(trainer, args.iterations)
        print("envcoder", json.dumps({k: v for k, v in result["envcoder"].items() if k != "curve"}), flush=True)
    for preset in args.brax_presets if args.skip != "brax" else ():
        key = f"brax_{preset}"
        result[key] = run_brax(trainer, args.iterations, args.evals, args.eval_envs, preset)
        print(key, json.dumps({k: v for k, v in result[key].items() if k not in ("curve", "settings")}), flush=True)
    result["peak_memory_gb"] = peak_memory_gb()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
