"""Time to a task fitness with each algorithm, in one process per algorithm (GPU).

    python benchmarks/algorithms.py cartpole --envs 256 --seeds 4 --iterations 300 --out algorithms_cartpole.json

trains the bundled `good_upright` candidate (the IsaacGymEnvs reward) with PPO on Cartpole (continuous force),
PPO on CartpoleDiscrete (categorical) and DQN on CartpoleDiscrete, `--seeds` policies of `--envs` envs each per
algorithm in one process. After every iteration it reads the mean task fitness of the episodes that ended, and
records per seed the first iteration, env steps and wall-clock seconds (since the start, compile included, and
since the first iteration was done) at which it reached `--target`. Finally every policy is evaluated
deterministically (`GroupedLearner.evaluate`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import numpy as np

from envcoder.rl.config import ALGORITHMS
from envcoder.candidates import SHAPER_TYPES, load_candidate
from envcoder.candidates.validate import rollout_states, validate_candidate
from envcoder.sim import Simulator
from envcoder.tasks import get_task

BUNDLED = Path(__file__).resolve().parents[1] / "src" / "envcoder" / "examples"
CASES = (("Cartpole", "ppo"), ("CartpoleDiscrete", "ppo"), ("CartpoleDiscrete", "dqn"))


def time_to_target(task_name: str, algo: str, envs: int, seeds: int, iterations: int, target: float,
                   overrides: dict) -> dict:
    task = get_task(task_name)
    sim = Simulator(task.model_file, task.substeps)
    candidate = validate_candidate(task, sim, load_candidate(BUNDLED / task.name.lower() / "good_upright.py",
                                                             SHAPER_TYPES), rollout_states(task, sim))
    config = ALGORITHMS[algo].config.for_task(task, **{**overrides, "max_epochs": iterations})
    start = time.perf_counter()
    trainer = ALGORITHMS[algo].learner(task, [candidate], config, envs, tuple(range(seeds)), sim)
    ts = trainer.init()
    reached = [None] * seeds
    curve, first_done = [], None
    for i in range(iterations):
        ts, metrics = trainer.iteration(ts)
        fitness = np.asarray(jax.device_get(metrics["task_fitness"]))
        now = time.perf_counter() - start
        first_done = first_done if first_done is not None else now
        curve.append([round(now, 3)] + [None if np.isnan(f) else round(float(f), 4) for f in fitness])
        for s in range(seeds):
            if reached[s] is None and fitness[s] >= target:
                reached[s] = {"iteration": i + 1, "env_steps": (i + 1) * envs * config.horizon_length,
                              "wall_s": round(now, 2), "wall_after_first_iteration_s": round(now - first_done, 2)}
        if all(r is not None for r in reached):
            break
    evaluation = np.asarray(jax.device_get(trainer.evaluate(ts))["task_fitness"]).mean(axis=1)
    walls = [r["wall_s"] for r in reached if r]
    return {"task": task.name, "algo": algo, "envs": envs, "seeds": seeds, "target": target,
            "first_iteration_s": round(first_done, 2), "iterations_run": len(curve), "reached": reached,
            "median_wall_s": float(np.median(walls)) if len(walls) == seeds else None,
            "evaluation": [round(float(x), 4) for x in evaluation], "curve": curve,
            "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.__dict__.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("cartpole",))
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--cases", nargs="+", default=[f"{t}:{a}" for t, a in CASES])
    parser.add_argument("--set", default="{}", help="JSON of settings to change, e.g. '{\"gamma\": 0.98}'")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    results = []
    for case in args.cases:
        task_name, algo = case.split(":")
        result = time_to_target(task_name, algo, args.envs, args.seeds, args.iterations, args.target,
                                json.loads(args.set))
        print(json.dumps({k: v for k, v in result.items() if k not in ("curve", "settings")}), flush=True)
        results.append(result)
    record = {"benchmark": "time_to_fitness", "device": str(jax.devices()[0].device_kind), "jax": jax.__version__,
              "date": time.strftime("%Y-%m-%d"), "results": results}
    if args.out:
        args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
