"""The sandbox's worker processes as the training process sees them (`envcoder.candidates.sandbox` says what they
do): a `Worker` is one jailed worker (`python -m envcoder.candidates.worker`) talked to line by line with timeouts;
`start_workers` starts some ahead of the validator that will take them, so that their start (imports, the sample
states, the task's own functions compiled) runs beside the command's own.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

from envcoder.candidates.jail import JAILED_ID, maps_jailed_id, start_jailed, unshare_command
from envcoder.text import one_line


COST_ENVS = (64, 256)
"""The environments (one group) at which the worker measures what each program costs (`program_costs`), besides the
run's own size where the validator knows it."""


class SandboxError(RuntimeError):
    """The sandbox itself could not start (not a candidate's fault)."""


_PASSED_ON = ("PYTHONPATH", "LANG", "LC_ALL", "TZ")
"""The parent's variables a worker gets (besides JAX's own settings): where Python finds its packages."""


WORKER_XLA_FLAGS = "--xla_backend_optimization_level=0"
"""A worker compiles only to check: small programs on a few sample states, run once, never timed, and what it hands
over is StableHLO that the training process compiles with its own settings. Without LLVM's optimizations its
compiles take a third to a half less time (Anymal on the 2-core CPU machine: the sample rollout 2.6 → 1.7 s, the
task's own functions 3.1 → 1.6 s; a worker's start 9.4 → 6.8 s on a GPU host; docs/benchmarks/throughput.md)."""


def scratch_folder(folder: str) -> str:
    """The one folder under a worker's `folder` where a candidate's process may write (a size-limited tmpfs where
    the jail has a mount namespace); the sample states beside it stay read-only to it."""
    return str(Path(folder) / "scratch")


def worker_env(folder: str) -> dict:
    """The worker's environment: nothing of the parent's but where Python's packages are and JAX's settings (no
    credentials, whatever their names), CPU-only JAX, and its scratch folder (`scratch_folder`) as home."""
    env = {k: v for k, v in os.environ.items() if k in _PASSED_ON or (k.startswith("JAX_") and "KEY" not in k)}
    # MUJOCO_GL=disable: the worker never renders, and `import mujoco` fails outright where MUJOCO_GL names an OpenGL
    # library that is not installed (`envcoder play` sets it for its process).
    env.update(JAX_PLATFORMS="cpu", XLA_PYTHON_CLIENT_PREALLOCATE="false", PYTHONUNBUFFERED="1", MALLOC_ARENA_MAX="2",
               MUJOCO_GL="disable", HOME=scratch_folder(folder), TMPDIR=scratch_folder(folder), PATH=os.defpath,
               PYTHONDONTWRITEBYTECODE="1",
               XLA_FLAGS=WORKER_XLA_FLAGS)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # the header names it; the candidates' children only read it
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else src
    return env


