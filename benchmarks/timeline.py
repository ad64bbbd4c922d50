"""A run's start, phase by phase: a real `envcoder eval` (or the compile benchmark's worker) with every trace,
lowering and XLA compile that JAX reports (`jax.monitoring`, those of 50 ms or more) and the run's phases marked,
in seconds from the process's start, with the thread that did each.

    ENVCODER_CACHE_DIR=/tmp/fresh python benchmarks/timeline.py eval --task Anymal --seeds 6 --iterations 5 --out /tmp/run1
    ENVCODER_CACHE_DIR=/tmp/fresh python benchmarks/timeline.py eval --task Anymal --seeds 6 --iterations 5 --out /tmp/run2
    ENVCODER_CACHE_DIR=/tmp/other python benchmarks/timeline.py worker --task Anymal --seeds 6

    ENVCODER_CACHE_DIR=/tmp/fresh python benchmarks/timeline.py outside --task Anymal --seeds 6 --iterations 5 --out /tmp/run3
    ENVCODER_CACHE_DIR=/tmp/fresh python benchmarks/timeline.py outside --first-only --task Anymal --seeds 6 --out /tmp/run5

    ENVCODER_CACHE_DIR=/tmp/fresh python benchmarks/timeline.py launch --task Anymal --seeds 6 --iterations 5 --out /tmp/run4

`launch` reports when the command launches its first validation worker (on machines of 8 cores or more it does so
before its own imports and setup; validation is a cold run's critical path) and stops there.
`outside` runs the command as a process of its own and times it from outside, as a user does: from its launch to the
first row of `metrics.csv` on disk, and to its end. The timelines above import envcoder's modules to mark their
phases, before the command starts; `outside` measures what starting work ahead of the imports saves
(`envcoder.candidates.pool.start_workers`).

The first `eval` is cold, the second finds the first's caches (`--first-only`: each ends once its first iteration is
recorded, as does `outside --first-only`). The line "first iteration's metrics recorded" is what
a user waits for: the first trained iteration. Each validation worker's start and each file's check are marked too.
docs/benchmarks/archive/throughput.md § 5 and § 9 read these timelines.

    ENVCODER_CACHE_DIR=/tmp/fresh python benchmarks/timeline.py sandbox --task Anymal --workers 4

validates the task's bundled candidate files in the sandbox as `eval` does, with each worker's start and each
file's check timed, then times a worker's start step by step in a process of its own.
"""

from __future__ import annotations

import sys
import threading
import time

START = time.perf_counter()


def mark(what: str) -> None:
    print(f"[{time.perf_counter() - START:7.2f} s] {threading.current_thread().name[:24]:24} {what}", flush=True)


def _wrap(owner, name: str, label: str | None = None) -> None:
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        mark(f">> {label or name}")
        try:
            return original(*args, **kwargs)
        finally:
            mark(f"<< {label or name}")
    setattr(owner, name, wrapped)


def outside(*argv: str) -> None:
    """`envcoder eval ARGV` in a process of its own: seconds from its launch to its first metrics row on disk, and
    to its end; with `--first-only` (not passed on), the command is interrupted (Ctrl-C) once that row is there."""
    import signal
    import subprocess
    from pathlib import Path

    first_only = "--first-only" in argv
    argv = tuple(a for a in argv if a != "--first-only")
    out = Path(argv[argv.index("--out") + 1])
    launched = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "envcoder.cli", "eval", *argv])
    first = None
    while proc.poll() is None:
        if first is None and (out / "metrics.csv").exists() and len((out / "metrics.csv").read_text().splitlines()) > 1:
            first = time.perf_counter() - launched
            print(f"[{first:7.2f} s] first iteration's metrics on disk (from the command's launch)", flush=True)
            if first_only:
                proc.send_signal(signal.SIGINT)
        time.sleep(0.02)
    print(f"[{time.perf_counter() - launched:7.2f} s] end (exit {proc.returncode})", flush=True)
    sys.exit(proc.returncode)


def launch(*argv: str) -> None:
    """When `envcoder eval ARGV` launches its first validation worker, from this process's start (the command runs in
    this process, with `subprocess.Popen` made to report the worker's launch and end the process there)."""
    import os
    import subprocess

    popen = subprocess.Popen

    class Reporting(popen):
        def __init__(self, args, *rest, **kwargs):
            if "envcoder.candidates.worker" in map(str, args):
                mark("the first validation worker is launched")
                os._exit(0)
            super().__init__(args, *rest, **kwargs)
    subprocess.Popen = Reporting
    from envcoder.cli import main as run

    mark("envcoder.cli imported")
    run(["eval", *argv])
    mark("no validation worker was launched")


