"""The throughput cost of physics randomization: the same run with and without per-environment model fields.

Each configuration trains `--seeds` policies of one candidate file (× `--envs` environments each) in one process,
one configuration after another, and times `--iterations` iterations after the compiling first one:

    python benchmarks/randomization.py --task Anymal --seeds 12 --envs 2048 --iterations 10 \\
        --files nominal friction_mass wide_noisy --out randomization.json

`nominal` randomizes nothing (the task's own model, exactly as before randomization existed); `friction_mass`
batches two model fields per environment; `wide_noisy` every kind of field (model fields, pushes, observation
noise, action latency). The files are src/envcoder/examples/anymal_dr's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from core import ROOT, stamp, time_training  # noqa: E402

from envcoder.rl.ppo.config import PPOConfig  # noqa: E402
from envcoder.rl.ppo.learner import GroupedPPO  # noqa: E402
from envcoder.candidates import SHAPER_TYPES, load_candidate  # noqa: E402
from envcoder.candidates.validate import sample_state, validate_candidate  # noqa: E402
from envcoder.sim import Simulator  # noqa: E402
from envcoder.tasks import get_task  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="Anymal")
    parser.add_argument("--functions", default=None,
                        help="candidate directory (default src/envcoder/examples/anymal_dr)")
    parser.add_argument("--files", nargs="+", default=["nominal", "friction_mass", "wide_noisy"])
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--envs", type=int, default=2048)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    task = get_task(args.task)
    sim = Simulator(task.model_file, task.substeps, "jax")
    examples = ROOT / "src" / "envcoder" / "examples"
    directory = Path(args.functions) if args.functions else examples / f"{task.name.lower()}_dr"
    config = PPOConfig.for_task(task)
    state = sample_state(task, sim)
    results = []
    for name in args.files:
        candidate = validate_candidate(task, sim, load_candidate(directory / f"{name}.py", SHAPER_TYPES), state)
        trainer = GroupedPPO(task, [candidate], config, args.envs, tuple(range(args.seeds)), sim)
        _, compile_s, train_s = time_training(trainer, args.iterations)
        steps = args.iterations * config.horizon_length * args.seeds * args.envs
        row = {"file": name, "randomized_fields": trainer.physics_fields, "env_steps_per_s": round(steps / train_s),
               "compile_and_first_iteration_s": round(compile_s, 1)}
        print(json.dumps(row), flush=True)
        results.append(row)
    base = results[0]["env_steps_per_s"]
    for row in results:
        row["relative_to_first"] = round(row["env_steps_per_s"] / base, 4)
    out = {**stamp(), "task": task.name, "seeds": args.seeds, "envs": args.envs, "iterations": args.iterations,
           "results": results}
    print(json.dumps(out, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
