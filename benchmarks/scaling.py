"""Scaling benchmarks (issue: one process for all candidates vs one process per candidate).

Every measurement point runs in its own subprocess (`worker`), so peak GPU memory is per point and an
out-of-memory point is recorded instead of ending the benchmark.

    python benchmarks/scaling.py scale --groups 1 8 32 128 512 1024 2048 --out scale.json
    python benchmarks/scaling.py scale --task Anymal --groups 1 8 32 128 512 1024 --out scale_anymal.json
    python benchmarks/scaling.py processes --counts 8 32 64 --out processes.json
    python benchmarks/scaling.py processes --counts 64 --iterations 200 --shared-cache /tmp/jaxcache --out steady.json
    python benchmarks/scaling.py overhead --groups 64 --out overhead.json
    python benchmarks/scaling.py compile --codes 1 4 16 64 --out compile.json
    python benchmarks/scaling.py memory --tasks Ant Anymal --groups 64 --envs 256 --compile --out memory.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

SWEPT_CONSTANT = {"Ant": ("forward_velocity.py", "0.5"), "Anymal": ("reference.py", "-0.000025")}
"""Per task: the bundled reward file and the constant in it that the distinct-code and sweep candidates vary."""


def worker(args):
    """Train `groups` candidates × `envs` envs for `iterations` iterations; print one JSON line."""
    import jax
    import numpy as np

    from core import stamp, time_training
    from envcoder.rl.ppo.config import PPOConfig
    from envcoder.rl.ppo.learner import GroupedPPO
    from envcoder.candidates import SHAPER_TYPES, expand_sweeps, load_candidate
    from envcoder.candidates.validate import sample_state, validate_candidate
    from envcoder.sim import Simulator
    from envcoder.tasks import get_task

    start = time.perf_counter()
    task = get_task(args.task)
    sim = Simulator(task.model_file, task.substeps)
    state = sample_state(task, sim)
    folder = ROOT / "src" / "envcoder" / "examples" / task.name.lower()
    files = sorted(folder.glob("*.py"))
    if args.codes == "bundled":  # the bundled candidates, cycled
        candidates = expand_sweeps([load_candidate(f, SHAPER_TYPES) for f in files])
        candidates = [dataclasses.replace(candidates[i % len(candidates)], name=f"{candidates[i % len(candidates)].name}_{i}")
                      for i in range(args.groups)]
    elif args.codes == "same":  # one code, many candidates
        candidates = [load_candidate(folder / SWEPT_CONSTANT[task.name][0], name=f"c{i}") for i in range(args.groups)]
    else:  # "distinct": every candidate its own code; "sweep": one file whose constant takes `groups` values
        tmp = Path(tempfile.mkdtemp())
        file, constant = SWEPT_CONSTANT[task.name]
        base = (folder / file).read_text()
        assert base.count(constant) == 1, (file, constant)
        values = [float(constant) * (1 + 0.001 * i) for i in range(args.groups)]
        if args.codes == "distinct":
            candidates = []
            for i, value in enumerate(values):
                path = tmp / f"d{i}.py"
                path.write_text(base.replace(constant, repr(value)))
                candidates.append(load_candidate(path))
        else:
            path = tmp / "sweep.py"
            path.write_text(f"SWEPT = {constant}\nPARAMS = {{'SWEPT': {values}}}\n" + base.replace(constant, "SWEPT"))
            candidates = expand_sweeps([load_candidate(path)])
    cache = {}
    for c in candidates:  # identical code and constants validate identically
        key = (c.code_key, tuple(sorted(c.params.items())))
        if key not in cache:
            cache[key] = validate_candidate(task, sim, c, state)
    candidates = [c.sized_as(cache[(c.code_key, tuple(sorted(c.params.items())))]) for c in candidates]
    config = PPOConfig.for_task(task)
    trainer = GroupedPPO(task, candidates, config, args.envs, (0,), sim)
    setup_s = time.perf_counter() - start
    if args.compile_only:
        return print(json.dumps({"task": task.name, "groups": args.groups, "envs_per_candidate": args.envs,
                                 "setup_s": round(setup_s, 2), **compiled_memory(trainer)}), flush=True)
    metrics, compile_s, train_s = time_training(trainer, args.iterations)
    train_end = time.time()
    steps = args.groups * args.envs * config.horizon_length * args.iterations
    stats = jax.devices()[0].memory_stats() or {}
    print(json.dumps({
        "task": task.name, "groups": args.groups, "envs_per_candidate": args.envs, "codes": args.codes,
        "traced_function_classes": trainer.plan.num_distinct_codes(), "iterations_timed": args.iterations,
        "setup_s": round(setup_s, 2), "compile_and_first_iteration_s": round(compile_s, 2),
        "train_s": round(train_s, 3), "env_steps_per_s": round(steps / train_s),
        "train_window_unix": [round(train_end - train_s, 3), round(train_end, 3)],
        "wall_s": round(time.perf_counter() - start, 2),
        "peak_gpu_memory_gib": round(stats.get("peak_bytes_in_use", float("nan")) / 2**30, 3),
        "finite": bool(np.all(np.isfinite(jax.device_get(metrics["step_reward"])))),
        "device": stamp()["device"]}), flush=True)


def compiled_memory(trainer) -> dict:
    """XLA's own buffer plan of the init and iteration programs, compiled for the shapes only (nothing runs)."""
    import jax

    out = {}
    keys = jax.ShapeDtypeStruct((len(trainer.groups), 2), "uint32")
    ts = jax.eval_shape(trainer.init)
    reset = jax.jit(lambda keys: trainer.env.reset(keys, {}))
    iteration = jax.jit(trainer.functions()["iteration"])  # both stages, as one program
    for name, fn, arg in (("init", reset, keys), ("iteration", iteration, ts)):
        tick = time.perf_counter()
        analysis = fn.lower(arg).compile().memory_analysis()
        out[f"{name}_compile_s"] = round(time.perf_counter() - tick, 2)
        for field in ("argument", "output", "alias", "temp", "generated_code"):
            out[f"{name}_{field}_gib"] = round(getattr(analysis, f"{field}_size_in_bytes") / 2**30, 4)
    return out