def main() -> None:
    import os

    if sys.argv[1:2] == ["outside"]:
        return outside(*sys.argv[2:])
    if sys.argv[1:2] == ["launch"]:
        return launch(*sys.argv[2:])
    import jax

    mark("import jax")

    def listener(event: str, duration: float, **kwargs) -> None:
        if duration >= 0.05 and any(word in event for word in ("compile", "trace", "mlir")):
            mark(f"{event.rsplit('/', 1)[-1]:36} {duration:6.2f} s  {kwargs.get('fun_name', '')}")
    jax.monitoring.register_event_duration_secs_listener(listener)

    from envcoder.candidates import pool
    from envcoder.rl import learner
    from envcoder.rl.ppo import learner as grouped_ppo
    from envcoder.runs import directory, evaluation
    from envcoder.sim import simulator

    _wrap(pool.Worker, "ready", "a worker's start (imports, sample rollout)")
    check = pool.Worker.check

    def timed_check(self, name, *rest, **kwargs):
        mark(f">> check {name}")
        try:
            return check(self, name, *rest, **kwargs)
        finally:
            mark(f"<< check {name}")
    pool.Worker.check = timed_check

    _wrap(evaluation, "sandboxed_candidates")
    _wrap(simulator.Simulator, "__init__", "Simulator()")
    _wrap(grouped_ppo.GroupedPPO, "__init__", "GroupedPPO()")
    _wrap(learner.GroupedLearner, "init")
    _wrap(learner.GroupedLearner, "compile_evaluation")
    append_metrics = directory.RunDirectory.append_metrics

    first_only = "--first-only" in sys.argv
    sys.argv = [a for a in sys.argv if a != "--first-only"]

    def first_metrics(self, iteration, *args, **kwargs):
        if iteration == 0:
            mark("first iteration's metrics recorded")
            if first_only:  # the workers end when their input closes
                os._exit(0)
        return append_metrics(self, iteration, *args, **kwargs)
    directory.RunDirectory.append_metrics = first_metrics

    command, *rest = sys.argv[1:] or ["eval"]
    if command == "sandbox":
        return sandbox(*rest)
    if command == "worker":
        sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
        from throughput import main as run
        sys.argv = ["throughput.py", "worker", *rest]
    else:
        from envcoder.cli import main as run
        sys.argv = ["envcoder", command, *rest]
    try:
        status = run()
    finally:
        mark("end")
    sys.exit(status)


def sandbox(*argv: str) -> None:
    import argparse
    import os
    import subprocess
    import tempfile
    from pathlib import Path

    from envcoder.compile_cache import enable_compilation_cache
    from envcoder.candidates import pool, sandbox as box
    from envcoder.candidates import SHAPER_TYPES

    parser = argparse.ArgumentParser(prog="timeline.py sandbox")
    parser.add_argument("--task", default="Anymal")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args(argv)
    enable_compilation_cache()
    _wrap(pool.Worker, "__init__", "a worker is launched")
    folder = Path(__file__).resolve().parents[1] / "src" / "envcoder" / "examples" / args.task.lower()
    drafts = [(path.stem, path.read_text(), str(path)) for path in sorted(folder.glob("*.py"))]
    with box.SandboxValidator(args.task, SHAPER_TYPES, workers=args.workers) as validator:
        validator.validate(drafts)
    mark(f"{len(drafts)} files validated")
    steps = f"""
import time
start = time.perf_counter()
def mark(what):
    print(f"  worker process [{{time.perf_counter() - start:6.2f}} s] {{what}}", flush=True)
import jax; mark("import jax")
from mujoco import mjx; mark("import mujoco, mjx")
from envcoder.candidates.validate import rollout_states
from envcoder.sim import Simulator
from envcoder.tasks import get_task
mark("import envcoder")
task = get_task({args.task!r}); simulator = Simulator(task.model_file, task.substeps); mark("Simulator")
rollout_states(task, simulator); mark("sample rollout")
"""
    subprocess.run([sys.executable, "-c", steps], env=pool.worker_env(tempfile.mkdtemp()), check=True)


if __name__ == "__main__":
    main()
