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

import jax

from envcoder.runs.memory import memory_suspects


EXIT_STATUS = 3
"""The exit status of a run the watchdog ended."""


MAX_RESTARTS = 12
"""Restarts of one command (`ENVCODER_RESTARTS` counts them across the process images): past it, the watchdog ends
the run, whatever else hangs. Finding which of 100 candidates hung by halves takes 7 (`bisect`)."""


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
              command: Sequence[str] | None, evaluating: bool = False, suspects: Sequence[str] | None = None) -> None:
    """A hung iteration (`evaluating`: the final evaluation): restart the run from its last checkpoint without the
    candidate that hung, recorded in `run_dir`'s `hung.json` (`done`: the iterations read). The suspects are those
    given (`suspects`: for another fault, e.g. the device's memory running out), else the current `candidates` with
    a `lax.while_loop` (`loop_candidates`), or where none has, every candidate, less those `left_out` already; one
    is left out at once, of several the one is found by halves (`bisect`; where the fault came back while halving,
    it is among the half that stayed in). Returns where nothing can be done (`command` None: a library call; fewer
    than two of the run's `total` candidates left; no suspect)."""
    if command is None:
        return
    entries = run_dir.read_hung()
    if entries and "bisecting" in entries[-1]:  # it hung again with half the suspects out: among the others
        open_entry = entries[-1]
        kept = [n for n in open_entry["bisecting"]["suspects"] if n not in open_entry["candidates"]]
        bisect(run_dir, kept, entries[:-1], open_entry, command)
        return
    if total - len(left_out) < 2:  # nothing would be left to train
        return
    loops = [n for n in loop_candidates(candidates) if n not in left_out]
    if suspects is not None:
        suspects, how = [n for n in suspects if n not in left_out], "found by training half of the suspects at a time"
    elif loops:
        suspects, how = loops, "found among the candidates with a lax.while_loop by training half of them at a time"
    else:
        suspects = [c.name for c in candidates if c.functions and c.name not in left_out]
        how = "no lax.while_loop explains it: found by training half of the candidates at a time"
    bisect(run_dir, suspects, entries, {"after_iteration": done, "reason": message, "bisecting": {
        "suspects": suspects, "evaluating": evaluating, "how": how}}, command)


