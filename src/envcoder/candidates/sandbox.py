"""Untrusted candidate code runs here only: in jailed worker processes, with a wall-clock timeout and memory, CPU
and file-size limits, and what comes back to the training process is compiled programs, never code.

Every path that trains candidates (`envcoder eval`, `auto`, `--resume`, `play`) takes them from here: the parent
(`SandboxValidator`) starts worker processes (`python -m envcoder.candidates.worker`) in new user and network
namespaces with an environment of their own (no credentials, CPU-only JAX; `envcoder.candidates.jail`). A worker
imports what validation needs and forks a trusted first child that rolls the task out briefly under the default
shaping (`rollout_states`, kept on disk for later runs). Then each file is checked in a fresh child forked from the
worker, so that no file can change what the next one sees: the child locks itself in (Landlock: it reads only
Python, envcoder and the sample states, writes only its temporary folder, connects nowhere), sets its limits, reads
the file in the restricted namespace, traces, compiles and runs every shaping function of every sweep variant on
the sample states, checking shapes, dtypes and finiteness (`validate_candidate`), and exports each function as a
program with its sizes symbolic and its constants as inputs (`envcoder.candidates.programs`). A child that hangs
(a Python loop that never ends or unrolls too far, or a `lax.while_loop` that never ends inside XLA, which no
signal reaches) is killed at the timeout; one that allocates past the memory limit dies alone. Either way the
verdict names the function and the step (tracing, compiling, running, exporting).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import json
import os
import queue
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from envcoder.candidates.jail import unshare_command
from envcoder.compile_cache import code_fingerprint, store_entry, verdict_cache_dir

if TYPE_CHECKING:
    from envcoder.candidates.load import Candidate
    from envcoder.candidates.validate import CandidateSpec

@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the sandbox found for one candidate file (and each of its sweep variants)."""

    name: str
    specs: Mapping[str, "CandidateSpec"] = dataclasses.field(default_factory=dict)
    """What validation learned, per variant that passed (the file's name when it sweeps nothing)."""
    errors: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Why, per variant that failed (or for the file, when it could not be loaded)."""
    candidate: "Candidate | None" = None
    """The file as the training process uses it: its functions as the worker's programs
    (`envcoder.candidates.programs.Program`), before its sweep is expanded; None for the task's own shaping and
    for a file that failed."""

    @property
    def ok(self) -> bool:
        return bool(self.specs) and not self.errors

    @property
    def error(self) -> str | None:
        return next(iter(self.errors.values()), None)


class SandboxError(RuntimeError):
    """The sandbox itself could not start (not a candidate's fault)."""


_PASSED_ON = ("PYTHONPATH", "LANG", "LC_ALL", "TZ")
"""The parent's variables a worker gets (besides JAX's own settings): where Python finds its packages."""


def _worker_env(folder: str) -> dict:
    """The worker's environment: nothing of the parent's but where Python's packages are and JAX's settings (no
    credentials, whatever their names), CPU-only JAX, and its own folder as home."""
    env = {k: v for k, v in os.environ.items() if k in _PASSED_ON or (k.startswith("JAX_") and "KEY" not in k)}
    # MUJOCO_GL=disable: the worker never renders, and `import mujoco` fails outright where MUJOCO_GL names an OpenGL
    # library that is not installed (`envcoder play` sets it for its process).
    env.update(JAX_PLATFORMS="cpu", XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONUNBUFFERED="1", MALLOC_ARENA_MAX="2",
               MUJOCO_GL="disable", HOME=folder, TMPDIR=folder, PATH=os.defpath, PYTHONDONTWRITEBYTECODE="1")
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # the header names it; the candidates' children only read it
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else src
    return env


class _Worker:
    """One worker process (the zygote of the module docstring), talked to line by line with timeouts. It starts
    at once; `ready` waits for its start to end."""

    def __init__(self, task: str, shaper_types: Sequence[str], memory_bytes: int):
        self.key = (task.lower(), tuple(shaper_types), memory_bytes)
        self.folder = tempfile.mkdtemp(prefix="envcoder-jail-")
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([*unshare_command(), sys.executable, "-m", "envcoder.candidates.worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     env=_worker_env(self.folder), cwd=self.folder, start_new_session=True)
        # The header after the launch: the worker reads it after its imports, and what it names takes this process
        # a while the first time (the code's fingerprint initializes JAX's backend: a GPU's, in a training process).
        try:
            header = self._header(task, shaper_types, memory_bytes)
        except BaseException:
            self.proc.kill()
            raise
        self._buffer = b""
        self.phase: list | None = None
        """The last `[variant, function, step]` the child reported for the candidate it is checking."""
        self.child: int | None = None
        self.exit: int | None = None
        self.timed_out = False
        self._stderr_from = 0
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.proc.stdout, selectors.EVENT_READ)
        self._send(header)
        self._ready = False

    def _header(self, task: str, shaper_types: Sequence[str], memory_bytes: int) -> dict:
        """The protocol's first line (`envcoder.candidates.worker`): the task, the limits and where the caches are."""
        cache = verdict_cache_dir()
        states = (cache / f"states-{hashlib.sha256(repr((code_fingerprint(), task.lower())).encode()).hexdigest()[:32]}"
                  ".npz" if cache is not None else Path(self.folder) / "states.npz")
        import jax

        return {"task": task, "shaper_types": list(shaper_types), "folder": self.folder, "states_file": str(states),
                "cache_dir": jax.config.jax_compilation_cache_dir or "", "memory_bytes": memory_bytes}

    def ready(self, startup_timeout_s: float) -> None:
        """Wait until the worker has started; a `SandboxError` (the worker killed) if it could not."""
        if self._ready:
            return
        reply = self._receive(startup_timeout_s)
        while reply is not None and "exit" in reply:  # the warm-up child's end; "ready" follows
            reply = self._receive(startup_timeout_s)
        if reply is None or not reply.get("ready"):
            detail = (reply or {}).get("error") or self.stderr_tail()
            self.kill()
            raise SandboxError(f"the validation worker did not start: {detail}")
        self._ready = True

    def _send(self, message: dict) -> None:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def _receive(self, timeout_s: float) -> dict | None:
        """The next protocol line other than a phase or child report, or None when the worker died or `timeout_s`
        passed without one (the clock restarts with each step the child reports)."""
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._selector.select(remaining):
                    return None
                chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
                if not chunk:
                    return None  # the worker exited
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                continue  # not a protocol line (a child that wrote to the protocol pipe itself): ignored
            if "child" in message:
                self.child = message["child"]
            elif "phase" in message:
                deadline = time.monotonic() + timeout_s
                self.phase = message["phase"]
            else:
                return message

    def check(self, name: str, path: str | None, source: str, timeout_s: float, cpu_seconds: int,
              platform: str) -> dict | None:
        """The child's verdict on one file (its programs exported for `platform`), or None when it hung
        (`timed_out`) or died (`exit`)."""
        self.phase = self.child = self.exit = None
        self.timed_out = False
        self.stderr.seek(0, os.SEEK_END)
        self._stderr_from = self.stderr.tell()
        try:
            self._send({"name": name, "path": path, "source": source, "cpu_seconds": cpu_seconds,
                        "platform": platform})
        except (BrokenPipeError, OSError):
            return None
        reply = self._receive(timeout_s)
        if reply is not None and "exit" in reply:  # the child died before it answered
            self.exit = reply["exit"]
            return None
        if reply is None:
            self.timed_out = self.alive()
        if reply is None or not self._ended(30.0):
            if self.child is not None and self.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.child, signal.SIGKILL)
                self._ended(30.0)
        return reply if reply is not None and reply.get("name") == name else None

    def _ended(self, timeout_s: float) -> bool:
        """Wait for the worker's report that the child exited."""
        end = self._receive(timeout_s)
        if end is not None and "exit" in end:
            self.exit = self.exit if self.exit is not None else end["exit"]
            return True
        return False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def where(self) -> str:
        """Where the candidate being checked was when it hung or died, e.g. ' in compute_reward() while running it'."""
        if self.phase is None:
            return " while its module-level code ran"
        variant, function, step = self.phase
        return f" in {function}() while {step} it" + (f" (variant {variant})" if "[" in variant else "")

    def stderr_tail(self, lines: int = 3) -> str:
        self.stderr.seek(self._stderr_from)
        text = self.stderr.read().decode(errors="replace").strip().splitlines()
        text = [t for t in text if "warp" not in t]  # MJX's notice that the optional warp backend is absent
        return " | ".join(text[-lines:]) or "no output"

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
        self.proc.wait()
        self._selector.close()
        self.stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def died_because(self) -> str:
        """Why the child died while checking a candidate, from its exit status and last messages."""
        code = self.exit if self.exit is not None else self.proc.wait()
        if code == -signal.SIGXCPU:
            return "it used more than its CPU-time limit"
        if code == -signal.SIGXFSZ:
            return "it wrote more than its file-size limit"
        reason = f"the validation process died (exit {code}): {self.stderr_tail()}"
        if "MemoryError" in reason or "RESOURCE_EXHAUSTED" in reason or code == -signal.SIGKILL:
            reason += " (over the memory limit?)"
        return reason

    def hung_because(self, timeout_s: float) -> str:
        step = self.phase[2] if self.phase else None
        cause = {"tracing": "a Python loop that never ends, or one unrolled too far?",
                 "running": "a lax.while_loop that never ends?"}.get(step, "an endless loop?")
        return f"took longer than {timeout_s:g} s ({cause})"


_STARTED: list[_Worker] = []
"""Workers started ahead of their validator (`start_workers`) that no validator has taken yet."""
_STARTED_LOCK = threading.Lock()


def default_workers(files: int) -> int:
    """How many workers validate `files` files: each uses several cores."""
    return min(files, max(2, min(8, (os.cpu_count() or 2) // 4)))


def start_workers(task: str, shaper_types: Sequence[str], memory_gib: float, count: int) -> list[int]:
    """Start `count` workers for `task` now, ahead of the validator that will use them: a worker's start (its
    imports and the sample rollout, 6–8 s on a GPU machine) then runs beside the command's own imports and setup
    instead of after them. What `envcoder eval` and `auto` do first. A `SandboxValidator` of the same task, shaper
    types and memory limit takes them; `close_started` ends the others (it runs at exit). Returns their process ids."""
    if not _STARTED:
        atexit.register(close_started)
    workers = [_Worker(task, shaper_types, int(memory_gib * 2**30)) for _ in range(count)]
    with _STARTED_LOCK:
        _STARTED.extend(workers)
    return [w.proc.pid for w in workers]


def close_started() -> None:
    """End the workers that `start_workers` started and no validator took."""
    with _STARTED_LOCK:
        started = _STARTED[:]
        _STARTED.clear()
    for worker in started:
        worker.kill()


def _take_started(key: tuple) -> _Worker | None:
    with _STARTED_LOCK:
        for i, worker in enumerate(_STARTED):
            if worker.key == key:
                return _STARTED.pop(i)
    return None


class SandboxValidator:
    """Validate candidate sources in jailed worker processes; the verdicts keep the candidates' order and hand the
    files over as programs (`Verdict.candidate`).

    Workers start when a source needs checking (or earlier: `start_workers`) and stay up between calls (their start,
    importing JAX and rolling out the task, is the slow part) until `close()`; every file is checked in a fresh
    child of one. Use as a context manager. A verdict that passed is kept, in memory and, while envcoder's caches
    are on (`envcoder.compile_cache`), on disk with its programs: the same source under the same name, task, limits,
    platform and envcoder is not checked again, by this validator or a later run's.
    """

    def __init__(self, task: str, shaper_types: Sequence[str], timeout_s: float = 120.0, memory_gib: float = 4.0,
                 workers: int = 1, startup_timeout_s: float = 600.0, platform: str | None = None):
        """`platform`: what the programs are compiled for (default: this process's JAX platform)."""
        from jax import export

        self.task, self.shaper_types = task, tuple(shaper_types)
        self.timeout_s, self.memory_bytes = timeout_s, int(memory_gib * 2**30)
        self.workers, self.startup_timeout_s = max(1, workers), startup_timeout_s
        self.platform = platform or export.default_export_platform()
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        self._passed: dict[tuple[str, str], Verdict] = {}
        self._passed_sources: dict[str, tuple[str, dict]] = {}  # a source that passed: its name and reply

    @property
    def cpu_seconds(self) -> int:
        """CPU time one candidate may use: its wall-clock timeout on every core XLA may keep busy."""
        return int(self.timeout_s * (os.cpu_count() or 1)) + 1

    def _worker(self) -> _Worker:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        worker = (_take_started((self.task.lower(), self.shaper_types, self.memory_bytes))
                  or _Worker(self.task, self.shaper_types, self.memory_bytes))
        worker.ready(self.startup_timeout_s)
        return worker

    def validate(self, drafts: Sequence[tuple[str, str] | tuple[str, str, str]]) -> list[Verdict]:
        """`drafts`: `(name, source)` or `(name, source, path)` (the file named in messages; default `name.py`; None:
        the task's own shaping, `envcoder.candidates.task_default_candidate`, whatever the source).
        Raises `SandboxError` only when no worker can start. A verdict that passed is remembered (see the
        class): `envcoder auto` evaluates the drafts it validated, and a rerun of a job skips the sandbox."""
        todo: queue.Queue = queue.Queue()
        verdicts: list[Verdict | None] = []
        for i, (name, source, *path) in enumerate(drafts):
            path = path[0] if path else f"{name}.py"
            verdicts.append(self._passed.get((name, source)) or self._renamed(name, source, path)
                            or self._stored(name, source, path))
            if verdicts[i] is None:
                todo.put((i, name, source, path))
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
                    reply = worker.check(name, path, source, self.timeout_s, self.cpu_seconds, self.platform)
                    if reply is None:  # hung or died: this candidate's fault
                        reason = worker.hung_because(self.timeout_s) if worker.timed_out else worker.died_because()
                        variant = worker.phase[0] if worker.phase else name
                        verdicts[i] = Verdict(name, errors={variant: f"{path or name}{worker.where()}: {reason}"})
                    else:
                        verdicts[i] = self._verdict(name, source, path, reply)
                    if not worker.alive():  # the worker itself is gone: the next file gets a new one
                        worker.kill()
                        worker = None
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

    def _verdict(self, name: str, source: str, path: str | None, reply: dict, stored: bool = False) -> Verdict:
        """The verdict of a worker's `reply`, its programs checked and loaded; a verdict that passed is remembered."""
        from envcoder.candidates.programs import check_against, handed_over
        from envcoder.candidates.validate import CandidateSpec

        specs = {v: CandidateSpec(s["obs_dim"], s["action_dim"], tuple(s["reward_components"]), s["critic_obs_dim"],
                                  s.get("constants_as_data", True)) for v, s in reply["specs"].items()}
        errors = dict(reply["errors"])
        candidate = None
        if specs and path is not None:
            try:
                candidate = handed_over(name, path, source, reply["candidate"])
                for spec in specs.values():
                    check_against(candidate, spec)
            except Exception as err:  # noqa: BLE001 - a program refused here (or a damaged hand-over)
                errors.update({v: str(err) for v in specs})
                specs = {}
        verdict = Verdict(reply["name"], specs, errors, candidate)
        if verdict.ok:
            self._passed[(name, source)] = verdict
            self._passed_sources[source] = (name, reply)
            if not stored:
                self._store(name, source, reply)
        return verdict

    def _renamed(self, name: str, source: str, path: str | None) -> Verdict | None:
        """The verdict of a source that passed under another name (a search trains one file again under new names:
        new seeds), or None. Its checks did not depend on the name, and nothing of it runs here."""
        if source not in self._passed_sources:
            return None
        old, reply = self._passed_sources[source]

        def renamed(variants: dict) -> dict:  # `old` and its sweep's `old[...]`
            return {name + variant[len(old):]: value for variant, value in variants.items()}
        return self._verdict(name, source, path, {**reply, "name": name, "specs": renamed(reply["specs"]),
                                                  "errors": renamed(reply["errors"])}, stored=True)

    def _verdict_file(self, name: str, source: str) -> Path | None:
        folder = verdict_cache_dir()
        if folder is None:
            return None
        key = repr((code_fingerprint(), self.task, self.shaper_types, self.timeout_s, self.memory_bytes,
                    self.platform, name, source))
        return folder / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.json"

    def _stored(self, name: str, source: str, path: str | None) -> Verdict | None:
        """A passed verdict kept on disk by an earlier run, or None (none, or unreadable: checked anew)."""
        file = self._verdict_file(name, source)
        try:
            verdict = self._verdict(name, source, path, json.loads(file.read_text()), stored=True)
        except Exception:  # noqa: BLE001 - a missing or damaged entry is a cache miss
            return None
        return verdict if verdict.ok else None

    def _store(self, name: str, source: str, reply: dict) -> None:
        file = self._verdict_file(name, source)
        if file is not None:
            store_entry(file, json.dumps(reply).encode())

    def close(self) -> None:
        """End this validator's workers, and those started ahead (`start_workers`) that it did not take."""
        close_started()
        while True:
            try:
                self._idle.get_nowait().kill()
            except queue.Empty:
                return

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
