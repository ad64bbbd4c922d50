"""Validating untrusted candidate code in separate processes, with a wall-clock timeout and memory/CPU limits.

The parent (`SandboxValidator`) starts worker processes (`python -m envcoder.search.sandbox`) that load the
task on the CPU, roll it out briefly under the default shaping (`rollout_states`), and then, one candidate
at a time, load the code in the restricted namespace and trace, compile and run every shaping function on
those states, checking shapes, dtypes and finiteness (`validate_candidate`). A candidate that hangs (a Python
`while True`, or a `lax.while_loop` that never ends inside XLA, which no signal reaches) is killed with its
worker at the timeout; one that allocates past the memory limit kills only its worker. Either way the
verdict names the reason, and a fresh worker takes the remaining candidates.

Protocol: the parent writes one JSON line `{"task", "shaper_types"}`, the worker answers `{"ready": true}`;
then each `{"name", "source", "cpu_seconds"}` line gets one `{"name", "ok", "error", "obs_dim", "action_dim",
"reward_components"}` line. A candidate's own `print` goes to stderr, never into the protocol.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the sandbox found for one candidate."""

    name: str
    ok: bool
    error: str | None = None
    obs_dim: int | None = None
    action_dim: int | None = None
    reward_components: tuple[str, ...] = ()


class SandboxError(RuntimeError):
    """The sandbox itself could not start (not a candidate's fault)."""


_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def _worker_env() -> dict:
    """The worker's environment: CPU-only JAX, and none of the parent's credentials."""
    env = {k: v for k, v in os.environ.items() if not any(m in k.upper() for m in _SECRET_MARKERS)}
    env.update(JAX_PLATFORMS="cpu", XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONUNBUFFERED="1", MALLOC_ARENA_MAX="2")
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else src
    return env


