"""Core throughput benchmark (issue: grouped PPO on MJX).

Ant, G candidates × E envs: training env-steps/s (rollout + PPO updates) against physics-only stepping of
the same G·E environments with random controls, both measured in the same process. Candidates are the
bundled Ant rewards cycled (4 distinct codes), named apart so each trains its own policy.

    python benchmarks/core.py ant --groups 1 16 64 256 --envs 256 --iterations 20 --out results.json
    python benchmarks/core.py cartpole --envs 256 --out cartpole.json   # wall time to the fitness bar
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from envcoder.rl.ppo.config import PPOConfig
from envcoder.rl.ppo.learner import GroupedPPO
from envcoder.candidates import load_candidate
from envcoder.candidates.validate import sample_state, validate_candidate
from envcoder.sim import Simulator
from envcoder.tasks import get_task

ROOT = Path(__file__).resolve().parents[1]


def stamp() -> dict:
    import mujoco
    return {"device": jax.devices()[0].device_kind, "backend": jax.default_backend(), "jax": jax.__version__,
            "mujoco": mujoco.__version__, "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(sys.argv)}


def candidates_for(task, sim, n: int):
    files = sorted((ROOT / "src" / "envcoder" / "examples" / task.name.lower()).glob("*.py"))
    state = sample_state(task, sim)
    chosen = []
    for i in range(n):
        file = files[i % len(files)]
        chosen.append(validate_candidate(task, sim, load_candidate(file, ("compute_reward",), name=f"{file.stem}_{i}"),
                                         state))
    return chosen


def time_training(trainer, iterations: int):
    """`(metrics, compile_s, train_s)`: init + first iteration (compiles), then `iterations` timed ones."""
    tick = time.perf_counter()
    ts = trainer.init()
    ts, metrics = trainer.iteration(ts)
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - tick
    tick = time.perf_counter()
    for _ in range(iterations):
        ts, metrics = trainer.iteration(ts)
    jax.block_until_ready(metrics)
    return metrics, compile_s, time.perf_counter() - tick


def peak_memory_gb():
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use", float("nan")) / 2**30


def physics_only(sim, num_groups, envs, horizon, repeats):
    """Env-steps/s of the bare physics (random controls) for `num_groups × envs` environments."""
    nu = sim.mj_model.nu
    data = jax.jit(lambda: jax.vmap(jax.vmap(lambda _: sim.reset(sim.qpos0, jnp.zeros(sim.mj_model.nv))))(
        jnp.zeros((num_groups, envs))))()
    ctrl_range = jnp.asarray(sim.mj_model.actuator_ctrlrange[:, 1], jnp.float32)

    @jax.jit
    def rollout(data, key):
        def step(d, k):
            u = jax.random.uniform(k, (num_groups, envs, nu), minval=-1, maxval=1) * ctrl_range
            return jax.vmap(jax.vmap(sim.step))(d, u), None
        return jax.lax.scan(step, data, jax.random.split(key, horizon))[0]

    data = jax.block_until_ready(rollout(data, jax.random.PRNGKey(0)))
    tick = time.perf_counter()
    for i in range(repeats):
        data = rollout(data, jax.random.PRNGKey(i + 1))
    jax.block_until_ready(data)
    return num_groups * envs * horizon * repeats / (time.perf_counter() - tick)


def bench_ant(args):
    task = get_task("Ant")
    sim = Simulator(task.model_file, task.substeps)
    config = PPOConfig.for_task(task)
    rows = []
    for groups in args.groups:
        trainer = GroupedPPO(task, candidates_for(task, sim, groups), config, args.envs, (0,), sim)
        metrics, compile_s, train_s = time_training(trainer, args.iterations)
        steps = groups * args.envs * config.horizon_length * args.iterations
        train_rate = steps / train_s
        physics_rate = physics_only(sim, groups, args.envs, config.horizon_length, args.iterations)
        row = {"groups": groups, "envs_per_candidate": args.envs, "total_envs": groups * args.envs,
               "distinct_codes": trainer.plan.num_distinct_codes(), "iterations_timed": args.iterations,
               "compile_and_first_iteration_s": round(compile_s, 2), "train_env_steps_per_s": round(train_rate),
               "physics_only_env_steps_per_s": round(physics_rate),
               "train_over_physics": round(train_rate / physics_rate, 3),
               "seconds_per_iteration": round(train_s / args.iterations, 4), "peak_memory_gb": round(peak_memory_gb(), 2),
               "mean_step_reward": float(np.nanmean(jax.device_get(metrics["step_reward"])))}
        print(json.dumps(row), flush=True)
        rows.append(row)
        del trainer, metrics
    return {"benchmark": "ant_grouped_throughput", "ppo": {"horizon_length": config.horizon_length,
            "mini_epochs": config.mini_epochs, "units": list(config.units)}, "rows": rows}


def bench_cartpole(args):
    """Wall time for the good Cartpole candidate to reach training task fitness >= the bar."""
    task = get_task("Cartpole")
    sim = Simulator(task.model_file, task.substeps)
    good = ROOT / "src" / "envcoder" / "examples" / "cartpole" / "good_upright.py"
    candidate = validate_candidate(task, sim, load_candidate(good, ("compute_reward",)))
    config = PPOConfig.for_task(task)
    start = time.perf_counter()
    trainer = GroupedPPO(task, [candidate], config, args.envs, (0,), sim)
    ts = trainer.init()
    compile_done = None
    curve = []
    reached = None
    for iteration in range(args.max_iterations):
        ts, metrics = trainer.iteration(ts)
        fitness = float(jax.device_get(metrics["task_fitness"])[0])
        now = time.perf_counter() - start
        if compile_done is None:
            compile_done = now
        curve.append({"iteration": iteration, "wall_s": round(now, 3), "task_fitness": fitness})
        if fitness >= args.bar and reached is None:
            reached = {"iteration": iteration, "wall_s_total": round(now, 2),
                       "wall_s_after_first_iteration": round(now - compile_done, 2),
                       "env_steps": (iteration + 1) * args.envs * config.horizon_length}
            break
    evaluation = jax.device_get(trainer.evaluate(ts))
    return {"benchmark": "cartpole_time_to_fitness", "bar": args.bar, "envs": args.envs,
            "first_iteration_s_including_compile": round(compile_done, 2), "reached": reached,
            "final_eval_task_fitness": float(np.mean(evaluation["task_fitness"])), "curve": curve}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", choices=["ant", "cartpole"])
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--max-iterations", type=int, default=500)
    parser.add_argument("--bar", type=float, default=0.9)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    result = bench_ant(args) if args.which == "ant" else bench_cartpole(args)
    result["stamp"] = stamp()
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "curve"}, indent=1))


if __name__ == "__main__":
    main()
