"""Experiment: the iteration as six programs compiled at once (start, act, physics, record, last values, learn),
the rollout driven from the host, against the two-stage iteration. Same process, no caches.

    ENVCODER_CACHE_DIR= python benchmarks/stepped_probe.py --task Anymal --seeds 6 --out DIR
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="Anymal")
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--groups", type=int, default=None)
    parser.add_argument("--envs", type=int, default=256)
    parser.add_argument("--default-only", action="store_true")
    parser.add_argument("--timed", type=int, default=10)
    parser.add_argument("--skip-staged", action="store_true")
    parser.add_argument("--learn-options", default="{}")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import jax
    import jax.numpy as jnp
    import numpy as np

    from compile_probe import build
    from core import peak_memory_gb, stamp
    from envcoder.compile_cache import xla_options

    out = {**stamp(), "task": args.task}
    tick = time.perf_counter()
    trainer = build(args)
    ts0 = trainer.init()
    jax.block_until_ready(ts0)
    out["setup_and_init_s"] = round(time.perf_counter() - tick, 2)
    T = trainer.config.horizon_length
    opts = xla_options()
    donate = () if jax.default_backend() == "cpu" else (0,)

    def start(ts):
        started = trainer._start(ts)
        keys = jax.vmap(lambda k: jax.random.split(k, T))(started.pop("rollout_key")).swapaxes(0, 1)
        return {**started, "step_keys": tuple(keys[t] for t in range(T))}

    def record(donated, pts, pool):
        env, acted, physics = donated
        return trainer._record(pts, env, acted, physics, pool)

    def learn(args_):
        ts, collected = args_
        traj = jax.tree.map(lambda *x: jnp.stack(x), *collected["traj"])
        return trainer._learn((ts, {**collected, "traj": traj}))

    learn_options = {**opts, **json.loads(args.learn_options)}
    programs = {"physics": jax.jit(trainer._physics, compiler_options=opts),
                "act": jax.jit(trainer._act, compiler_options=opts),
                "start": jax.jit(start, compiler_options=opts),
                "record": jax.jit(record, donate_argnums=donate, compiler_options=opts),
                "last": jax.jit(trainer._last_values, compiler_options=opts),
                "learn": jax.jit(learn, donate_argnums=donate, compiler_options=learn_options)}

    def shapes(tree):
        return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)

    def policy_state(ts):
        return ts._replace(opt_state=None, env=None, best=None, replay=None, key=None)

    ts_s = shapes(ts0)
    pts_s = policy_state(ts_s)
    G, E = len(trainer.groups), trainer.num_envs
    key_s = jax.ShapeDtypeStruct((G, 2), ts0.key.dtype)
    times, compiled = {}, {}
    pool = concurrent.futures.ThreadPoolExecutor(6)
    futures = {}
    wall = time.perf_counter()

    def compile_(name, lowered):
        tick = time.perf_counter()
        result = lowered.compile()
        times[f"{name}_xla_s"] = round(time.perf_counter() - tick, 2)
        times[f"{name}_done_at_s"] = round(time.perf_counter() - wall, 2)
        return result

    def lower(name, *fn_args):
        tick = time.perf_counter()
        lowered = programs[name].lower(*fn_args)
        times[f"{name}_trace_s"] = round(time.perf_counter() - tick, 2)
        futures[name] = pool.submit(compile_, name, lowered)
        return shapes(lowered.out_info)

    physics_s = lower("physics", ts_s.env, jax.ShapeDtypeStruct((G, E, trainer.action_dim_max), jnp.float32))
    acted_s = lower("act", pts_s, ts_s.env, key_s)
    started_s = lower("start", ts_s)
    env_s, transition_s = lower("record", (ts_s.env, acted_s, physics_s), pts_s, started_s["pool"])
    assert jax.tree.structure(env_s) == jax.tree.structure(ts_s.env)
    last_s = lower("last", pts_s, env_s, key_s)
    lower("learn", (ts_s._replace(env=None), dict(env=env_s, traj=(transition_s,) * T, last_values=last_s,
                                                   next_key=key_s, update_key=key_s)))
    times["traced_all_at_s"] = round(time.perf_counter() - wall, 2)
    for name, future in futures.items():
        compiled[name] = future.result()
    times["compiled_all_at_s"] = round(time.perf_counter() - wall, 2)

    def iteration(ts):
        pts = policy_state(ts)
        started = compiled["start"](ts)
        env, traj = ts.env, []
        for t in range(T):
            acted = compiled["act"](pts, env, started["step_keys"][t])
            physics = compiled["physics"](env, acted["clipped"])
            env, transition = compiled["record"]((env, acted, physics), pts, started["pool"])
            traj.append(transition)
        last = compiled["last"](pts, env, started["next_key"])
        return compiled["learn"]((ts._replace(env=None), dict(env=env, traj=tuple(traj), last_values=last,
                                                               next_key=started["next_key"],
                                                               update_key=started["update_key"])))

    copy = trainer._copy
    tick = time.perf_counter()
    ts1, m1 = iteration(copy(ts0))
    jax.block_until_ready(m1)
    times["first_run_s"] = round(time.perf_counter() - tick, 2)
    times["compile_and_first_iteration_s"] = round(time.perf_counter() - wall, 2)
    out["stepped"] = times

    def rate(fn, state):
        for _ in range(2):
            state, metrics = fn(state)
        jax.block_until_ready(metrics)
        tick = time.perf_counter()
        host = 0.0
        for _ in range(args.timed):
            h = time.perf_counter()
            state, metrics = fn(state)
            host += time.perf_counter() - h
        jax.block_until_ready(metrics)
        elapsed = time.perf_counter() - tick
        return {"env_steps_per_s": round(G * E * T * args.timed / elapsed), "host_dispatch_s_per_iteration":
                round(host / args.timed, 4), "s_per_iteration": round(elapsed / args.timed, 4)}

    out["stepped_rate"] = rate(iteration, ts1)
    out["stepped_peak_memory_gib"] = round(peak_memory_gb(), 2)
    print(json.dumps(out), flush=True)
    if not args.skip_staged:
        staged = {}
        tick = time.perf_counter()
        lowered = trainer.iteration.lower(ts0)
        staged["trace_s"] = round(time.perf_counter() - tick, 2)
        whole = lowered.compile()
        staged["xla_s"] = round(time.perf_counter() - tick - staged["trace_s"], 2)
        ts2, m2 = whole(copy(ts0))
        jax.block_until_ready(m2)
        staged["compile_and_first_iteration_s"] = round(time.perf_counter() - tick, 2)
        out["staged"] = staged
        out["staged_rate"] = out_rate = rate(whole, ts2)
        del out_rate
        # The same first iteration either way (the same programs' pieces, composed on the host or in XLA).
        diffs = jax.tree.map(lambda a, b: float(np.nanmax(np.abs(np.asarray(a, np.float64) - np.asarray(b)))
                                            if np.asarray(a).size else 0.0), jax.device_get(m1), jax.device_get(m2))
        out["max_metric_diff"] = max(jax.tree.leaves(diffs))
    print(json.dumps(out), flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
