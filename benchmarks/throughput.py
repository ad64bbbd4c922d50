"""End-to-end throughput (issue: host overhead, compile time, Warp physics).

    # a real `eval` run's wall-clock rate against the device rate of the same iteration (no host work)
    python benchmarks/throughput.py wall --task Anymal --seeds 6 --iterations 200 --out wall60.json
    python benchmarks/throughput.py wall --task Anymal --groups 1024 --iterations 40 --out wall1024.json
    # where compile time goes: tracing, XLA, autotuning; a second identical run through the persistent cache
    python benchmarks/throughput.py compile --task Anymal --seeds 6 --out compile.json
    # ... and a run with one candidate's code edited, as an `auto` generation compiles, through the same caches
    python benchmarks/throughput.py compile --task Anymal --seeds 6 --variants "" --warm-runs 1 \
        --edit tracking_sigma.py "0.02 * jnp.exp" "0.03 * jnp.exp" --out compile_edit.json
    # MuJoCo Warp against MJX's JAX engine: the same states and controls, trajectories compared
    python benchmarks/throughput.py agree --task Anymal --envs 1024 --steps 100 --out agree_anymal.json
    # physics-only and training env-steps/s per physics engine and env count (groups of 256 envs)
    python benchmarks/throughput.py engines --task Ant --envs 4096 16384 65536 262144 --physics jax warp --out e.json
    # where a training iteration's GPU time goes, per kernel (JAX's profiler)
    python benchmarks/throughput.py kernels --task Anymal --total-envs 16384 --physics warp --out k.json

Every point that compiles from scratch runs in its own subprocess (`worker`) with its own empty compilation
cache, so points do not share compiled code or GPU memory.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def _functions(task_name: str, groups: int | None) -> Path:
    """The bundled candidates of the task; with `groups`, that many copies of them, cycled and named apart."""
    folder = ROOT / "src" / "envcoder" / "examples" / task_name.lower()
    if groups is None:
        return folder
    files = sorted(folder.glob("*.py"))
    out = Path(tempfile.mkdtemp(prefix="envcoder-functions-"))
    for i in range(groups):
        shutil.copy(files[i % len(files)], out / f"{files[i % len(files)].stem}_{i:04d}.py")
    return out


def wall(args) -> dict:
    """Run `envcoder eval` (its `run_evaluation`, TensorBoard and checkpoints on), then time the same
    iteration back to back without host work: the device rate."""
    import jax
    from rich.console import Console

    from core import stamp
    from envcoder.compile_cache import enable_compilation_cache
    from envcoder.rl.ppo.config import PPOConfig
    from envcoder.rl.ppo.learner import GroupedPPO
    from trusted import build_candidates
    from envcoder.runs.evaluation import EvalSettings, run_evaluation
    from envcoder.candidates import SHAPER_TYPES
    from envcoder.candidates.validate import sample_state, validate_candidate
    from envcoder.sim import Simulator
    from envcoder.tasks import get_task

    enable_compilation_cache()
    out = Path(tempfile.mkdtemp(prefix="envcoder-wall-")) / "run"
    settings = EvalSettings(task=args.task, functions=_functions(args.task, args.groups), out=out,
                            shaper_types=SHAPER_TYPES, envs_per_candidate=args.envs, iterations=args.iterations,
                            seeds=tuple(range(args.seeds)), physics=args.physics)
    log = open(Path(args.out).with_suffix(".log"), "w") if args.out else sys.stderr
    tick = time.perf_counter()
    results = run_evaluation(settings, Console(file=log, width=120))
    run_s = time.perf_counter() - tick
    with open(out / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    rates = [float(r["env_steps_per_s"]) for r in rows if r["candidate"] == rows[0]["candidate"]
             and r["seed"] == rows[0]["seed"]]

    # The device rate: the same iteration, dispatched back to back, one block at the end.
    task = get_task(args.task)
    config = PPOConfig.for_task(task)
    candidates, _ = build_candidates(settings)
    validation_sim = Simulator(task.model_file, task.substeps)
    state = sample_state(task, validation_sim)
    candidates = [validate_candidate(task, validation_sim, c, state) for c in candidates]
    trainer = GroupedPPO(task, candidates, config, args.envs, settings.seeds, physics=args.physics)
    ts = trainer.init()
    for _ in range(2):
        ts, metrics = trainer.iteration(ts)
    jax.block_until_ready(metrics)
    tick = time.perf_counter()
    for _ in range(args.device_iterations):
        ts, metrics = trainer.iteration(ts)
    jax.block_until_ready((ts, metrics))
    device_s = time.perf_counter() - tick
    steps = len(trainer.groups) * args.envs * config.horizon_length
    device_rate = steps * args.device_iterations / device_s
    timings = results.timings
    checkpoint_bytes = (out / "checkpoints" / "train_state.npz").stat().st_size
    return {**stamp(), "task": args.task, "groups": len(trainer.groups), "envs_per_group": args.envs,
            "physics": trainer.physics, "iterations": args.iterations, "run_wall_s": round(run_s, 2),
            "timings": timings, "wall_steady_env_steps_per_s": round(timings["steady_env_steps_per_s"]),
            "metrics_csv_median_env_steps_per_s": round(sorted(rates[1:])[len(rates[1:]) // 2]),
            # Where the wall clock went: the seconds of each iteration's interval beyond the device's time for it,
            # summed, and the iterations with the most.
            "excess_s": round(sum(max(0.0, steps / r - steps / device_rate) for r in rates[1:]), 2),
            "slowest_intervals": [(i, round(steps / rates[i] - steps / device_rate, 3)) for i in sorted(
                range(1, len(rates)), key=lambda i: rates[i])[:8]],
            "device_env_steps_per_s": round(device_rate), "device_iterations": args.device_iterations,
            "wall_over_device": round(timings["steady_env_steps_per_s"] / device_rate, 4),
            "train_state_checkpoint_mib": round(checkpoint_bytes / 2**20, 1),
            "save_frequency": config.save_frequency}


def worker(args) -> dict:
    """One compile measurement (`compile` runs it in a subprocess): `trainer.init` (on one device it traces the
    iteration, which then compiles in the background), the iteration's first call (what is left of its compile,
    and its first run), the compiled iteration's device rate, the evaluation's tracing and XLA compile."""
    import jax

    from core import peak_memory_gb, stamp
    from envcoder.compile_cache import XLA_OPTIONS, enable_compilation_cache, xla_options
    from envcoder.rl.ppo.config import PPOConfig
    from envcoder.rl.ppo.learner import GroupedPPO
    from trusted import build_candidates
    from envcoder.runs.evaluation import EvalSettings
    from envcoder.candidates import SHAPER_TYPES
    from envcoder.candidates.validate import sample_state, validate_candidate
    from envcoder.sim import Simulator
    from envcoder.tasks import get_task

    enable_compilation_cache()
    if args.xla_options:  # e.g. '{"xla_gpu_experimental_enable_fusion_autotuner": true}': envcoder's XLA options
        XLA_OPTIONS[jax.default_backend()] = json.loads(args.xla_options)
    times = {}
    tick = time.perf_counter()
    task = get_task(args.task)
    functions = args.functions or _functions(args.task, args.groups)
    settings = EvalSettings(task=args.task, functions=functions, out=Path("unused"),
                            shaper_types=SHAPER_TYPES, envs_per_candidate=args.envs, seeds=tuple(range(args.seeds)))
    if args.sandboxed:  # as `eval` trains them: each file's functions as the jailed worker's programs
        from envcoder.candidates.prepare import sandboxed_candidates

        candidates, _ = sandboxed_candidates(settings, task)
    else:  # the files' Python functions, loaded in this process
        candidates, _ = build_candidates(settings)
        sim = Simulator(task.model_file, task.substeps)
        state = sample_state(task, sim)
        candidates = [validate_candidate(task, sim, c, state) for c in candidates]
    config = PPOConfig.for_task(task)
    trainer = GroupedPPO(task, candidates, config, args.envs, settings.seeds, physics=args.physics)
    times["setup_s"] = time.perf_counter() - tick

    def timed(name, fn):
        tick = time.perf_counter()
        result = fn()
        jax.block_until_ready(result)
        times[name] = time.perf_counter() - tick
        return result
    # Since 2026-11-25 `init(prepare_iteration=True)` traces the iteration for its state's shapes while `init`
    # compiles, and the iteration compiles in the background from then on (`StagedIteration.prepare`), as `eval`
    # runs it: only the sum of init and the first call, init_compile_and_first_iteration_s, compares with figures
    # measured before.
    ts = timed("init_s", lambda: trainer.init(prepare_iteration=True))
    ts2, _ = timed("iteration_first_call_s", lambda: trainer.iteration(ts))
    compiled = trainer.iteration
    # The compiled code's speed, so that a flag that compiles faster is not taken for free.
    state = ts2
    for _ in range(2):  # warm-up
        state, metrics = compiled(state)
    jax.block_until_ready(metrics)
    tick = time.perf_counter()
    for _ in range(args.timed_iterations):
        state, metrics = compiled(state)
    jax.block_until_ready(metrics)
    device_rate = len(trainer.groups) * args.envs * config.horizon_length * args.timed_iterations / (
        time.perf_counter() - tick)
    metrics = jax.device_get(metrics)  # the last iteration's: a sanity check of the compiled program's training
    sanity = {"peak_memory_gib": round(peak_memory_gb(), 2),  # the allocator's peak, preallocation or not
              "physics_failures_last_iteration": float(metrics["physics_failures"].sum()),
              "diverged_groups": int(metrics["diverged"].sum()),
              "mean_task_fitness_per_step": float(metrics["task_fitness_per_step"].mean())}
    ts2 = state
    lowered = timed("evaluation_trace_and_lower_s", lambda: trainer.evaluate.lower(ts2))
    timed("evaluation_xla_compile_s", lowered.compile)
    times["init_compile_and_first_iteration_s"] = times["init_s"] + times["iteration_first_call_s"]
    return {**stamp(), "task": args.task, "groups": len(trainer.groups), "envs_per_group": args.envs,
            "physics": trainer.physics, "distinct_codes": trainer.plan.num_distinct_codes(),
            "candidates_as": "programs" if args.sandboxed else "python",
            # Programs loaded from the trace cache (a warm run) instead of traced: init, the iteration's two
            # stages, evaluation.
            "traces_loaded": [getattr(f, "loaded", None) for f in trainer.programs().values()],
            "xla_flags": os.environ.get("XLA_FLAGS", ""), "xla_options": xla_options(),
            "device_env_steps_per_s": round(device_rate), **sanity,
            **{k: round(v, 2) for k, v in times.items()}}


def _run_worker(argv: list[str], env: dict, timeout: float) -> dict:
    proc = subprocess.run([sys.executable, __file__, "worker", *argv], capture_output=True, text=True, env=env,
                          timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        return {"error": proc.stderr[-2000:]}
    return json.loads(lines[-1])


COMPILE_VARIANTS = ("", "--xla_gpu_autotune_level=0",
                    "--xla_gpu_enable_llvm_module_compilation_parallelism=true "
                    "--xla_gpu_force_compilation_parallelism=16",
                    "--xla_llvm_disable_expensive_passes=true", "--xla_gpu_enable_command_buffer=")
"""XLA_FLAGS tried from a cold cache: none, no autotuning, parallel LLVM compilation, cheaper LLVM passes, no
CUDA graphs."""


def compile_time(args) -> dict:
    """Cold compiles under each of `args.variants` (XLA_FLAGS), then two more identical runs through the
    persistent cache the first cold run filled."""
    base = ["--task", args.task, "--envs", str(args.envs), "--seeds", str(args.seeds), "--physics", args.physics,
            "--timed-iterations", str(args.timed_iterations), "--xla-options", args.xla_options]
    if args.groups:
        base += ["--groups", str(args.groups)]
    points, shared = [], tempfile.mkdtemp(prefix="envcoder-cache-")
    runs = [(f"cold, XLA_FLAGS={flags!r}", flags, shared if i == 0 else tempfile.mkdtemp(prefix="envcoder-cache-"))
            for i, flags in enumerate(args.variants)]
    runs += [("second run, warm persistent cache", args.variants[0], shared), ("third run, warm", args.variants[0],
                                                                              shared)][:args.warm_runs]
    if args.edit:  # what an `auto` generation pays: one candidate's code changed, every cache warm
        file, before, after = args.edit
        edited = Path(tempfile.mkdtemp(prefix="envcoder-functions-")) / "edited"
        shutil.copytree(_functions(args.task, args.groups), edited)
        source = (edited / file).read_text()
        if before not in source:
            raise SystemExit(f"--edit: {before!r} is not in {file}")
        (edited / file).write_text(source.replace(before, after))
        runs.append((f"{file} edited ({before} -> {after}), warm caches", args.variants[0], shared,
                     ["--functions", str(edited)]))
    for name, flags, cache_dir, *more in runs:
        env = {**os.environ, "ENVCODER_CACHE_DIR": cache_dir, "XLA_FLAGS": flags}
        points.append({"case": name, **_run_worker(base + (more[0] if more else []), env, args.timeout)})
        print(json.dumps(points[-1]), flush=True)
    return {"points": points}


def engines(args) -> dict:
    """Physics-only stepping and training, per engine and env count, each point in its own subprocess."""
    points = []
    for envs in args.envs:
        for physics in args.physics:
            argv = ["--task", args.task, "--physics", physics, "--total-envs", str(envs), "--iterations",
                    str(args.iterations)]
            proc = subprocess.run([sys.executable, __file__, "engine-point", *argv], capture_output=True, text=True,
                                  timeout=args.timeout)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
            point = json.loads(lines[-1]) if lines and not proc.returncode else {
                "task": args.task, "physics": physics, "total_envs": envs, "error": proc.stderr[-1500:]}
            points.append(point)
            print(json.dumps(point), flush=True)
    return {"points": points}


def _default_trainer(task, sim, groups: int, envs_per_group: int, horizon: int):
    """A trainer of `groups` copies of the task's default shaping on `sim`'s engine."""
    from envcoder.rl.ppo.config import PPOConfig
    from envcoder.rl.ppo.learner import GroupedPPO
    from envcoder.candidates import Candidate
    from envcoder.candidates.validate import sample_state, validate_candidate
    from envcoder.sim import Simulator

    config = PPOConfig.for_task(task, horizon_length=horizon)
    validation_sim = Simulator(task.model_file, task.substeps)
    default = validate_candidate(task, validation_sim, Candidate("default", None, "", {}, "default"),
                                 sample_state(task, validation_sim))
    candidates = [Candidate(f"default_{i}", None, "", {}, "default").sized_as(default) for i in range(groups)]
    return GroupedPPO(task, candidates, config, envs_per_group, (0,), simulator=sim)


def kernels(args) -> dict:
    """Where a training iteration's GPU time goes: two iterations of the task's default shaping (groups of 256
    envs) traced with JAX's profiler after warm-up, GPU time summed per kernel name, per iteration."""
    import collections
    import gzip

    import jax

    from core import stamp
    from envcoder.sim import Simulator
    from envcoder.tasks import get_task

    task = get_task(args.task)
    groups = max(args.total_envs // 256, 1)
    sim = Simulator(task.model_file, task.substeps, physics=args.physics, worlds=groups * 256)
    trainer = _default_trainer(task, sim, groups, 256, 24)
    ts = trainer.init()
    for _ in range(3):
        ts, metrics = trainer.iteration(ts)
    jax.block_until_ready(metrics)
    folder = Path(tempfile.mkdtemp(prefix="envcoder-kernels-"))
    with jax.profiler.trace(str(folder), create_perfetto_trace=True):
        for _ in range(2):
            ts, metrics = trainer.iteration(ts)
        jax.block_until_ready(metrics)
    data = json.load(gzip.open(next(folder.rglob("perfetto_trace.json.gz"))))
    events = data["traceEvents"] if isinstance(data, dict) else data
    gpu = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
           and "GPU" in e["args"]["name"]}
    ms, calls = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e.get("pid") in gpu:
            ms[e["name"][:140]] += e.get("dur", 0) / 1e3 / 2
            calls[e["name"][:140]] += 0.5
    top = [(name, round(t, 2), int(calls[name])) for name, t in ms.most_common(40)]
    for name, t, n in top:
        print(f"{t:9.2f} ms {n:6d}  {name}", flush=True)
    return {**stamp(), "task": args.task, "physics": args.physics, "total_envs": groups * 256,
            "gpu_ms_per_iteration": round(sum(ms.values()), 1), "kernels_ms_calls_per_iteration": top}