class Worker:
    """One worker process (the zygote of `envcoder.candidates.sandbox`'s docstring), talked to line by line with
    timeouts. It starts at once; `ready` waits for its start to end."""

    def __init__(self, task: str, shaper_types: Sequence[str], memory_bytes: int):
        self.key = (task.lower(), tuple(shaper_types), memory_bytes)
        remove_abandoned_folders()
        self.folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
        os.mkdir(scratch_folder(self.folder))
        self.stderr = tempfile.TemporaryFile()
        self.namespaced = "--pid" in unshare_command()  # the worker then reports PIDs of a namespace of its own
        self.proc = start_jailed(unshare_command(), [sys.executable, "-m", "envcoder.candidates.worker"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                 env=worker_env(self.folder), cwd=self.folder, start_new_session=True)
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
        self.timed_out = self.over_total = False
        self._stderr_from = 0
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.proc.stdout, selectors.EVENT_READ)
        self._send(header)
        self._ready = False

    def _header(self, task: str, shaper_types: Sequence[str], memory_bytes: int) -> dict:
        """The protocol's first line (`envcoder.candidates.worker`): the task, the limits and where the caches are."""
        from envcoder.candidates.samples import states_file
        from envcoder.tasks import get_task

        states = states_file(get_task(task)) or Path(self.folder) / "states.npz"
        import jax

        return {"task": task, "shaper_types": list(shaper_types), "folder": self.folder, "states_file": str(states),
                "scratch": scratch_folder(self.folder), "mount_scratch": "--mount" in unshare_command(),
                "cache_dir": jax.config.jax_compilation_cache_dir or "", "memory_bytes": memory_bytes,
                "jailed_id": JAILED_ID if maps_jailed_id() else None, "user_namespace": bool(unshare_command())}

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

    def _receive(self, timeout_s: float, until: float | None = None) -> dict | None:
        """The next protocol line other than a phase or child report, or None when the worker died or `timeout_s`
        passed without one (the clock restarts with each step the child reports), or the clock reached `until`
        (`time.monotonic()`; nothing the child sends moves it: `over_total` then says so)."""
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\n" not in self._buffer:
                end = deadline if until is None else min(deadline, until)
                remaining = end - time.monotonic()
                if remaining <= 0 or not self._selector.select(remaining):
                    if until is not None:
                        self.over_total = time.monotonic() >= until
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
              platform: str, cost_envs: Sequence[int] = ()) -> dict | None:
        """The child's verdict on one file (its programs exported for `platform`, their costs measured at one group
        of each of `cost_envs` environments, default `COST_ENVS`), or None when it hung
        (`timed_out`: a step took over `timeout_s`, or the whole file over `TOTAL_STEPS` × `timeout_s`, however
        often the child reported a step) or died (`exit`)."""
        return self.ask({"name": name, "path": path, "source": source, "cpu_seconds": cpu_seconds,
                         "platform": platform, "cost_envs": list(cost_envs or COST_ENVS)}, timeout_s)

    def verify(self, name: str, path: str, programs, claims, timeout_s: float, cpu_seconds: int, platform: str,
               cost_envs: Sequence[int] = ()) -> dict | None:
        """A file's hand-over verified in a child that runs no candidate code (`envcoder.candidates.verifier`):
        `{"name", "verified": {"programs", "costs"}}` or `{"name", "error"}`; None when the verifier hung or died, as
        in `check`. `programs` and `claims` (its first variant's record) pass through unread."""
        return self.ask({"name": name, "path": path, "verify": {"programs": programs, "claims": claims},
                         "cpu_seconds": cpu_seconds, "platform": platform, "cost_envs": list(cost_envs or COST_ENVS)},
                        timeout_s)

    def work(self, name: str, work: str, arguments: dict, timeout_s: float, cpu_seconds: int) -> dict | None:
        """The child's answer to a function of envcoder's on candidate text (`work`, "module:function", called with
        `arguments`), `{"name", "result"}` or `{"name", "error"}`; or None when it hung or died, as in `check`."""
        return self.ask({"name": name, "work": work, "args": arguments, "cpu_seconds": cpu_seconds}, timeout_s)

    def ask(self, request: dict, timeout_s: float) -> dict | None:
        """Send one request (a file to check, or work on text) and wait for the child's answer named as it is; None
        when it hung (a step over `timeout_s`, or all of them over `TOTAL_STEPS` × `timeout_s`) or died."""
        name = request["name"]
        self.phase = self.child = self.exit = None
        self.timed_out = self.over_total = False
        # Each request's standard error from the start of the file: what one file's process wrote there (up to its
        # file-size limit) must not leave the next one without room ("File too large" for a valid file before).
        self.stderr.seek(0)
        self.stderr.truncate()
        self._stderr_from = 0
        try:
            self._send(request)
        except (BrokenPipeError, OSError):
            return None
        reply = self._receive(timeout_s, until=time.monotonic() + TOTAL_STEPS * timeout_s)
        if reply is not None and "exit" in reply:  # the child died before it answered
            self.exit = reply["exit"]
            return None
        if reply is None:
            self.timed_out = self.alive()
        if reply is None or not self._ended(30.0):
            child = self._host_pid(self.child) if self.child is not None and self.alive() else None
            if child is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
                self._ended(30.0)
        return reply if reply is not None and reply.get("name") == name else None

    def _host_pid(self, child: int) -> int | None:
        """The PID in this process's namespace of the worker's child `child`, which the worker reports in the PID
        namespace of its own that `unshare` gives it (`envcoder.candidates.jail`); None where it has ended."""
        if not self.namespaced:
            return child
        try:  # unshare's one child is the worker; the worker's children are the files' children
            for worker in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split():
                for pid in Path(f"/proc/{worker}/task/{worker}/children").read_text().split():
                    status = Path(f"/proc/{pid}/status").read_text()
                    inner = next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[-1]
                    if inner == str(child):
                        return int(pid)
        except (OSError, StopIteration):
            return None
        return None

    def _ended(self, timeout_s: float) -> bool:
        """Wait for the worker's report that the child exited."""
        end = self._receive(timeout_s)
        if end is not None and "exit" in end:
            self.exit = self.exit if self.exit is not None else end["exit"]
            return True
        return False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def where(self, name: str) -> str:
        """Where the child checking the file `name` was when it hung or died, e.g. ' in compute_reward() while
        running it', from the last step it reported: a function of the shaping API, a step in a few words, a variant
        of the file's own sweep; anything else it claimed is left out (it cannot file its failure under another
        file's name or print a line of its own)."""
        from envcoder.shaping.api import SHAPING_TYPES

        if self.phase is None:
            return " while its module-level code ran"
        variant, function, step = self.phase
        function = f" in {function}()" if function in SHAPING_TYPES else ""
        step = f" while {step} it" if STEP.fullmatch(step) else ""
        own = variant.startswith(name + "[") and len(variant) <= 200
        return f"{function}{step}" + (f" (variant {one_line(variant)})" if own else "")

    def variant(self, name: str) -> str:
        """The file `name`, or its sweep's variant that its child last reported working on."""
        variant = self.phase[0] if self.phase else name
        return variant if variant.startswith(name + "[") and len(variant) <= 200 else name

    def stderr_tail(self, lines: int = 3) -> str:
        """The child's last lines of standard error; after a crash in native code (XLA's checks, the C++ runtime),
        the line that says why comes first, since a stack trace follows it."""
        self.stderr.seek(self._stderr_from)
        text = self.stderr.read().decode(errors="replace").strip().splitlines()
        text = [t for t in text if "warp" not in t]  # MJX's notice that the optional warp backend is absent
        fatal = next((t.strip() for t in text if FATAL_LINE.search(t)), None)
        tail = [t for t in text[-lines:] if t.strip() != fatal]
        return " | ".join(([fatal] if fatal else []) + tail) or "no output"

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
        if self.over_total:
            return (f"took longer than {TOTAL_STEPS * timeout_s:g} s in all ({TOTAL_STEPS} × the "
                    f"{timeout_s:g} s a step may take: --validation-timeout)")
        step = self.phase[2] if self.phase else None
        cause = {"tracing": "a Python loop that never ends, or one unrolled too far?",
                 "running": "a lax.while_loop that never ends?"}.get(step, "an endless loop?")
        return f"took longer than {timeout_s:g} s ({cause})"