class _Worker:
    """One worker process, talked to line by line with timeouts."""

    def __init__(self, task: str, shaper_types: Sequence[str], memory_bytes: int, cpu_seconds: int,
                 startup_timeout_s: float):
        # The worker sets its own limits first thing (no preexec_fn: forking a multithreaded JAX process
        # to run Python code in the child can deadlock).
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "envcoder.search.sandbox", str(memory_bytes),
                                      str(cpu_seconds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=_worker_env(), start_new_session=True)
        self._buffer = b""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.proc.stdout, selectors.EVENT_READ)
        self._send({"task": task, "shaper_types": list(shaper_types)})
        reply = self._receive(startup_timeout_s)
        if reply is None or not reply.get("ready"):
            detail = reply.get("error") if reply else self.stderr_tail()
            self.kill()
            raise SandboxError(f"the validation worker did not start: {detail}")

    def _send(self, message: dict) -> None:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def _receive(self, timeout_s: float) -> dict | None:
        """The next protocol line, or None when the worker died or `timeout_s` passed."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._selector.select(remaining):
                return None
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                return None  # the worker exited
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def check(self, name: str, source: str, timeout_s: float, cpu_seconds: int) -> dict | None:
        try:
            self._send({"name": name, "source": source, "cpu_seconds": cpu_seconds})
        except (BrokenPipeError, OSError):
            return None
        return self._receive(timeout_s)

    def stderr_tail(self, lines: int = 3) -> str:
        self.stderr.seek(0)
        text = self.stderr.read().decode(errors="replace").strip().splitlines()
        text = [t for t in text if "warp" not in t]  # MJX's notice that the optional warp backend is absent
        return " | ".join(text[-lines:]) or "no output"

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
        self.proc.wait()
        self._selector.close()
        self.stderr.close()

    def died_because(self) -> str:
        """Why the worker died while checking a candidate, from its exit status and last messages."""
        self.proc.wait()
        code = self.proc.returncode
        if code == -signal.SIGXCPU:
            return "it used more than its CPU-time limit"
        reason = f"the validation process died (exit {code}): {self.stderr_tail()}"
        if "MemoryError" in reason or "RESOURCE_EXHAUSTED" in reason or code == -signal.SIGKILL:
            reason += " (over the memory limit?)"
        return reason


class SandboxValidator:
    """Validate candidate sources in worker processes; the verdicts keep the candidates' order.

    Workers stay up between calls (their start, importing JAX and rolling out the task, is the slow part)
    until `close()`; one is replaced only after a candidate hung or killed it. Use as a context manager.
    """

    def __init__(self, task: str, shaper_types: Sequence[str], timeout_s: float = 120.0, memory_gib: float = 4.0,
                 workers: int = 1, startup_timeout_s: float = 600.0):
        self.task, self.shaper_types = task, tuple(shaper_types)
        self.timeout_s, self.memory_bytes = timeout_s, int(memory_gib * 2**30)
        self.workers, self.startup_timeout_s = max(1, workers), startup_timeout_s
        self._idle: queue.SimpleQueue = queue.SimpleQueue()

    @property
    def cpu_seconds(self) -> int:
        """CPU time one candidate may use: its wall-clock timeout on every core XLA may keep busy."""
        return int(self.timeout_s * (os.cpu_count() or 1)) + 1

    def _worker(self) -> _Worker:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return _Worker(self.task, self.shaper_types, self.memory_bytes,
                           int(self.startup_timeout_s * (os.cpu_count() or 1)), self.startup_timeout_s)

    def validate(self, drafts: Sequence[tuple[str, str]]) -> list[Verdict]:
        """`drafts`: `(name, source)` pairs. Raises `SandboxError` only when no worker can start."""
        todo: queue.Queue = queue.Queue()
        for i, draft in enumerate(drafts):
            todo.put((i, *draft))
        verdicts: list[Verdict | None] = [None] * len(drafts)
        errors: list[BaseException] = []

        def serve():
            worker = None
            try:
                while True:
                    try:
                        i, name, source = todo.get_nowait()
                    except queue.Empty:
                        return
                    worker = worker or self._worker()
                    reply = worker.check(name, source, self.timeout_s, self.cpu_seconds)
                    if reply is None:  # hung or died: this candidate's fault; the next one gets a new worker
                        reason = (f"validation took longer than {self.timeout_s:g} s (an endless loop, or a "
                                  "lax.while_loop that never ends?)" if worker.proc.poll() is None
                                  else worker.died_because())
                        worker.kill()
                        worker = None
                        verdicts[i] = Verdict(name, False, f"{name}.py: {reason}")
                    else:
                        verdicts[i] = Verdict(reply["name"], reply["ok"], reply.get("error"), reply.get("obs_dim"),
                                              reply.get("action_dim"), tuple(reply.get("reward_components", ())))
            except BaseException as err:  # noqa: BLE001 - reported to the caller below
                errors.append(err)
            finally:
                if worker is not None:
                    self._idle.put(worker)

        threads = [threading.Thread(target=serve, daemon=True) for _ in range(min(self.workers, len(drafts)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return [v for v in verdicts if v is not None]

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().kill()
            except queue.Empty:
                return

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _serve(memory_bytes: int, cpu_seconds: int) -> None:
    """The worker's main loop (see the module docstring for the protocol)."""
    # RLIMIT_DATA counts the memory a process writes to (heap, anonymous maps), not the address space it
    # merely reserves: RLIMIT_AS would also count every thread's malloc arena and stack, and XLA's CPU
    # client, which starts a thread per core, fails to start under it on a many-core machine.
    resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, resource.RLIM_INFINITY))  # the start; then per candidate
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything printed, by us or a candidate, goes to stderr
    sys.stdout = sys.stderr

    def reply(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")

    header = json.loads(sys.stdin.readline())
    try:
        from envcoder.shaping.candidate import CandidateError, load_candidate
        from envcoder.shaping.validate import rollout_states, validate_candidate
        from envcoder.sim import Simulator
        from envcoder.tasks import get_task

        task = get_task(header["task"])
        simulator = Simulator(task.model_file, task.substeps)
        states = rollout_states(task, simulator)
    except Exception as err:  # noqa: BLE001 - reported to the parent
        reply({"ready": False, "error": f"{type(err).__name__}: {err}"})
        return
    reply({"ready": True})
    shaper_types = tuple(header["shaper_types"])
    for line in sys.stdin:
        request = json.loads(line)
        name = request["name"]
        used = resource.getrusage(resource.RUSAGE_SELF)
        used = int(used.ru_utime + used.ru_stime)
        resource.setrlimit(resource.RLIMIT_CPU, (used + request["cpu_seconds"], resource.RLIM_INFINITY))
        try:
            candidate = load_candidate(Path(f"{name}.py"), shaper_types, name=name, source=request["source"])
            spec = validate_candidate(task, simulator, candidate, states)
            reply({"name": name, "ok": True, "obs_dim": spec.obs_dim, "action_dim": spec.action_dim,
                   "reward_components": list(spec.reward_components)})
        except CandidateError as err:
            reply({"name": name, "ok": False, "error": str(err)})
        except BaseException as err:  # noqa: BLE001 - MemoryError, RecursionError, ...: the candidate's fault
            reply({"name": name, "ok": False, "error": f"{name}.py: {type(err).__name__}: {err}"})


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))
