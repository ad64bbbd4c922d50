"""A run's start, phase by phase: a real `envcoder eval` (or the compile benchmark's worker) with every trace,
lowering and XLA compile that JAX reports (`jax.monitoring`, those of 50 ms or more) and the run's phases marked,
in seconds from the process's start, with the thread that did each.

    ENVCODER_CACHE_DIR=/tmp/fresh python benchmarks/timeline.py eval --task Anymal --seeds 6 --iterations 5 --out /tmp/run1
    ENVCODER_CACHE_DIR=/tmp/fresh python benchmarks/timeline.py eval --task Anymal --seeds 6 --iterations 5 --out /tmp/run2
    ENVCODER_CACHE_DIR=/tmp/other python benchmarks/timeline.py worker --task Anymal --seeds 6

The first `eval` is cold, the second finds the first's caches. The line "first iteration's metrics recorded" is what
a user waits for: the first trained iteration. docs/benchmarks/throughput.md § 5 reads these timelines.
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


def main() -> None:
    import jax

    mark("import jax")

    def listener(event: str, duration: float, **kwargs) -> None:
        if duration >= 0.05 and any(word in event for word in ("compile", "trace", "mlir")):
            mark(f"{event.rsplit('/', 1)[-1]:36} {duration:6.2f} s  {kwargs.get('fun_name', '')}")
    jax.monitoring.register_event_duration_secs_listener(listener)

    from envcoder.rl import trainer
    from envcoder.runs import directory, evaluation
    from envcoder.sim import simulator

    _wrap(evaluation, "sandboxed_candidates")
    _wrap(simulator.Simulator, "__init__", "Simulator()")
    _wrap(trainer.GroupedTrainer, "__init__", "GroupedTrainer()")
    _wrap(trainer.GroupedTrainer, "init")
    _wrap(trainer.GroupedTrainer, "compile_evaluation")
    append_metrics = directory.RunDirectory.append_metrics

    def first_metrics(self, iteration, *args, **kwargs):
        if iteration == 0:
            mark("first iteration's metrics recorded")
        return append_metrics(self, iteration, *args, **kwargs)
    directory.RunDirectory.append_metrics = first_metrics

    command, *rest = sys.argv[1:] or ["eval"]
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


if __name__ == "__main__":
    main()