STEP = re.compile(r"[a-z][a-z' ]{0,40}")
"""A step as a child may report it ("tracing", "running its program"): a few lowercase words."""

TOTAL_STEPS = 3
"""A file's whole validation may take this many times what one step may (`--validation-timeout`): a deadline that
the child's reports of its steps do not move (a child that sleeps and reports a made-up step every few seconds)."""


FATAL_LINE = re.compile(r"^[FE]\d{4} |Check failed|terminate called|what\(\):|Fatal Python error|LLVM ERROR|"
                        r"\*\*\* SIG")
"""A line of a child's standard error that says why native code aborted (absl's fatal log lines, failed checks,
the C++ runtime's, Python's and LLVM's fatal errors, the signal handler's header)."""

FOLDER_PREFIX = "envcoder-jail-"
"""A worker's folder in the temporary folder is named `envcoder-jail-<pid of the process that owns it>-<random>`."""


def remove_abandoned_folders() -> list[str]:
    """Remove the workers' folders whose owner is gone (a training process killed before it could remove them, by
    SIGKILL or a crash); once per process, before its first worker starts. Returns what it removed."""
    global _SWEPT
    if _SWEPT:
        return []
    _SWEPT, removed = True, []
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        owner = folder.name[len(FOLDER_PREFIX):].split("-", 1)[0]
        if not owner.isdigit() or not folder.is_dir() or folder.is_symlink():
            continue
        try:
            os.kill(int(owner), 0)
            continue  # its owner is still running
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # another user's process: alive
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder))
    return removed


_SWEPT = False

_STARTED: list[Worker] = []
"""Workers started ahead of their validator (`start_workers`) that no validator has taken yet."""
_STARTED_LOCK = threading.Lock()


def default_workers(files: int) -> int:
    """How many workers validate `files` files: each uses several cores."""
    return min(files, max(2, min(8, (os.cpu_count() or 2) // 4)))


def start_workers(task: str, shaper_types: Sequence[str], memory_gib: float, count: int) -> list[int]:
    """Start `count` workers for `task` now, ahead of the validator that will use them: a worker's start (its
    imports, the sample states and the task's own functions compiled: 2–4 s on a GPU machine) then runs beside the
    command's own imports and setup instead of after them. What `envcoder eval` and `auto` do first. A
    `SandboxValidator` of the same task, shaper types and memory limit takes them; `close_started` ends the others
    (it runs at exit). Returns their process ids."""
    if not _STARTED:
        atexit.register(close_started)
    workers = [Worker(task, shaper_types, int(memory_gib * 2**30)) for _ in range(count)]
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


def take_started(key: tuple) -> Worker | None:
    with _STARTED_LOCK:
        for i, worker in enumerate(_STARTED):
            if worker.key == key:
                return _STARTED.pop(i)
    return None