def bisect(run_dir, suspects: list[str], entries: list[dict], hang: dict, command: Sequence[str] | None) -> None:
    """Narrow down which of `suspects` hung (`hang`: the entry of the hang, `after_iteration`, `reason` and the
    search's `bisecting`) with the run's earlier `entries` of `hung.json` kept: one suspect is left out for good;
    of more, the first half is left out for now (an entry with `bisecting`) and the run restarts from its last
    checkpoint (which it does not overwrite while halving: `TrainingDriver.checkpoint`). If it gets past the hang, the
    culprit was in that half (`bisect` again with it: `hang_passed`); if it hangs again, in the other (`leave_out`).
    About log2 of the suspects restarts (`MAX_RESTARTS`); none where there is no suspect."""
    if not suspects:
        return
    from envcoder.runs.directory import write_json

    searching = hang["bisecting"]
    if len(suspects) == 1:
        how = "" if len(searching["suspects"]) == 1 else f" ({searching['how']})"
        write_json(run_dir.path / "hung.json", entries + [{"candidates": suspects,
                                                           "after_iteration": hang["after_iteration"],
                                                           "reason": hang["reason"] + how}])
        restart(f"{hang['reason']}; leaving out {suspects[0]} and going on from the last checkpoint", command)
        return
    half = suspects[:len(suspects) // 2]
    write_json(run_dir.path / "hung.json", entries + [{**hang, "candidates": half,
                                                       "bisecting": {**searching, "suspects": suspects}}])
    restart(f"{hang['reason']}; {len(suspects)} candidates could be the cause: training again from the last "
            f"checkpoint without {', '.join(half)}, to find the one", command)


def past_fault(hang: dict, done: int, iterations: int, stopped: bool = False, evaluated: bool = False) -> bool:
    """Whether a run halving for `hang` (`hung.json`'s open entry) got past it: two iterations on (an iteration's
    metrics are read one late), or the end of training (`stopped`, or all `iterations` `done`), or the evaluation
    (`evaluated`) where that is what failed."""
    if hang["bisecting"]["evaluating"] != evaluated:
        return False
    return evaluated or stopped or done >= min(hang["after_iteration"] + 2, iterations)


def hang_passed(run_dir, command: Sequence[str] | None) -> None:
    """The run got past the hang (or other fault) that `hung.json`'s open search (`bisect`) is halving for, with its
    half left out: the culprit is in that half. Restarts to halve it; where it cannot restart (`MAX_RESTARTS`), that
    half stays left out for good and this returns (the run goes on)."""
    entries = run_dir.read_hung()
    bisect(run_dir, entries[-1]["candidates"], entries[:-1], entries[-1], command)
    from envcoder.runs.directory import write_json

    last = {k: v for k, v in entries[-1].items() if k != "bisecting"}
    write_json(run_dir.path / "hung.json", entries[:-1] + [last])


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


def describe_compile(what: str, limit_s: float, candidates: Sequence, now_tracing: Callable[[], tuple | None],
                     setting: str) -> Callable[[], str]:
    """The message for a compile (trace + XLA) that ran past `limit_s`: the candidates whose code was being traced
    (`now_tracing()`: the learner's plan's `GroupPlan.now_tracing`), or, when the trace was done, the candidates
    whose code the compiled program holds."""
    def describe() -> str:
        tracing = now_tracing()
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


class RunWatch:
    """The watchdog of one training run (`envcoder.runs.driver.TrainingDriver`): what the run does now (`stage`, named
    by an error's message), the limits of its compiles and iterations, and, where a hang or a fault is one
    candidate's, a restart without it. `state`: the driver's progress (`DriverState`, its `done` read when it
    acts); `restart`: the command that continues the run (None: a library call)."""

    def __init__(self, job, run_dir, state, restart: Sequence[str] | None, resume: bool):
        self.job, self.settings, self.run_dir, self.state, self.restart = job, job.settings, run_dir, state, restart
        hung = run_dir.read_hung() if resume else []
        self.halving = hung[-1] if hung and "bisecting" in hung[-1] else None
        """The hang whose candidate this run is finding by halves (`bisect`): checkpoints wait till then."""
        self.stage = "starting"
        self.learner = None
        """The current rung's learner: its candidates are the suspects."""

    @property
    def candidates(self) -> list:
        return list({g.candidate.name: g.candidate for g in self.learner.groups}.values())

    def compiling(self, what: str):
        """A compile: past `--compile-timeout` the process ends with a message naming what it traced..."""
        self.stage = what
        limit = self.settings.compile_timeout_s
        return guard(limit, describe_compile(what, limit, self.candidates, lambda: self.learner.plan.now_tracing(),
                                             "--compile-timeout"))

    def running(self, what: str):
        """... a device step: past `--iteration-timeout`, an `eval` run whose candidate loops for ever goes on
        without it (`leave_out`)."""
        self.stage = what
        limit = self.settings.iteration_timeout_s
        return guard(limit, describe_run(what, limit, self.candidates, "--iteration-timeout"), on_hang=self._leave_out)

    def _leave_out(self, message: str, suspects: Sequence[str] | None = None) -> None:
        if jax.process_count() == 1 and self.run_dir.writes:
            leave_out(self.run_dir, self.candidates, self.job.left_out, len(self.job.candidates), self.state.done,
                      message, self.restart, evaluating=self.stage == "the final evaluation", suspects=suspects)

    def out_of_memory(self, message: str) -> None:
        """The device ran out of memory (`message`: why) while training or evaluating: where candidates need a share
        of it at the run's size (`memory_suspects`), or a search for what failed is open, the one is found by halves
        across restarts as for a hang (`leave_out`; no return then). Else the run's size is the cause: returns."""
        if not self.stage.startswith(("compiling the training", "dispatching training", "training iteration",
                                      "the final evaluation")):
            return
        heavy = memory_suspects(self.candidates, len(self.settings.seeds), self.learner.envs_per_candidate)
        if heavy or self.halving is not None:
            self._leave_out(message, suspects=heavy)

    def past_hang(self, stopped: bool = False, evaluated: bool = False) -> None:
        """Where this run, halving for what hung (`halving`), got past it (`past_fault`), the culprit is in the half
        left out: `hang_passed` restarts to halve that."""
        if self.halving is not None and past_fault(self.halving, self.state.done, self.job.iterations, stopped,
                                                   evaluated):
            if jax.process_count() == 1 and self.run_dir.writes:
                hang_passed(self.run_dir, self.restart)
            self.halving = None


__all__ = ["guard", "describe_compile", "describe_run", "leave_out", "bisect", "past_fault", "hang_passed",
           "loop_candidates", "restart", "RunWatch", "EXIT_STATUS"]
