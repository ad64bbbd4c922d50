"""Runs `envcoder` in this process and kills it with SIGKILL at a named point (the fault-injection tests).

    python tests/fault_harness.py POINT [envcoder arguments...]

POINT: `first-metrics` (after iteration 0's metrics row, before any checkpoint), `half-checkpoint` (half of
the second train_state.npz written), `state-before-progress` (a train_state.npz written, its progress.json
not yet), `evaluation` (the final evaluation done, nothing of it written), `second-evaluation` (the same, in
the second evaluation of an `auto` run), `random:SEED` (at a random one of those events, drawn with SEED),
or `none`.
"""

import io
import os
import random
import signal
import subprocess
import sys

import numpy as np

from envcoder.compile_cache import enable_compilation_cache
from envcoder.runs import checkpoint, results
from envcoder.runs.directory import RunDirectory


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def inject(point: str) -> None:
    if point == "first-metrics":
        append = RunDirectory.append_metrics

        def append_then_die(self, iteration, *args):
            append(self, iteration, *args)
            if iteration == 0:
                die()
        RunDirectory.append_metrics = append_then_die
    elif point in ("half-checkpoint", "state-before-progress"):
        write, states = checkpoint._write_npz, []

        def write_npz(path, arrays):
            if path.name == "train_state.npz":
                states.append(path)
                if point == "half-checkpoint" and len(states) == 2:
                    buffer = io.BytesIO()
                    np.savez(buffer, **arrays)
                    path.with_suffix(".tmp").write_bytes(buffer.getvalue()[:len(buffer.getvalue()) // 2])
                    die()
            write(path, arrays)
            if point == "state-before-progress" and path.name == "train_state.npz":
                die()
        checkpoint._write_npz = write_npz
    elif point in ("evaluation", "second-evaluation"):
        rank, calls = results.rank, []

        def rank_or_die(*args, **kwargs):
            calls.append(1)
            if point == "evaluation" or len(calls) == 2:
                die()
            return rank(*args, **kwargs)
        results.rank = rank_or_die
    elif point.startswith("random:"):
        rng = random.Random(int(point.split(":")[1]))
        # Two events (before and after) per metrics row, checkpoint file and ranking: about 60 in the tests'
        # run, so some draws let it finish.
        chosen, count = rng.randint(1, 70), [0]

        def event():
            count[0] += 1
            if count[0] == chosen:
                die()

        def hooked(fn):
            def call(*args, **kwargs):
                event()
                result = fn(*args, **kwargs)
                event()
                return result
            return call
        RunDirectory.append_metrics = hooked(RunDirectory.append_metrics)
        checkpoint._write_npz = hooked(checkpoint._write_npz)
        results.rank = hooked(results.rank)
    elif point != "none":
        raise SystemExit(f"unknown fault point {point!r}")


def run_killed(point: str, argv: list[str], may_finish: bool = False) -> bool:
    """Run `envcoder ARGV` in a process that kills itself with SIGKILL at `point`; True when it was killed (a
    random point may come after the run's end: `may_finish`)."""
    import jax

    env = {**os.environ, "JAX_PLATFORMS": "cpu", "ENVCODER_CACHE_DIR": jax.config.jax_compilation_cache_dir or ""}
    proc = subprocess.run([sys.executable, __file__, point, *argv], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode in ((-signal.SIGKILL, 0) if may_finish else (-signal.SIGKILL,)), proc.stderr[-3000:]
    return proc.returncode == -signal.SIGKILL


if __name__ == "__main__":
    enable_compilation_cache()
    inject(sys.argv[1])
    from envcoder.cli import main

    sys.exit(main(sys.argv[2:]))