def memory(args) -> dict:
    """Bytes per environment of a run of the task's own shaping at `--groups` × `--envs`, by component: the train
    state's parts (its shapes only: nothing runs), and with `--compile` XLA's plan of the iteration (arguments,
    outputs, temporaries: the rollout buffers live there). tests/runs/test_memory.py holds the train state to a budget."""
    import jax
    import numpy as np

    from core import stamp
    from envcoder.candidates import SHAPER_TYPES, task_default_candidate
    from envcoder.candidates.validate import sample_state
    from envcoder.rl.ppo.config import PPOConfig
    from envcoder.rl.ppo.learner import GroupedPPO
    from envcoder.sim import Simulator
    from envcoder.tasks import get_task

    rows = []
    for name in args.tasks:
        task = get_task(name)
        sim = Simulator(task.model_file, task.substeps)
        obs = jax.eval_shape(task.defaults["compute_observation"], sample_state(task, sim))
        candidate = dataclasses.replace(task_default_candidate(task, SHAPER_TYPES), obs_dim=obs.shape[1],
                                        action_dim=sim.mj_model.nu)  # validated as the sizes say
        trainer = GroupedPPO(task, [candidate], PPOConfig.for_task(task), args.envs, tuple(range(args.groups[0])), sim)
        environments = args.groups[0] * args.envs
        state = trainer.state_shapes()
        parts = {field: sum(x.size * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(getattr(state, field)))
                 for field in state._fields}
        row = {"task": task.name, "groups": args.groups[0], "envs_per_group": args.envs,
               "train_state_kib_per_env": round(sum(parts.values()) / environments / 1024, 3),
               "train_state_kib_per_env_by_part": {k: round(v / environments / 1024, 3) for k, v in parts.items() if v}}
        if args.compile:
            def plan(lowered) -> dict:
                analysis = lowered.compile().memory_analysis()
                return {field: round(getattr(analysis, f"{field}_size_in_bytes") / environments / 1024, 3)
                        for field in ("argument", "output", "alias", "temp")}
            functions = trainer.functions()
            row["iteration_kib_per_env"] = plan(jax.jit(functions["iteration"]).lower(state))  # as one program
            # As training runs it: two programs (`StagedIteration`), the second donating its argument; between them
            # the first one's output (the rollout) is held with the state.
            collect = jax.jit(functions["collect"]).lower(state)
            collected = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), collect.out_info)
            donate = () if jax.default_backend() == "cpu" else (0,)
            row["stages_kib_per_env"] = {
                "collect": plan(collect),
                "learn": plan(jax.jit(functions["learn"], donate_argnums=donate).lower((state, collected)))}
        rows.append(row)
    return {**stamp(), "benchmark": "memory_per_environment", "rows": rows}


