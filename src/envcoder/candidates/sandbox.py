"""Validating untrusted candidate code in separate processes, with a wall-clock timeout and memory/CPU limits.

Every path that runs candidate code (`envcoder eval`, `auto`, `--resume`, `play`) validates it here first:
the parent (`SandboxValidator`) starts worker processes (`python -m envcoder.candidates.sandbox`: CPU-only JAX,
none of the parent's credentials) that load the task, roll it out briefly under the default shaping
(`rollout_states`), and then, one file at a time, load the code in the restricted namespace and trace,
compile and run every shaping function of every sweep variant on those states, checking shapes, dtypes and
finiteness (`validate_candidate`). A candidate that hangs (a Python loop that never ends or unrolls too far,
or a `lax.while_loop` that never ends inside XLA, which no signal reaches) is killed with its worker at the
timeout; one that allocates past the memory limit kills only its worker. Either way the verdict names the
function and the step (tracing, compiling, running) and a fresh worker takes the remaining candidates.

Protocol: the parent writes one JSON line `{"task", "shaper_types"}`, the worker answers `{"ready": true}`;
then each `{"name", "path", "source", "cpu_seconds"}` line gets `{"phase": [variant, function, step]}` lines
as validation goes and one `{"name", "specs": {variant: spec}, "errors": {variant: reason}}` line at the
end. A candidate's own `print` goes to stderr, never into the protocol.
"""

from __future__ import annotations

import dataclasses
import hashlib
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
from typing import Mapping, Sequence

