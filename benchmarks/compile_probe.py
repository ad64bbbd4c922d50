"""Where XLA's compile time goes: one program compiled under JAX's profiler, its phases and passes summed.

    python benchmarks/compile_probe.py iteration --task Anymal --seeds 6 --out DIR     # the README job's iteration
    python benchmarks/compile_probe.py physics --task Anymal --groups 60 --out DIR     # MJX alone, same envs
    python benchmarks/compile_probe.py iteration --task Anymal --seeds 6 --default-only --out DIR
    python benchmarks/compile_probe.py collect --task Anymal --seeds 6 --out DIR       # the iteration's first stage
    python benchmarks/compile_probe.py learn --task Anymal --seeds 6 --out DIR         # ... and its second

Writes DIR/<name>.json (phase and pass seconds, kernel count) and DIR/<name>.hlo.txt.gz (the optimized HLO).
Run each in a fresh process with ENVCODER_CACHE_DIR= (no caches).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def summarize_trace(folder: Path, top: int = 80) -> dict:
    """Seconds per event name of the profiler's trace (complete events), largest first."""
    path = next(folder.rglob("perfetto_trace.json.gz"))
    data = json.load(gzip.open(path))
    events = data["traceEvents"] if isinstance(data, dict) else data
    seconds, count = collections.Counter(), collections.Counter()
    complete = [e for e in events if e.get("ph") == "X"]
    for e in complete:
        seconds[e["name"]] += e.get("dur", 0) / 1e6
        count[e["name"]] += 1
    return {"events": [(name, round(s, 3), count[name]) for name, s in seconds.most_common(top)],
            "threads_seen": len({e.get("tid") for e in complete})}