def run_worker(task, groups, envs, iterations, codes="bundled", timeout=900, env=None):
    cmd = [sys.executable, __file__, "worker", "--task", task, "--groups", str(groups), "--envs", str(envs),
           "--iterations", str(iterations), "--codes", codes]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"groups": groups, "envs_per_candidate": envs, "codes": codes, "error": f"timeout after {timeout} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    oom = "RESOURCE_EXHAUSTED" in done.stderr or "out of memory" in done.stderr.lower()
    return {"groups": groups, "envs_per_candidate": envs, "codes": codes,
            "error": "out of GPU memory" if oom else " | ".join(tail)}


def gpu_memory_used_mib():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        return int(out.split()[0])
    except Exception:  # noqa: BLE001 - no nvidia-smi (CPU machine)
        return None


def scale(args):
    """Candidates in one process, upward until one does not fit.

    The workers preallocate (JAX's default) `--mem-fraction` of the GPU. With preallocation off, the allocator
    grows in regions (4, 8, 16 GiB, ...) and an iteration's one large temporary block (43 GiB at 2048 Anymal
    candidates) no longer fits beside them: 2048 candidates then ran out of memory at 49 GiB of real need.
    """
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="true", XLA_PYTHON_CLIENT_MEM_FRACTION=str(args.mem_fraction))
    rows = []
    for groups in args.groups:
        row = run_worker(args.task, groups, args.envs, args.iterations, timeout=args.timeout, env=env)
        row["mem_fraction"] = args.mem_fraction
        print(json.dumps(row), flush=True)
        rows.append(row)
        if "error" in row:
            break
    return {"benchmark": "scaling_one_process", "rows": rows}


