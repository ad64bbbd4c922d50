"""A watchdog for the training process: a step that runs past its limit (a compile that never finishes, an
iteration that never returns) ends the process with one clear line naming the candidates it suspects (`guard`), or,
for an `eval` run whose iteration hangs in a candidate's loop, restarts it from its last checkpoint without those
candidates (`restart`; the driver records why in `hung.json` and the run's failures).

Nothing can interrupt XLA from inside the process (a `lax.while_loop` that never ends keeps the device busy
for ever, and a trace stuck in a candidate's Python loop holds the main thread), so the watchdog thread
writes the message and exits the process. The run directory keeps its records and last checkpoint (each file
is written atomically).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Callable, Sequence

from envcoder.env import grouping

EXIT_STATUS = 3
"""The exit status of a run the watchdog ended."""


MAX_RESTARTS = 8
"""Restarts of one command (`ENVCODER_RESTARTS` counts them across the process images): past it, the watchdog ends
the run, whatever else hangs."""


def restart(message: str, command: Sequence[str] | None) -> None:
    """Replace this process with `envcoder COMMAND` (the arguments that continue its run, `eval --resume RUN`; XLA
    cannot be interrupted from inside it): the device's hung program ends with the process image. Returns only where
    there is nothing to restart (`command` None: a library call)."""
    restarts = int(os.environ.get("ENVCODER_RESTARTS", "0"))
    if command is None or restarts >= MAX_RESTARTS:
        return
    os.environ["ENVCODER_RESTARTS"] = str(restarts + 1)
    sys.stderr.write(f"envcoder: {message}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-c", "from envcoder.cli import run; run()", *command])


def leave_out(run_dir, candidates: Sequence, left_out, total: int, done: int, message: str,
              command: Sequence[str] | None) -> None:
    """A hung iteration whose suspects (`loop_candidates` of the current `candidates`, less those `left_out` already)
    are not all of the run's `total` candidates: record them in `run_dir`'s `hung.json` (`done`: the iterations read)
    and restart the run from its last checkpoint without them (`restart` with `command`). Returns where there is
    nothing to do."""
    suspects = [n for n in loop_candidates(candidates) if n not in left_out]
    if not suspects or len(suspects) + len(left_out) >= total or command is None:
        return
    from envcoder.runs.directory import write_json

    write_json(run_dir.path / "hung.json", run_dir.read_hung() + [
        {"candidates": suspects, "after_iteration": done, "reason": message}])
    restart(f"{message}; leaving out {', '.join(suspects)} and going on from the last checkpoint", command)


@contextlib.contextmanager
def guard(limit_s: float, describe: Callable[[], str], prefix: str = "envcoder",
          on_hang: Callable[[str], None] | None = None):
    """Run the block under a watchdog: when it is still running after `limit_s`, `describe()` gives the message;
    `on_hang(message)` may go on without what hung (it does not return then); else the message is written to stderr
    as `<prefix>: error: <message>` and the process exits with `EXIT_STATUS`."""
    done = threading.Event()

    def watch():
        if done.wait(limit_s):
            return
        try:
            message = describe()
        except Exception as err:  # noqa: BLE001 - the exit must happen whatever the description does
            message = f"a step ran past its time limit of {limit_s:g} s ({type(err).__name__} while describing it)"
        if on_hang is not None:
            try:
                on_hang(message)
            except Exception as err:  # noqa: BLE001 - the exit below must happen
                message += f" (going on without it failed: {type(err).__name__}: {err})"
        sys.stderr.write(f"{prefix}: error: {message}\n")
        sys.stderr.flush()
        os._exit(EXIT_STATUS)

    threading.Thread(target=watch, name="envcoder-watchdog", daemon=True).start()
    try:
        yield
    finally:
        done.set()


def describe_compile(what: str, limit_s: float, candidates: Sequence, setting: str) -> Callable[[], str]:
    """The message for a compile (trace + XLA) that ran past `limit_s`: the candidates whose code was being
    traced, or, when the trace was done, the candidates whose code the compiled program holds."""
    def describe() -> str:
        tracing = grouping.now_tracing()
        if tracing is not None:
            api, names = tracing
            return (f"{what} took longer than {limit_s:g} s while tracing {api}() of {', '.join(names)} (a Python loop "
                    f"that never ends, or one unrolled too far?); leave it out and run again, or raise {setting}")
        own = [c.name for c in candidates if c.functions]
        return (f"{what} took longer than {limit_s:g} s in XLA's compiler, after tracing; the program holds the "
                f"code of {', '.join(own) or 'no candidate (only task defaults)'}; raise {setting} for a very large "
                "run, or leave candidates out to find the one")
    return describe


def loop_candidates(candidates: Sequence) -> list[str]:
    """The candidates whose programs have a loop of data-dependent length (a `lax.while_loop`), the only code of a
    candidate that can run for ever on the device (their source, for candidates not handed over as programs)."""
    def loops(c) -> bool:
        programs = [f for f in c.functions.values() if hasattr(f, "uses_loops")]
        return any(f.uses_loops() for f in programs) if programs else "while_loop" in c.source
    return [c.name for c in candidates if loops(c)]


def describe_run(what: str, limit_s: float, candidates: Sequence, setting: str) -> Callable[[], str]:
    """The message for a device step (an iteration, the evaluation) that ran past `limit_s`."""
    def describe() -> str:
        loops = loop_candidates(candidates)
        suspects = (f"the candidates with a lax.while_loop, which can run for ever on the device: {', '.join(loops)}"
                    if loops else "no candidate uses lax.while_loop (a device or driver fault?)")
        return f"{what} did not finish in {limit_s:g} s; {suspects}; leave them out and run again, or raise {setting}"
    return describe


__all__ = ["guard", "describe_compile", "describe_run", "leave_out", "loop_candidates", "restart", "EXIT_STATUS"]
