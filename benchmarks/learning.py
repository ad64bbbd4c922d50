"""Learning bars (issue: locomotion tasks): a task's reference shaping trained for a wall-time budget.

Trains the task's default candidate (its IsaacGymEnvs-equivalent shaping) with E envs until the budget
runs out, logging every iteration's per-step task fitness (e.g. Anymal's velocity-tracking error of the
live envs), then evaluates the deterministic policy over one full episode per env with the task's
fitness. Writes `<out>/learning_<task>[_<tag>].json` and a PNG learning curve.

With `--seeds N` the reference shaping trains N times in one process, one group of E envs and one policy
per seed (seeds `--seed` … `--seed`+N-1); every logged value is then a list with one entry per seed. This
is how to tell a setting's seed variance from run-to-run variance on the GPU.

    python benchmarks/learning.py --task Anymal --envs 4096 --minutes 5 --out docs/benchmarks
    python benchmarks/learning.py --task Ant --envs 4096 --seeds 4 --minutes 8 --tag seeds --out docs/benchmarks

`--algo sac` (or dqn on a discrete task) trains with that algorithm and the task's settings for it instead.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np

from envcoder.rl.config import ALGORITHMS
from envcoder.candidates import Candidate
from envcoder.candidates.validate import sample_state, validate_candidate
from envcoder.sim import Simulator
from envcoder.tasks import get_task

from core import peak_memory_gb, stamp


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True)
    parser.add_argument("--envs", type=int, default=4096)
    parser.add_argument("--minutes", type=float, default=5.0, help="wall-time budget, compile included")
    parser.add_argument("--fitness", default=None)
    parser.add_argument("--seed", type=int, default=0, help="first seed")
    parser.add_argument("--seeds", type=int, default=1, help="seeds trained side by side, one group each")
    parser.add_argument("--tag", default="", help="suffix of the output file names")
    parser.add_argument("--algo", choices=tuple(ALGORITHMS), default="ppo")
    parser.add_argument("--ppo", default="{}", help="JSON dict of overrides of the algorithm's settings")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--save-policy", action="store_true",
                        help="also pickle the trained parameters and observation normalizer (for inspection)")
    args = parser.parse_args()

    task = get_task(args.task)
    sim = Simulator(task.model_file, task.substeps)
    reference = validate_candidate(task, sim, Candidate("reference", None, "", {}, "reference"), sample_state(task, sim))
    config = ALGORITHMS[args.algo].config.for_task(task, **json.loads(args.ppo))
    seeds = tuple(range(args.seed, args.seed + args.seeds))
    trainer = ALGORITHMS[args.algo].learner(task, [reference], config, args.envs, seeds, sim, fitness=args.fitness)
    budget_s = 60.0 * args.minutes
    steps_per_iteration = args.envs * config.horizon_length  # per seed

    def per_seed(x):
        values = [float(v) for v in np.asarray(x).reshape(len(seeds), -1).mean(axis=1)]
        return values[0] if len(seeds) == 1 else values

    start = time.perf_counter()
    state = trainer.init()
    curve = []
    while time.perf_counter() - start < budget_s and len(curve) < config.max_epochs:
        state, metrics = trainer.iteration(state)
        metrics = jax.device_get(metrics)
        row = {"iteration": len(curve), "wall_s": time.perf_counter() - start,
               "env_steps": (len(curve) + 1) * steps_per_iteration,
               **{k: per_seed(v) for k, v in metrics.items()}}
        curve.append(row)
        if len(curve) % 25 == 1:
            show = {k: np.round(np.asarray(row[k], float), 3).tolist() for k in
                    ("task_fitness_per_step", "task_fitness", "step_reward", "episode_length")}
            print(f"it {row['iteration']:4d} {row['wall_s']:6.1f}s {show} physics failures "
                  f"{np.sum(row['physics_failures']):.0f}", flush=True)
    train_s = time.perf_counter() - start
    first = curve[0]["wall_s"]
    steady = (len(curve) - 1) * steps_per_iteration * len(seeds) / max(train_s - first, 1e-9)

    tick = time.perf_counter()
    evaluation = jax.device_get(trainer.evaluate(state))
    eval_s = time.perf_counter() - tick
    result = {
        "task": task.name, "fitness": trainer.fitness_name, "fitness_doc": trainer.fitness.doc,
        "algo": args.algo, "envs": args.envs, "seeds": list(seeds), "budget_minutes": args.minutes, "iterations": len(curve),
        "env_steps": len(curve) * steps_per_iteration, "train_wall_s": train_s,
        "compile_and_first_iteration_s": first, "steady_env_steps_per_s": steady,
        "eval_s": eval_s, "peak_memory_gb": peak_memory_gb(),
        "final_task_fitness": per_seed(evaluation["task_fitness"]),
        "final_episode_length": per_seed(evaluation["episode_length"]),
        "physics_failures": float(sum(np.sum(r["physics_failures"]) for r in curve)),
        args.algo: {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.__dict__.items()},
        "curve": curve, **stamp(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"learning_{task.name.lower()}" + (f"_{args.tag}" if args.tag else "")
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k not in ("curve", args.algo)}, indent=1))
    plot(result, args.out / f"{name}.png")
    if args.save_policy:
        import pickle
        with open(args.out / f"{name}_policy.pkl", "wb") as f:
            pickle.dump(jax.device_get({"params": state.params, "obs_rms": state.obs_rms}), f)


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    curve = result["curve"]
    wall = [r["wall_s"] / 60 for r in curve]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    seeds = result.get("seeds", [0])
    fitness = np.asarray([r["task_fitness_per_step"] for r in curve], float).reshape(len(curve), -1)
    reward = np.asarray([r["step_reward"] for r in curve], float).reshape(len(curve), -1)
    final = np.atleast_1d(result["final_task_fitness"])
    for i, seed in enumerate(seeds):
        line, = left.plot(wall, fitness[:, i], label=f"seed {seed}" if len(seeds) > 1 else None)
        left.axhline(final[i], ls="--", c=line.get_color() if len(seeds) > 1 else "gray",
                     label="final deterministic evaluation" if i == 0 else None)
        right.plot(wall, reward[:, i], c=line.get_color())
    left.set_xlabel("wall time (min), compile included")
    left.set_ylabel(f"{result['fitness']} (per step, training envs)")
    left.legend(fontsize=8)
    right.set_xlabel("wall time (min)")
    right.set_ylabel("mean shaped reward per step")
    per_seed = f" × {len(seeds)} seeds" if len(seeds) > 1 else ""
    fig.suptitle(f"{result['task']}, reference shaping, {result['envs']} envs{per_seed}, {result['device']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