def engine_point(args) -> dict:
    """Physics-only env-steps/s (random controls held for the control step) and training env-steps/s (the
    task's default shaping, groups of 256 envs) for `total_envs` environments on one engine."""
    import jax
    import jax.numpy as jnp

    from core import peak_memory_gb, stamp, time_training
    from envcoder.sim import Simulator
    from envcoder.tasks import get_task

    task = get_task(args.task)
    envs_per_group = min(256, args.total_envs)
    groups = args.total_envs // envs_per_group
    sim = Simulator(task.model_file, task.substeps, physics=args.physics, worlds=groups * envs_per_group)
    horizon = 24
    low, high = (jnp.asarray(sim.mj_model.actuator_ctrlrange[:, i], jnp.float32) for i in (0, 1))

    @jax.jit
    def rollout(key):
        data = jax.vmap(jax.vmap(lambda _: sim.reset(sim.qpos0, jnp.zeros(sim.mj_model.nv))))(
            jnp.zeros((groups, envs_per_group)))

        def step(data, k):
            ctrl = jax.random.uniform(k, (groups, envs_per_group, sim.mj_model.nu), minval=low, maxval=high)
            return jax.vmap(jax.vmap(sim.step))(data, ctrl), None
        data, _ = jax.lax.scan(step, data, jax.random.split(key, horizon))
        return data.qpos
    tick = time.perf_counter()
    jax.block_until_ready(rollout(jax.random.PRNGKey(0)))
    physics_compile_s = time.perf_counter() - tick
    tick = time.perf_counter()
    for i in range(args.iterations):
        qpos = rollout(jax.random.PRNGKey(i + 1))
    jax.block_until_ready(qpos)
    physics_rate = args.total_envs * horizon * args.iterations / (time.perf_counter() - tick)

    trainer = _default_trainer(task, sim, groups, envs_per_group, horizon)
    metrics, train_compile_s, train_s = time_training(trainer, args.iterations)
    train_rate = args.total_envs * horizon * args.iterations / train_s
    return {**stamp(), "task": args.task, "physics": args.physics, "total_envs": args.total_envs,
            "groups": groups, "envs_per_group": envs_per_group,
            "physics_env_steps_per_s": round(physics_rate), "physics_compile_s": round(physics_compile_s, 2),
            "train_env_steps_per_s": round(train_rate), "train_compile_and_first_iteration_s": round(train_compile_s, 2),
            "physics_failures_last_iteration": float(jnp.sum(metrics["physics_failures"])),
            "peak_memory_gib": round(peak_memory_gb(), 2)}


