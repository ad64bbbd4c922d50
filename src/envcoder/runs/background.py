"""Writing a run's records (metrics rows, TensorBoard and W&B events, checkpoint files) on a background thread,
so that the training loop only dispatches iterations and reads their metrics, and the device never waits for
the disk.

Jobs run one at a time in the order they were submitted, so the files are written exactly as a synchronous
loop would write them: a checkpoint's `progress.json` never lands before the metrics rows of the iterations
it covers. The first job that fails stops the thread (later jobs are dropped, as if the process had ended
there) and its exception is raised in the submitting thread by the next `submit` or by `close`.
"""

from __future__ import annotations

import contextlib
import datetime
import queue
import signal
import sys
import threading
import time
from typing import Callable

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from envcoder.text import shown

_STOP = object()


class BackgroundWriter:
    """A FIFO of record-writing jobs served by one thread; `submit` blocks once `max_pending` jobs wait, so a
    loop that produces records faster than the disk takes them slows down instead of filling the memory."""

    def __init__(self, max_pending: int = 8):
        self._jobs: queue.Queue = queue.Queue(max_pending)
        self._error: BaseException | None = None
        self._failed = False
        self._thread = threading.Thread(target=self._serve, name="envcoder-records", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            if not self._failed:
                try:
                    job()
                except BaseException as err:  # noqa: BLE001 - handed to the submitting thread
                    self._error, self._failed = err, True

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def submit(self, job: Callable[[], object]) -> None:
        """Queue `job` (a callable without arguments); raises the error of an earlier job, if one failed."""
        self._raise_error()
        self._jobs.put(job)

    def close(self) -> None:
        """Wait until every submitted job has run; raises the first error among them."""
        if self._thread.is_alive():
            self._jobs.put(_STOP)
            self._thread.join()
        self._raise_error()


GIL_SWITCH_INTERVAL_S = 2e-4
"""Python's thread switch interval while training. While the device trains, other threads run Python: the
evaluation's tracing (seconds, cold) and the background writer. Python hands the GIL over every 5 ms by default, and
the training loop waits for it at each of its many short calls, so the device starved for ~1 s per iteration while
the evaluation traced (cold: wall/device 0.82 against 0.97 with 0.2 ms; docs/benchmarks/throughput.md)."""


@contextlib.contextmanager
def training_progress(console: Console, iterations: int, completed: int):
    """`(progress, bar)`: the training's progress bar (its fields `rate` and `best`), with Python's thread switch
    interval at `GIL_SWITCH_INTERVAL_S` while it shows."""
    wide = console.width >= 100  # on a narrower terminal the bar and the times give way to the numbers and names
    columns = (TextColumn("[progress.description]{task.description}"), *([BarColumn()] if wide else []),
               MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
               *([TimeElapsedColumn(), TimeRemainingColumn()] if wide else []), TextColumn("{task.fields[best]}"))
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    try:
        if not console.is_terminal:  # a log file, `| tee`, a batch job: lines as training goes, not one at the end
            progress = LoggedProgress(console, iterations, completed)
            yield progress, None
            progress.finish()
            return
        with Progress(*columns, console=console, transient=False) as progress:
            yield progress, progress.add_task("training", total=iterations, completed=completed, rate="compiling…",
                                              best="")
    finally:
        sys.setswitchinterval(switch_interval)


def steps_rate(per_s: float) -> str:
    """Environment steps a second as the progress line shows them: `850 steps/s`, `83k steps/s`, `2.4M steps/s`."""
    if per_s >= 1e6:
        return f"{per_s / 1e6:.1f}M steps/s"
    return f"{per_s / 1e3:,.0f}k steps/s" if per_s >= 1e4 else f"{per_s:,.0f} steps/s"


def progress_text(state, labels: list[str], higher_is_better: bool) -> str:
    """The progress bar's text: the group whose training episodes have the best fitness so far (`leads in training`:
    the ranking at the end is the final evaluation's, which may order them otherwise), the solved, diverged and reset
    counts (of the driver's `DriverState`, for its groups `labels`)."""
    best_of = np.nanargmax if higher_is_better else np.nanargmin
    best = "" if np.all(np.isnan(state.last_fitness)) else (
        f"leads in training: {shown(labels[int(best_of(state.last_fitness))].split('#')[0])} "
        f"{state.last_fitness[best_of(state.last_fitness)]:.3f}")
    if state.reported_solved:
        best += f" | {len(state.reported_solved)}/{len(labels)} solved"
    if state.reported_divergence or state.physics_resets:
        best += f" | {len(state.reported_divergence)} diverged, {state.physics_resets} physics resets"
    return best


class LoggedProgress:
    """The training's progress where the console is no terminal (Rich's bar then shows only once, at the end): a
    line at most every `every_s` seconds and at the end, as `training 12/40 | 83k steps/s | 0:00:15 | leads in
    training: X 0.520`.
    Takes the calls the driver makes of a `rich.progress.Progress`."""

    every_s = 10.0

    def __init__(self, console: Console, total: int, completed: int):
        self.console, self.total, self.completed = console, total, completed
        self.fields = {"rate": "compiling…", "best": ""}
        self.start = self.last = time.monotonic()
        self.printed = completed

    def update(self, task=None, advance: int = 0, total: int | None = None, **fields) -> None:
        self.completed += advance
        self.total = self.total if total is None else total
        self.fields.update(fields)
        now = time.monotonic()
        if advance and (now - self.last >= self.every_s or self.completed == 1 and self.printed == 0):
            self._line(now)

    def finish(self) -> None:
        if self.completed != self.printed:
            self._line(time.monotonic())

    def _line(self, now: float) -> None:
        elapsed = datetime.timedelta(seconds=int(now - self.start))
        parts = [f"training {self.completed}/{self.total}", self.fields["rate"], str(elapsed), self.fields["best"]]
        self.console.print(" | ".join(p for p in parts if p), highlight=False, soft_wrap=True)
        self.last, self.printed = now, self.completed


class DeferredInterrupt:
    """While training: the first Ctrl-C asks for a checkpoint after the iteration under way (`requested`), where
    `worth_it()` says one would keep work that the last checkpoint lacks; else, and at a second Ctrl-C, the run
    stops at once (KeyboardInterrupt, as without this). A KeyboardInterrupt that Python swallows (raised inside a
    garbage collector's callback, JAX's among them: "Exception ignored in …") is raised again at the next `check`.
    Only in the main thread, and only where Ctrl-C raises KeyboardInterrupt (a background job that ignores SIGINT
    keeps ignoring it)."""

    def __init__(self, worth_it: Callable[[], bool]):
        self.worth_it, self.requested, self.stopping, self._previous = worth_it, False, False, None

    def _handle(self, signum, frame):
        if self.requested or not self.worth_it():
            self.stopping = True
            raise KeyboardInterrupt
        self.requested = True

    def check(self) -> None:
        """Where the run may stop: raise the KeyboardInterrupt of a Ctrl-C that was swallowed."""
        if self.stopping:
            raise KeyboardInterrupt

    def __enter__(self) -> "DeferredInterrupt":
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