def build(args):
    from throughput import _functions

    from envcoder.rl.ppo.config import PPOConfig
    from envcoder.rl.ppo.learner import GroupedPPO
    from trusted import build_candidates
    from envcoder.runs.evaluation import EvalSettings
    from envcoder.candidates import SHAPER_TYPES, Candidate
    from envcoder.candidates.validate import sample_state, validate_candidate
    from envcoder.sim import Simulator
    from envcoder.tasks import get_task

    task = get_task(args.task)
    sim = Simulator(task.model_file, task.substeps)
    config = PPOConfig.for_task(task)
    if args.default_only:
        count = args.groups or 60
        first = validate_candidate(task, sim, Candidate("default_0", None, "", {}, "default"), sample_state(task, sim))
        candidates = [Candidate(f"default_{i}", None, "", {}, "default").sized_as(first) for i in range(count)]
        seeds = (0,)
    else:
        settings = EvalSettings(task=args.task, functions=_functions(args.task, args.groups), out=Path("unused"),
                                shaper_types=SHAPER_TYPES, envs_per_candidate=args.envs,
                                seeds=tuple(range(args.seeds)))
        candidates, _ = build_candidates(settings)
        state = sample_state(task, sim)
        candidates = [validate_candidate(task, sim, c, state) for c in candidates]
        seeds = settings.seeds
    return GroupedPPO(task, candidates, config, args.envs, seeds, physics="jax")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["iteration", "collect", "learn", "init", "evaluate", "physics"],
                        help="the program: the whole iteration, one of the two stages it runs as on one device "
                             "(collect, learn), init, the evaluation, or MJX's physics alone")
    parser.add_argument("--task", default="Anymal")
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--groups", type=int, default=None)
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--default-only", action="store_true")
    parser.add_argument("--name", default=None)
    parser.add_argument("--xla-options", default=None,
                        help="XLA options (JSON) over the trainer's (envcoder.compile_cache.xla_options)")
    parser.add_argument("--trace-ahead", action="store_true",
                        help="trace MJX's physics step first (`Simulator.trace_ahead`, what a run does while the "
                             "sandbox validates) and report its seconds apart from the program's trace")
    parser.add_argument("--prewarm", action="store_true",
                        help="first compile (unprofiled) the policy's forward pass on the rollout's observations, "
                             "alone: does XLA reuse its GEMM autotuning results in the profiled program?")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import jax
    import jax.numpy as jnp

    from core import stamp

    name = args.name or args.what + ("_default" if args.default_only else "")
    from envcoder.compile_cache import xla_options
    options = {**xla_options(), **json.loads(args.xla_options or "{}")}  # as the trainer compiles it
    times = {}
    tick = time.perf_counter()
    if args.what == "physics":
        from envcoder.sim import Simulator
        from envcoder.tasks import get_task
        task = get_task(args.task)
        sim = Simulator(task.model_file, task.substeps)
        G, E = args.groups or 60, args.envs

        def rollout(data, key):
            def step(d, k):
                u = jax.random.uniform(k, (G, E, sim.mj_model.nu), minval=-1, maxval=1)
                return jax.vmap(jax.vmap(sim.step))(d, u), None
            return jax.lax.scan(step, data, jax.random.split(key, 24))[0]
        data = jax.jit(lambda: jax.vmap(jax.vmap(lambda _: sim.reset(sim.qpos0, jnp.zeros(sim.mj_model.nv))))(
            jnp.zeros((G, E))))()
        fn, fn_args = jax.jit(rollout, compiler_options=options), (data, jax.random.PRNGKey(0))
    else:
        trainer = build(args)
        times["setup_s"] = time.perf_counter() - tick
        if args.trace_ahead:
            tick = time.perf_counter()
            trainer.env.sim.trace_ahead(len(trainer.groups) * args.envs)  # as a run does: batched for its envs
            sim = trainer.env.sim
            jax.eval_shape(sim.world_step, sim.place(sim.qpos0, jnp.zeros(sim.mj_model.nv)),
                           jnp.zeros(sim.mj_model.nu), {})  # waits for the trace ahead, then reuses it
            times["trace_ahead_s"] = time.perf_counter() - tick
        keys = jax.ShapeDtypeStruct((len(trainer.groups), 2), jnp.uint32)
        functions = trainer.functions()
        if args.what == "init":
            fn, fn_args = jax.jit(functions["init"], compiler_options=options), (keys,)
        else:
            ts = jax.eval_shape(functions["init"], keys)
            fn = jax.jit(functions[args.what], compiler_options=options)
            fn_args = ((ts, jax.eval_shape(functions["collect"], ts)),) if args.what == "learn" else (ts,)
            if args.prewarm:
                def policy(ts):
                    obs, critic_obs = trainer.env.observe(ts.env, ts.key, critic=True)
                    return trainer.policy(ts.params, ts.obs_rms, obs, ts.own.critic_rms, critic_obs)
                tick = time.perf_counter()
                jax.jit(policy, compiler_options=options).lower(ts).compile()
                times["prewarm_s"] = time.perf_counter() - tick
    tick = time.perf_counter()
    lowered = fn.lower(*fn_args)
    times["trace_and_lower_s"] = time.perf_counter() - tick
    trace_dir = Path(tempfile.mkdtemp(prefix="envcoder-probe-"))
    tick = time.perf_counter()
    with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
        compiled = lowered.compile()
    times["xla_compile_s"] = time.perf_counter() - tick
    hlo = compiled.as_text()
    args.out.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out / f"{name}.hlo.txt.gz", "wt") as f:
        f.write(hlo)
    kernels = sum(1 for line in hlo.splitlines() if line.lstrip().startswith("%") and " fusion(" in line)
    result = {**stamp(), "name": name, "what": args.what, "task": args.task, "xla_options": options,
              **{k: round(v, 2) for k, v in times.items()}, "fusions_in_hlo": kernels,
              "hlo_chars": len(hlo), **summarize_trace(trace_dir)}
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "events"}), flush=True)
    for event, s, n in result["events"][:45]:
        print(f"{s:9.3f}s {n:6d}  {event[:110]}")


if __name__ == "__main__":
    main()
