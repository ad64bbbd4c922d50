"""Training throughput with the groups sharded over 1..N devices (issue: many GPUs).

    python benchmarks/multigpu.py --task Ant --groups 1024 4096 --devices 1 2 --out docs/benchmarks/multigpu_ant.json

Groups are the task's bundled candidates × seeds (4 Ant files × 256 seeds = 1024 groups), 256 envs each by default.
Every (groups, devices) point runs in its own subprocess (its own GPU memory pool; it compiles from scratch); a
point that does not fit is recorded as out of memory. Per point: init and first-iteration (compile) seconds, and
the device rate over `--iterations` iterations dispatched back to back; the summary gives each device count's
rate over one device's at the same groups. `--sharded-on-one` adds the sharded program run on one device (per-device
class tables instead of static slices): its rate over the plain program's is the cost of sharding itself.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def point(args) -> dict:
    import jax

    from core import stamp
    from envcoder.rl.ppo.config import PPOConfig
    from envcoder.rl.ppo.learner import GroupedPPO
    from envcoder.candidates import SHAPER_TYPES, load_candidates
    from envcoder.candidates.validate import sample_state, validate_candidate
    from envcoder.sim import Simulator
    from envcoder.tasks import get_task

    groups, devices = args.groups[0], args.devices[0]  # one point
    task = get_task(args.task)
    sim = Simulator(task.model_file, task.substeps)
    candidates, _ = load_candidates(ROOT / "src" / "envcoder" / "examples" / args.task.lower(), SHAPER_TYPES)
    seeds = -(-groups // len(candidates))
    if seeds * len(candidates) != groups:
        raise SystemExit(f"--groups {groups} must be a multiple of the {len(candidates)} bundled candidates")
    state = sample_state(task, sim)
    candidates = [validate_candidate(task, sim, c, state) for c in candidates]
    config = PPOConfig.for_task(task)
    tick = time.perf_counter()
    trainer = GroupedPPO(task, candidates, config, args.envs, tuple(range(seeds)), physics="jax", devices=devices,
                         sharded=True if args.sharded_on_one else None)
    ts = trainer.init()
    jax.block_until_ready(ts)
    init_s = time.perf_counter() - tick
    tick = time.perf_counter()
    ts, metrics = trainer.iteration(ts)
    jax.block_until_ready(metrics)
    first_s = time.perf_counter() - tick
    tick = time.perf_counter()
    for _ in range(args.iterations):
        ts, metrics = trainer.iteration(ts)
    jax.block_until_ready((ts, metrics))
    seconds = time.perf_counter() - tick
    steps = groups * args.envs * config.horizon_length * args.iterations
    return {**stamp(), "task": args.task, "groups": groups, "envs_per_group": args.envs,
            "devices": len(trainer.devices), "device_kind": trainer.devices[0].device_kind,
            "groups_per_device": trainer.rows, "init_s": round(init_s, 2), "first_iteration_s": round(first_s, 2),
            "iterations_timed": args.iterations, "env_steps_per_s": steps / seconds,
            "physics": trainer.physics, "sharded_program": trainer.layout is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="Ant")
    parser.add_argument("--groups", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--sharded-on-one", action="store_true",
                        help="also time the sharded program on one device (its cost against the plain program)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--point", action="store_true", help=argparse.SUPPRESS)  # one point, in this process
    args = parser.parse_args()
    if args.point:
        print(json.dumps(point(args)))
        return
    points = []
    runs = [(d, False) for d in args.devices] + ([(1, True)] if args.sharded_on_one else [])
    for groups in args.groups:
        for devices, sharded_on_one in runs:
            command = [sys.executable, __file__, "--point", "--task", args.task, "--groups", str(groups), "--envs",
                       str(args.envs), "--devices", str(devices), "--iterations", str(args.iterations)]
            command += ["--sharded-on-one"] if sharded_on_one else []
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode == 0:
                points.append(json.loads(done.stdout.strip().splitlines()[-1]))
            else:
                lines = done.stderr.strip().splitlines() or ["no output"]
                reason = "out of memory" if "RESOURCE_EXHAUSTED" in done.stderr else lines[-1]
                points.append({"task": args.task, "groups": groups, "envs_per_group": args.envs, "devices": devices,
                               "sharded_program": sharded_on_one or devices > 1, "failed": reason})
            print(json.dumps(points[-1]), flush=True)
    one = {p["groups"]: p["env_steps_per_s"] for p in points
           if p["devices"] == 1 and "env_steps_per_s" in p and not p["sharded_program"]}
    for p in points:
        if "env_steps_per_s" in p and p["groups"] in one:
            p["speedup_over_one_device"] = round(p["env_steps_per_s"] / one[p["groups"]], 3)
    if args.out:
        Path(args.out).write_text(json.dumps(points, indent=2) + "\n")


if __name__ == "__main__":
    main()