def processes(args):
    """K separate processes of one candidate × 256 envs each, all at once, vs one process of K candidates.

    With `--shared-cache DIR` every process uses one persistent compilation cache, warmed first by a single
    process, so the separate processes load their compiled code instead of compiling it 64 times over, and
    their training windows overlap: the steady-state comparison. The sequential baseline (one process after
    another) is K times a single warm process's wall time, measured once.
    """
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    rows = []
    if args.shared_cache:
        env.update(JAX_COMPILATION_CACHE_DIR=str(args.shared_cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
        for label in ("cold", "warm"):  # the cold run fills the cache; the warm one is one sequential step
            single = run_worker(args.task, 1, args.envs, args.iterations, timeout=args.timeout, env=env)
            print(json.dumps({"single_process": label, **single}), flush=True)
        rows.append({"single_process_warm_cache": single})
    for count in args.counts:
        before = gpu_memory_used_mib()
        cmd = [sys.executable, __file__, "worker", "--task", args.task, "--groups", "1", "--envs", str(args.envs),
               "--iterations", str(args.iterations), "--codes", "bundled"]
        tick = time.perf_counter()
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for _ in range(count)]
        peak_used = before or 0
        while any(p.poll() is None for p in procs):
            used = gpu_memory_used_mib()
            peak_used = max(peak_used, used or 0)
            time.sleep(0.5)
            if time.perf_counter() - tick > args.timeout:
                for p in procs:
                    p.kill()
                break
        wall = time.perf_counter() - tick
        results = []
        for p in procs:
            out, err = p.communicate()
            lines = [line for line in out.splitlines() if line.startswith("{")]
            results.append(json.loads(lines[-1]) if p.returncode == 0 and lines else {"error": err.strip()[-300:]})
        ok = [r for r in results if "error" not in r]
        windows = [r["train_window_unix"] for r in ok]
        steps = sum(r["env_steps_per_s"] * r["train_s"] for r in ok)
        overlap = min(w[1] for w in windows) - max(w[0] for w in windows) if windows else 0.0
        span = max(w[1] for w in windows) - min(w[0] for w in windows) if windows else float("nan")
        row = {"processes": count, "succeeded": len(ok), "wall_s_all_processes": round(wall, 2),
               "sum_env_steps_per_s_while_training": round(sum(r["env_steps_per_s"] for r in ok)),
               # All training windows overlap for `overlap` s: the sum of the rates is then a concurrent rate.
               "training_windows_overlap_s": round(overlap, 2), "training_windows_span_s": round(span, 2),
               "env_steps_per_s_over_span": round(steps / span) if windows else None,
               "gpu_memory_used_mib_peak": peak_used, "gpu_memory_used_mib_before": before,
               "per_process": results[:3], "errors": [r["error"] for r in results if "error" in r][:3]}
        print(json.dumps({k: v for k, v in row.items() if k != "per_process"}), flush=True)
        grouped = run_worker(args.task, count, args.envs, args.iterations, timeout=args.timeout, env=env)
        row["one_process_same_candidates"] = grouped
        print(json.dumps(grouped), flush=True)
        rows.append(row)
    return {"benchmark": "one_process_per_candidate", "rows": rows}


def overhead(args):
    rows = []
    for groups in args.groups:
        grouped = run_worker(args.task, groups, args.envs, args.iterations, codes="same", timeout=args.timeout)
        single = run_worker(args.task, 1, groups * args.envs, args.iterations, codes="same", timeout=args.timeout)
        row = {"groups": groups, "envs_per_candidate": args.envs, "grouped": grouped, "single_policy": single}
        if "error" not in grouped and "error" not in single:
            row["time_ratio_grouped_over_single"] = round(grouped["train_s"] / single["train_s"], 3)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return {"benchmark": "grouping_overhead", "rows": rows}


def compile_time(args):
    rows = []
    for codes in args.codes:
        for kind in ("distinct", "sweep"):
            row = run_worker(args.task, codes, args.envs, args.iterations, codes=kind, timeout=args.timeout)
            print(json.dumps(row), flush=True)
            rows.append(row)
    return {"benchmark": "compile_time_vs_codes", "rows": rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="which", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--groups", type=int, required=True)
    w.add_argument("--codes", choices=["bundled", "same", "distinct", "sweep"], default="bundled")
    w.add_argument("--compile-only", action="store_true",
                   help="print XLA's memory plan of the compiled programs instead of training")
    for name, groups_default in (("scale", [1, 8, 32, 128, 512, 1024]), ("overhead", [64])):
        p = sub.add_parser(name)
        p.add_argument("--groups", type=int, nargs="+", default=groups_default)
    sub.choices["scale"].add_argument("--mem-fraction", type=float, default=0.95,
                                      help="XLA_PYTHON_CLIENT_MEM_FRACTION of the workers (JAX's default is 0.75)")
    proc = sub.add_parser("processes")
    proc.add_argument("--counts", type=int, nargs="+", default=[8, 32, 64])
    proc.add_argument("--shared-cache", type=Path, default=None,
                      help="one persistent compilation cache for all processes, warmed first (steady state)")
    sub.add_parser("compile").add_argument("--codes", type=int, nargs="+", default=[1, 4, 16, 64])
    mem = sub.add_parser("memory")
    mem.add_argument("--tasks", nargs="+", default=["Ant", "Anymal"])
    mem.add_argument("--groups", type=int, nargs=1, default=[64])
    mem.add_argument("--compile", action="store_true", help="also XLA's memory plan of the compiled iteration")
    for p in sub.choices.values():
        p.add_argument("--task", default="Ant")
        p.add_argument("--envs", type=int, default=256)
        p.add_argument("--iterations", type=int, default=10)
        p.add_argument("--timeout", type=int, default=900)
        p.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.which == "worker":
        return worker(args)
    if args.which == "memory":  # in this process: its shapes, and XLA's plan where asked
        result = memory(args)
        print(json.dumps(result))
        if args.out:
            args.out.write_text(json.dumps(result, indent=1))
        return None
    # This process only launches workers. Importing envcoder starts JAX's backend, which by default would
    # preallocate 75% of the GPU here, away from the workers.
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    from core import stamp
    result = {"scale": scale, "processes": processes, "overhead": overhead, "compile": compile_time}[args.which](args)
    result["stamp"] = stamp()
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