def agree(args) -> dict:
    """Both engines from the same start states under the same controls: how far apart their joint positions
    and foot contact forces are after 1, 5, 25, ... control steps. Two cases: no torque (the robot drops
    5 cm onto its feet and settles) and random torques of 10% of the motors' range from perturbed joints."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from core import stamp
    from envcoder.sim import Simulator
    from envcoder.tasks import get_task

    task = get_task(args.task)
    key_pos, key_ctrl = jax.random.split(jax.random.PRNGKey(0))
    cases = {}
    for case, scale in (("no torque, dropped 5 cm", 0.0), ("random torques (10% of range)", 0.1)):
        trajectories = {}
        for physics in ("jax", "warp"):
            sim = Simulator(task.model_file, task.substeps, physics=physics, worlds=args.envs)
            nq, nv, nu = sim.mj_model.nq, sim.mj_model.nv, sim.mj_model.nu
            qpos = jnp.broadcast_to(sim.qpos0, (1, args.envs, nq)).at[..., 2].add(0.05)
            perturbation = jax.random.uniform(key_pos, (1, args.envs, nq - 7), minval=-0.2, maxval=0.2)
            qpos = qpos.at[..., 7:].add(perturbation * (scale > 0))
            high = jnp.asarray(sim.mj_model.actuator_ctrlrange[:, 1], jnp.float32)
            ctrl = scale * high * jax.random.uniform(key_ctrl, (args.steps, 1, args.envs, nu), minval=-1, maxval=1)

            @jax.jit
            def rollout(qpos, ctrl):
                data = jax.vmap(jax.vmap(sim.reset))(qpos, jnp.zeros(qpos.shape[:2] + (nv,)))

                def step(data, ctrl):
                    data = jax.vmap(jax.vmap(sim.step))(data, ctrl)
                    return data, (data.qpos, sim.task_contact_forces(task, data))
                return jax.lax.scan(step, data, ctrl)[1]
            tick = time.perf_counter()
            trajectories[physics] = jax.device_get(rollout(qpos, ctrl))
            print(case, physics, "compile + run", round(time.perf_counter() - tick, 1), "s", flush=True)
        (q_jax, f_jax), (q_warp, f_warp) = trajectories["jax"], trajectories["warp"]
        weight = float(sim.mj_model.body_subtreemass[0] * -sim.mj_model.opt.gravity[2])
        rows = []
        for step in sorted({1, 5, 25, 100, args.steps} & set(range(1, args.steps + 1))):
            dq = np.abs(q_jax[step - 1] - q_warp[step - 1]).max(axis=-1).ravel()  # per env, worst coordinate
            df = np.abs(f_jax[step - 1] - f_warp[step - 1]).max(axis=(-1, -2)).ravel() / weight
            rows.append({"control_step": step, "qpos_max_abs_diff_median": float(np.median(dq)),
                         "qpos_max_abs_diff_p95": float(np.percentile(dq, 95)),
                         "contact_force_diff_over_weight_median": float(np.median(df)),
                         "contact_force_diff_over_weight_p95": float(np.percentile(df, 95)),
                         "base_height_jax_mean": float(q_jax[step - 1][..., 2].mean()),
                         "base_height_warp_mean": float(q_warp[step - 1][..., 2].mean())})
            print(case, json.dumps(rows[-1]), flush=True)
        cases[case] = rows
    return {**stamp(), "task": args.task, "envs": args.envs, "steps": args.steps, "cases": cases}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("wall", "compile", "worker"):
        p = sub.add_parser(name)
        p.add_argument("--task", default="Anymal")
        p.add_argument("--groups", type=int, default=None,
                       help="this many copies of the bundled candidates (default: each bundled candidate once)")
        p.add_argument("--seeds", type=int, default=1)
        p.add_argument("--envs", type=int, default=256)
        p.add_argument("--physics", default="jax")
    sub.choices["wall"].add_argument("--iterations", type=int, default=200)
    sub.choices["wall"].add_argument("--device-iterations", type=int, default=20)
    sub.choices["compile"].add_argument("--timeout", type=int, default=600)
    for name in ("compile", "worker"):
        sub.choices[name].add_argument("--timed-iterations", type=int, default=10,
                                       help="iterations timed after compiling, for the compiled code's speed")
    sub.choices["compile"].add_argument("--variants", nargs="+", default=list(COMPILE_VARIANTS),
                                        help="XLA_FLAGS values to compile under, from a cold cache each")
    sub.choices["compile"].add_argument("--warm-runs", type=int, default=2,
                                        help="runs through the first variant's filled caches after the cold ones")
    sub.choices["compile"].add_argument("--edit", nargs=3, metavar=("FILE", "OLD", "NEW"), default=None,
                                        help="then one more run through those caches with OLD replaced by NEW in "
                                             "the candidate file FILE (a new program, as in `auto`)")
    sub.choices["worker"].add_argument("--sandboxed", action="store_true",
                                       help="train the files as the sandbox hands them over (programs), as eval does")
    sub.choices["worker"].add_argument("--functions", type=Path, default=None,
                                       help="candidate files (default: the task's bundled ones)")
    for name in ("compile", "worker"):
        sub.choices[name].add_argument("--xla-options", default="",
                                       help="JSON: envcoder's XLA options for this backend instead of its own "
                                            "(envcoder.compile_cache.XLA_OPTIONS)")
    e = sub.add_parser("engines")
    e.add_argument("--envs", type=int, nargs="+", default=[4096, 16384, 65536, 262144])
    e.add_argument("--physics", nargs="+", default=["jax", "warp"])
    e.add_argument("--timeout", type=int, default=600)
    a = sub.add_parser("agree")
    a.add_argument("--task", default="Anymal")
    a.add_argument("--envs", type=int, default=1024)
    a.add_argument("--steps", type=int, default=100)
    p = sub.add_parser("engine-point")
    p.add_argument("--total-envs", type=int, required=True)
    p.add_argument("--physics", default="jax")
    k = sub.add_parser("kernels")
    k.add_argument("--total-envs", type=int, default=16384)
    k.add_argument("--physics", default="jax")
    k.add_argument("--task", default="Anymal")
    for q in (e, p):
        q.add_argument("--task", default="Ant")
        q.add_argument("--iterations", type=int, default=10)
    for q in sub.choices.values():
        q.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = {"wall": wall, "compile": compile_time, "worker": worker, "engines": engines,
              "engine-point": engine_point, "agree": agree, "kernels": kernels}[args.command](args)
    print(json.dumps(result), flush=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