from envcoder.compile_cache import code_fingerprint, store_entry, verdict_cache_dir
from envcoder.candidates.validate import CandidateSpec


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the sandbox found for one candidate file (and each of its sweep variants)."""

    name: str
    specs: Mapping[str, CandidateSpec] = dataclasses.field(default_factory=dict)
    """What validation learned, per variant that passed (the file's name when it sweeps nothing)."""
    errors: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Why, per variant that failed (or for the file, when it could not be loaded)."""

    @property
    def ok(self) -> bool:
        return bool(self.specs) and not self.errors

    @property
    def error(self) -> str | None:
        return next(iter(self.errors.values()), None)


class SandboxError(RuntimeError):
    """The sandbox itself could not start (not a candidate's fault)."""


_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def _worker_env() -> dict:
    """The worker's environment: CPU-only JAX (with the parent's compilation cache), and none of the parent's
    credentials."""
    import jax

    env = {k: v for k, v in os.environ.items() if not any(m in k.upper() for m in _SECRET_MARKERS)}
    # MUJOCO_GL=disable: the worker never renders, and `import mujoco` fails outright where MUJOCO_GL names an OpenGL
    # library that is not installed (`envcoder play` sets it for its process).
    env.update(JAX_PLATFORMS="cpu", XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONUNBUFFERED="1", MALLOC_ARENA_MAX="2",
               MUJOCO_GL="disable")
    env["ENVCODER_CACHE_DIR"] = jax.config.jax_compilation_cache_dir or ""
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
        self.proc = subprocess.Popen([sys.executable, "-m", "envcoder.candidates.sandbox", str(memory_bytes),
                                      str(cpu_seconds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, env=_worker_env(), start_new_session=True)
        self._buffer = b""
        self.phase: list | None = None
        """The last `[variant, function, step]` the worker reported for the candidate it is checking."""
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
        """The next protocol line other than a phase report, or None when the worker died or `timeout_s` passed
        without one (the clock restarts with each step the worker reports)."""
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._selector.select(remaining):
                    return None
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    return None  # the worker exited
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            if "phase" not in message:
                return message
            deadline = time.monotonic() + timeout_s
            self.phase = message["phase"]

    def check(self, name: str, path: str, source: str, timeout_s: float, cpu_seconds: int) -> dict | None:
        self.phase = None
        try:
            self._send({"name": name, "path": path, "source": source, "cpu_seconds": cpu_seconds})
        except (BrokenPipeError, OSError):
            return None
        return self._receive(timeout_s)

    def where(self) -> str:
        """Where the candidate being checked was when it hung or died, e.g. ' in compute_reward() while running it'."""
        if self.phase is None:
            return " while its module-level code ran"
        variant, function, step = self.phase
        return f" in {function}() while {step} it" + (f" (variant {variant})" if "[" in variant else "")

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

    def hung_because(self, timeout_s: float) -> str:
        step = self.phase[2] if self.phase else None
        cause = {"tracing": "a Python loop that never ends, or one unrolled too far?",
                 "running": "a lax.while_loop that never ends?"}.get(step, "an endless loop?")
        return f"took longer than {timeout_s:g} s ({cause})"


class SandboxValidator:
    """Validate candidate sources in worker processes; the verdicts keep the candidates' order.

    Workers start when a source needs checking and stay up between calls (their start, importing JAX and
    rolling out the task, is the slow part) until `close()`; one is replaced only after a candidate hung or
    killed it. Use as a context manager. A verdict that passed is kept, in memory and, while envcoder's caches
    are on (`envcoder.compile_cache`), on disk: the same source under the same name, task, limits and envcoder
    is not checked again, by this validator or a later run's.
    """

    def __init__(self, task: str, shaper_types: Sequence[str], timeout_s: float = 120.0, memory_gib: float = 4.0,
                 workers: int = 1, startup_timeout_s: float = 600.0):
        self.task, self.shaper_types = task, tuple(shaper_types)
        self.timeout_s, self.memory_bytes = timeout_s, int(memory_gib * 2**30)
        self.workers, self.startup_timeout_s = max(1, workers), startup_timeout_s
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        self._passed: dict[tuple[str, str], Verdict] = {}

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

    def validate(self, drafts: Sequence[tuple[str, str] | tuple[str, str, str]]) -> list[Verdict]:
        """`drafts`: `(name, source)` or `(name, source, path)` (the file named in messages; default `name.py`; None:
        the task's own shaping, `envcoder.candidates.task_default_candidate`, whatever the source).
        Raises `SandboxError` only when no worker can start. A verdict that passed is remembered (see the
        class): `envcoder auto` evaluates the drafts it validated, and a rerun of a job skips the sandbox."""
        todo: queue.Queue = queue.Queue()
        verdicts: list[Verdict | None] = []
        for i, (name, source, *path) in enumerate(drafts):
            verdicts.append(self._passed.get((name, source)) or self._stored(name, source))
            if verdicts[i] is None:
                todo.put((i, name, source, path[0] if path else f"{name}.py"))
        errors: list[BaseException] = []

        def serve():
            worker = None
            try:
                while True:
                    try:
                        i, name, source, path = todo.get_nowait()
                    except queue.Empty:
                        return
                    worker = worker or self._worker()
                    reply = worker.check(name, path, source, self.timeout_s, self.cpu_seconds)
                    if reply is None:  # hung or died: this candidate's fault; the next one gets a new worker
                        reason = (worker.hung_because(self.timeout_s) if worker.proc.poll() is None
                                  else worker.died_because())
                        variant = worker.phase[0] if worker.phase else name
                        verdicts[i] = Verdict(name, errors={variant: f"{path}{worker.where()}: {reason}"})
                        worker.kill()
                        worker = None
                    else:
                        verdicts[i] = Verdict(reply["name"], {v: CandidateSpec(
                            s["obs_dim"], s["action_dim"], tuple(s["reward_components"]), s["critic_obs_dim"],
                            s.get("constants_as_data", True))
                            for v, s in reply["specs"].items()}, reply["errors"])
                        if verdicts[i].ok:
                            self._passed[(name, source)] = verdicts[i]
                            self._store(name, source, reply["specs"])
            except BaseException as err:  # noqa: BLE001 - reported to the caller below
                errors.append(err)
            finally:
                if worker is not None:
                    self._idle.put(worker)

        threads = [threading.Thread(target=serve, daemon=True) for _ in range(min(self.workers, todo.qsize()))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return [v for v in verdicts if v is not None]

    def _verdict_file(self, name: str, source: str) -> Path | None:
        folder = verdict_cache_dir()
        if folder is None:
            return None
        key = repr((code_fingerprint(), self.task, self.shaper_types, self.timeout_s, self.memory_bytes, name,
                    source))
        return folder / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.json"

    def _stored(self, name: str, source: str) -> Verdict | None:
        """A passed verdict kept on disk by an earlier run, or None (none, or unreadable: checked anew)."""
        path = self._verdict_file(name, source)
        try:
            specs = json.loads(path.read_text()) if path is not None else None
            verdict = Verdict(name, {v: CandidateSpec(s["obs_dim"], s["action_dim"], tuple(s["reward_components"]),
                                                      s["critic_obs_dim"], s.get("constants_as_data", True))
                                     for v, s in specs.items()})
        except Exception:  # noqa: BLE001 - a missing or damaged entry is a cache miss
            return None
        if verdict.ok:
            self._passed[(name, source)] = verdict
            return verdict
        return None

    def _store(self, name: str, source: str, specs: dict) -> None:
        path = self._verdict_file(name, source)
        if path is not None:
            store_entry(path, json.dumps(specs).encode())

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
        from envcoder.compile_cache import enable_compilation_cache
        from envcoder.candidates import CandidateError, expand_sweeps, load_candidate, task_default_candidate
        from envcoder.candidates.validate import rollout_states
        from envcoder.sim import Simulator
        from envcoder.tasks import get_task

        enable_compilation_cache()
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
        name, path = request["name"], request["path"]
        used = resource.getrusage(resource.RUSAGE_SELF)
        used = int(used.ru_utime + used.ru_stime)
        resource.setrlimit(resource.RLIMIT_CPU, (used + request["cpu_seconds"], resource.RLIM_INFINITY))
        outcomes = []
        for lift in (True, False):  # its float constants as data; else (one needed as a Python number) literals
            specs, errors = {}, {}
            try:
                variants = [task_default_candidate(task, shaper_types)] if path is None else expand_sweeps(
                    [load_candidate(Path(path), shaper_types, name=name, source=request["source"], lift=lift)])
            except BaseException as err:  # noqa: BLE001 - a CandidateError, or whatever else the file's code raised
                errors[name] = str(err) if isinstance(err, CandidateError) else f"{path}: {type(err).__name__}: {err}"
                variants = []
            for candidate in variants:
                _validate(task, simulator, states, candidate, path, lift, reply, specs, errors)
            outcomes.append((len(errors), not lift, specs, errors))
            if not errors or not any(c.function_params for c in variants):
                break
        _, _, specs, errors = min(outcomes, key=lambda o: o[:2])  # fewer failures; as data where equal
        reply({"name": name, "specs": specs, "errors": errors})


def _validate(task, simulator, states, candidate, path, lift: bool, reply, specs: dict, errors: dict) -> None:
    """One variant validated in the worker: its sizes into `specs`, or its reason into `errors`; `reply` reports the
    phases (a hang names its function)."""
    from envcoder.candidates import CandidateError
    from envcoder.candidates.validate import validate_candidate

    def on_phase(function, step):
        reply({"phase": [candidate.name, function, step]})
    try:
        spec = validate_candidate(task, simulator, candidate, states, on_phase)
        specs[candidate.name] = {"obs_dim": spec.obs_dim, "action_dim": spec.action_dim,
                                 "reward_components": list(spec.reward_components),
                                 "critic_obs_dim": spec.critic_obs_dim, "constants_as_data": lift}
    except CandidateError as err:
        errors[candidate.name] = str(err)
    except BaseException as err:  # noqa: BLE001 - MemoryError, RecursionError, ...: the candidate's fault
        errors[candidate.name] = f"{path}: {type(err).__name__}: {err}"


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))
