"""Untrusted candidate code runs here only: in jailed worker processes, with a wall-clock timeout and memory, CPU
and file-size limits, and what comes back to the training process is compiled programs, never code.

Every path that trains candidates (`envcoder eval`, `auto`, `--resume`, `play`) takes them from here: the parent
(`SandboxValidator`) starts worker processes (`python -m envcoder.candidates.worker`) in new user and network
namespaces with an environment of their own (no credentials, CPU-only JAX; `envcoder.candidates.jail`). A worker
imports what validation needs and forks a trusted first child that gets the sample states: those shipped for the
task where they are this code's (`envcoder.candidates.samples`), else a brief rollout under the default shaping
(`rollout_states`); kept on disk for later runs. Then each file is checked in a fresh child forked from the
worker, so that no file can change what the next one sees: the child locks itself in (Landlock: it reads only
Python, envcoder and the sample states, writes only its temporary folder, connects nowhere), sets its limits, reads
the file in the restricted namespace, traces, compiles and runs every shaping function of every sweep variant on
the sample states, checking shapes, dtypes and finiteness (`validate_candidate`), and exports each function as a
program with its sizes symbolic and its constants as inputs (`envcoder.candidates.programs`). A child that hangs
(a Python loop that never ends or unrolls too far, or a `lax.while_loop` that never ends inside XLA, which no
signal reaches) is killed at the timeout; one that allocates past the memory limit dies alone. Either way the
verdict names the function and the step (tracing, compiling, running, exporting). The workers' handles, and
`start_workers`, are in `envcoder.candidates.pool`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import os
import queue
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from envcoder.candidates.constants import code_keys
from envcoder.candidates.pool import (COST_ENVS, SandboxError, Worker, close_started, default_workers, start_workers,
                                      take_started)
from envcoder.compile_cache import code_fingerprint, store_entry, verdict_cache_dir
from envcoder.shaping.api import CandidateError
from envcoder.text import one_line

if TYPE_CHECKING:
    from envcoder.candidates.load import Candidate

__all__ = ["SandboxValidator", "Verdict", "SandboxError", "JailedError", "default_workers", "start_workers"]


class JailedError(Exception):
    """Work on candidate text (`SandboxValidator.jailed`) failed: the function raised, or its child hung or died."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the sandbox found for one candidate file (and each of its sweep variants)."""

    name: str
    candidates: tuple["Candidate", ...] = ()
    """The file's variants that passed (the file itself where it sweeps nothing), each validated (with its sizes)
    and with its functions as the worker's programs (`envcoder.candidates.programs.Program`, shared by the
    variants; the task's own functions for the task's own shaping): as a learner takes them."""
    errors: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Why, per variant that failed (or for the file, when it could not be loaded)."""

    @property
    def ok(self) -> bool:
        return bool(self.candidates) and not self.errors

    @property
    def error(self) -> str | None:
        return next(iter(self.errors.values()), None)


ERROR_CHARACTERS = 2000
"""The most of a child's error text the training process keeps (one line: `envcoder.text.one_line`)."""


def _owns(name: str, variant: object) -> bool:
    """Whether `variant` is the file `name` or one of its sweep's variants (`name[...]`)."""
    return isinstance(variant, str) and (variant == name or variant.startswith(name + "["))


def trusted_reply(name: str, path: str | None, reply: dict) -> tuple[dict, dict[str, str]]:
    """What the training process takes of a child's reply on the file `name`: its candidates only where they are
    that file's (or its sweep's variants), its errors as one-line text under that file's names (an error the child
    gives another file, a control that trained, say, is this file's), and nothing else. `(reply, errors)`."""
    errors: dict[str, str] = {}
    raw = reply.get("errors") if isinstance(reply.get("errors"), dict) else {}
    for variant, why in raw.items():
        errors.setdefault(variant if _owns(name, variant) else name, one_line(why, ERROR_CHARACTERS))
    candidates = reply.get("candidates") if isinstance(reply.get("candidates"), list) else []
    strangers = [str(d.get("name")) if isinstance(d, dict) else repr(d) for d in candidates
                 if not isinstance(d, dict) or not _owns(name, d.get("name"))]
    if strangers:
        errors[name] = one_line(f"{path or name}: its validation answered for {', '.join(strangers)}, which is not "
                                "this file: left out", ERROR_CHARACTERS)
        candidates = []
    return {**reply, "name": name, "candidates": candidates}, errors


def verified_wire(data: dict, path: str | None, functions: dict, default=None) -> dict:
    """A validated variant's record (`Candidate.to_wire`) as the parent can vouch for it: its function keys made
    from what its programs compute (`Program.key`), never the child's, so that no file's program can serve another
    file or the task's own shaping (nor stand in the compile caches for one); its constants exactly its programs'
    inputs, finite numbers. The task's own shaping (`path` None) takes the keys of `default`, made here."""
    if default is not None:
        return {**data, "code_key": default.code_key, "function_keys": dict(default.function_keys),
                "function_params": {}}
    claimed = data.get("function_keys") or {}
    if set(claimed) != set(functions):
        raise CandidateError(str(path), f"its validation named the functions {sorted(claimed)}, its programs are "
                                        f"{sorted(functions)}")
    keys = {api: f"{program.key}:{api}" + (":CURRICULUM" if str(claimed[api]).endswith(":CURRICULUM") else "")
            for api, program in functions.items()}
    params = data.get("function_params") or {}
    for api, program in functions.items():
        given = params.get(api, {})
        if set(given) != program.param_names or not all(
                isinstance(v, (int, float)) and math.isfinite(v) for v in given.values()):
            raise CandidateError(str(path), f"its validation gave the constants {sorted(given)}, its program takes "
                                            f"{sorted(program.param_names)}", function=api)
    if set(params) - set(functions):
        raise CandidateError(str(path), f"its validation gave constants for {sorted(set(params) - set(functions))}, "
                                        "which it has no program of")
    code_key = hashlib.sha256("|".join(sorted(keys.values())).encode()).hexdigest()[:16]
    return {**data, "code_key": code_key, "function_keys": keys}


class SandboxValidator:
    """Validate candidate sources in jailed worker processes; the verdicts keep the candidates' order and hand the
    files over as programs (`Verdict.candidates`).

    Workers start when a source needs checking (or earlier: `start_workers`) and stay up between calls (their start,
    importing JAX and rolling out the task, is the slow part) until `close()`; every file is checked in a fresh
    child of one. Use as a context manager. A verdict that passed is kept, in memory and, while envcoder's caches
    are on (`envcoder.compile_cache`), on disk with its programs: the same source under the same name, task, limits,
    platform and envcoder is not checked again, by this validator or a later run's. With `same_code_once`, neither
    is a file whose code differs from one that passed only in its float constants (see `__init__`).
    """

    def __init__(self, task: str, shaper_types: Sequence[str], timeout_s: float = 120.0, memory_gib: float = 4.0,
                 workers: int = 1, startup_timeout_s: float = 600.0, platform: str | None = None,
                 same_code_once: bool = False, run_envs: int | None = None):
        """`platform`: what the programs are compiled for (default: this process's JAX platform).

        `run_envs`: the environments per group of the run the candidates are for; the verifier measures each program's
        cost and memory at that size and at one of `envcoder.candidates.pool.COST_ENVS` (without it, at both), so
        that a program that is cheap at the sandbox's sizes and huge at the run's (a branch on the number of
        environments) is refused before it trains (`envcoder.candidates.costs.check_costs`).

        `same_code_once`: a file whose code differs from one that passed only in its float constants
        (`envcoder.candidates.constants`: the same lifted code, no sweep, no curriculum table) takes that file's
        verdict and programs, with its own constants as their data, and is not run in the sandbox. Its constants are
        then not checked on the sample states: what a population search wants, whose copies and halving rungs are
        one file's code with many constants, and whose exploit steps change constants unchecked anyway. Off (the
        default), every other source is checked."""
        from jax import export

        self.task, self.shaper_types = task, tuple(shaper_types)
        self.timeout_s, self.memory_bytes = timeout_s, int(memory_gib * 2**30)
        self.workers, self.startup_timeout_s = max(1, workers), startup_timeout_s
        self.platform = platform or export.default_export_platform()
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        self._running, self._count = 0, threading.Lock()  # workers up (at most `workers`), and its lock
        self._names = itertools.count()
        self._keys: dict[str, tuple[str, dict] | None] = {}  # a source's code key and constants (`code_keys`)
        self._passed: dict[tuple[str, str], Verdict] = {}
        self._passed_sources: dict[str, tuple[str, dict]] = {}  # a source that passed: its name and reply
        self.same_code_once = same_code_once
        # The run's size and one other (for a cost that grows faster than the number of environments), each a
        # compile in the verifier.
        self.cost_envs = (sorted({run_envs, COST_ENVS[0] if run_envs >= COST_ENVS[-1] else COST_ENVS[-1]}) if run_envs
                          else list(COST_ENVS))
        self._passed_code: dict[str, tuple[str, dict]] = {}  # the same for a code (`_code_key`) that passed

    @property
    def cpu_seconds(self) -> int:
        """CPU time one candidate may use: its wall-clock timeout on every core XLA may keep busy."""
        return int(self.timeout_s * (os.cpu_count() or 1)) + 1

    def _worker(self) -> Worker:
        """An idle worker, a new one while fewer than `workers` are up, else the next that another thread gives
        back (`_give_back`)."""
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                with self._count:
                    new = self._running < self.workers
                    self._running += new
                if new:
                    break
                worker = self._idle.get()
            if worker is not None:  # None: one was ended (`_gone`), so a new one may start
                return worker
        try:
            worker = (take_started((self.task.lower(), self.shaper_types, self.memory_bytes))
                      or Worker(self.task, self.shaper_types, self.memory_bytes))
            worker.ready(self.startup_timeout_s)
        except BaseException:
            self._gone()
            raise
        return worker

    def _gone(self) -> None:
        with self._count:
            self._running -= 1
        self._idle.put(None)  # wakes a thread waiting in `_worker`

    def _give_back(self, worker: Worker) -> None:
        """An idle worker back to the others; one whose process is gone is ended (the next gets a new one)."""
        if worker.alive():
            self._idle.put(worker)
        else:
            worker.kill()
            self._gone()

    def jailed(self, function: Callable, **arguments):
        """`function(**arguments)` (one of envcoder's, on candidate text; arguments and result JSON) in a child of a
        worker, locked in and limited as a candidate file's check is: how the training process freezes a sweep,
        writes an offline search's child or flattens a find without parsing a candidate's text itself. Its result,
        or `JailedError` with why it failed (what it raised; it hung or died)."""
        name = f"work-{next(self._names)}"
        worker = self._worker()
        try:
            reply = worker.work(name, f"{function.__module__}:{function.__qualname__}", arguments, self.timeout_s,
                                self.cpu_seconds)
            if reply is None:
                why = worker.hung_because(self.timeout_s) if worker.timed_out else worker.died_because()
                raise JailedError(one_line(f"{function.__name__}: {why}", ERROR_CHARACTERS))
        finally:
            self._give_back(worker)
        if "error" in reply:
            raise JailedError(one_line(reply["error"], ERROR_CHARACTERS))
        return reply["result"]

    def _learn_keys(self, sources: Sequence[str]) -> None:
        """The code keys and constants of `sources` (`code_keys`), in the jail: all at once, else one by one where
        one of them made the batch fail (that one has none)."""
        todo = list(dict.fromkeys(s for s in sources if s not in self._keys))
        try:
            found = self.jailed(code_keys, sources=todo) if todo else []
        except JailedError:
            found = []
            for source in todo:
                try:
                    found += self.jailed(code_keys, sources=[source])
                except JailedError:
                    found.append(None)
        self._keys.update({s: tuple(k) if k else None for s, k in zip(todo, found)})

    def _code_key(self, source: str) -> str | None:
        """What identifies `source`'s code whatever its float constants (learnt by `_learn_keys`), or None."""
        known = self._keys.get(source)
        return known[0] if known else None

    def validate(self, drafts: Sequence[tuple[str, str] | tuple[str, str, str]]) -> list[Verdict]:
        """`drafts`: `(name, source)` or `(name, source, path)` (the file named in messages; default `name.py`; None:
        the task's own shaping, `envcoder.candidates.task_default_candidate`, whatever the source).
        Raises `SandboxError` only when no worker can start. A verdict that passed is remembered (see the
        class): `envcoder auto` evaluates the drafts it validated, and a rerun of a job skips the sandbox."""
        drafts = [(name, source, path[0] if path else f"{name}.py") for name, source, *path in drafts]
        known: dict[tuple[str, str], Verdict] = {}
        if self.same_code_once:  # one file of each code first; the others then take its verdict if it passed
            self._learn_keys([source for _, source, path in drafts if path is not None])
            firsts = {}
            for draft in drafts:
                firsts.setdefault(self._code_key(draft[1]) or object(), draft)
            known = {(name, source): v for (name, source, _), v in zip(firsts.values(), self._check(firsts.values()))}
        return self._check(drafts, known)

    def _check(self, drafts, known: Mapping[tuple[str, str], Verdict] | None = None) -> list[Verdict]:
        """The verdicts of `(name, source, path)` drafts: those `known`, remembered or stored, the others checked in
        the workers."""
        todo: queue.Queue = queue.Queue()
        verdicts: list[Verdict | None] = []
        for i, (name, source, path) in enumerate(drafts):
            verdicts.append((known or {}).get((name, source)) or self._passed.get((name, source))
                            or self._renamed(name, source, path) or self._same_code(name, source, path)
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
                    reply = worker.check(name, path, source, self.timeout_s, self.cpu_seconds, self.platform,
                                         self.cost_envs)
                    if reply is None:  # hung or died: this candidate's fault
                        verdicts[i] = Verdict(name, errors={worker.variant(name): self._lost(worker, name, path)})
                    else:
                        reply, errors = trusted_reply(name, path, reply)
                        reply = {**reply, "errors": errors}
                        if path is not None and reply["candidates"]:
                            if not worker.alive():
                                self._give_back(worker)
                                worker = self._worker()
                            reply = self._verified(worker, name, path, reply)
                        verdicts[i] = self._verdict(name, source, path, reply)
                    if not worker.alive():  # the worker itself is gone: the next file gets a new one
                        self._give_back(worker)
                        worker = None
            except BaseException as err:  # noqa: BLE001 - reported to the caller below
                errors.append(err)
            finally:
                if worker is not None:
                    self._give_back(worker)

        threads = [threading.Thread(target=serve, daemon=True) for _ in range(min(self.workers, todo.qsize()))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return [v for v in verdicts if v is not None]

    def _lost(self, worker: Worker, name: str, path: str | None, what: str = "") -> str:
        """Why a child of `worker` gave no answer on the file `name` (it hung or died), in one line that is the
        file's own (`Worker.where`)."""
        reason = worker.hung_because(self.timeout_s) if worker.timed_out else worker.died_because()
        return one_line(f"{path or name}{what}{worker.where(name)}: {reason}", ERROR_CHARACTERS)

    def _verified(self, worker: Worker, name: str, path: str, reply: dict) -> dict:
        """`reply` (a child's, taken as `trusted_reply` takes it) with its programs and their costs as the verifier
        gives them (`envcoder.candidates.verifier`): its programs rewritten by a process that never ran candidate
        code, measured and run there. Where the verifier refuses, hangs or dies, the file's variants are left out
        with why. This process never reads the child's programs."""
        answer = worker.verify(name, path, reply.get("programs"), reply["candidates"][0], self.timeout_s,
                               self.cpu_seconds, self.platform, self.cost_envs)
        if answer is not None and isinstance(answer.get("verified"), dict):
            return {**reply, **answer["verified"]}
        why = (one_line(answer.get("error"), ERROR_CHARACTERS) if answer is not None else
               self._lost(worker, name, path, ": its programs could not be verified,"))
        variants = [data["name"] for data in reply["candidates"]]
        return {**reply, "candidates": [], "errors": {**reply["errors"], **{v: why for v in variants}}}

    def _verdict(self, name: str, source: str, path: str | None, reply: dict, stored: bool = False) -> Verdict:
        """The verdict of a worker's `reply`, its programs checked and loaded; a verdict that passed is remembered.
        Nothing the child said is taken on trust (`trusted_reply`)."""
        from envcoder.candidates.load import Candidate, task_default_candidate
        from envcoder.candidates.programs import check_against, handed_over
        from envcoder.tasks import get_task

        task, candidates = get_task(self.task), []
        reply, errors = trusted_reply(name, path, reply)
        if reply["candidates"]:
            try:
                default = task_default_candidate(task, self.shaper_types) if path is None else None
                functions = default.functions if path is None else handed_over(path, reply)
                candidates = [Candidate.from_wire(verified_wire(data, path, functions, default), path and Path(path),
                                                  source, functions) for data in reply["candidates"]]
                sized = {(c.obs_dim, c.critic_obs_dim, c.reward_components): c for c in candidates}  # one a size
                for candidate in sized.values() if path is not None else ():
                    check_against(candidate, task)
            except Exception as err:  # noqa: BLE001 - a program refused here (or a damaged hand-over)
                message = one_line(err, ERROR_CHARACTERS)
                errors.update({data["name"]: message for data in reply["candidates"]})
                candidates = []
        verdict = Verdict(name, tuple(candidates), errors)
        if verdict.ok:
            self._passed[(name, source)] = verdict
            self._passed_sources[source] = (name, reply)
            first = reply["candidates"][0]
            key = self._code_key(source) if self.same_code_once and path is not None else None
            if (key is not None and first["constants_as_data"] and not first["sweep"]
                    and not any(k.endswith(":CURRICULUM") for k in first["function_keys"].values())):
                self._passed_code.setdefault(key, (name, reply))
            if not stored:
                self._store(name, source, reply, path is not None)
        return verdict

    def _renamed(self, name: str, source: str, path: str | None) -> Verdict | None:
        """The verdict of a source that passed under another name (a search trains one file again under new names:
        new seeds), or None. Its checks did not depend on the name, and nothing of it runs here."""
        if source not in self._passed_sources:
            return None
        return self._as(name, source, path, *self._passed_sources[source])

    def _same_code(self, name: str, source: str, path: str | None) -> Verdict | None:
        """With `same_code_once`, the verdict of a source whose code passed with other constants (see `__init__`),
        its programs' data its own constants; or None."""
        key = self._code_key(source) if self.same_code_once and path is not None else None
        if key is None or key not in self._passed_code:
            return None
        old, reply = self._passed_code[key]
        constants = self._keys[source][1]
        (data,) = reply["candidates"]  # no sweep
        params = {api: {k: constants[k] for k in p} for api, p in data["function_params"].items()}
        return self._as(name, source, path, old, {**reply, "candidates": [{**data, "function_params": params}]})

    def _as(self, name: str, source: str, path: str | None, old: str, reply: dict) -> Verdict:
        """The verdict of `reply` (a file's that passed under the name `old`) for `name`, nothing of it run here: the
        checks did not depend on the name (nor, with `same_code_once`, on what `reply` says of the constants)."""
        def renamed(variant: str) -> str:  # `old` and its sweep's `old[...]`
            return name + variant[len(old):]
        candidates = [{**data, "name": renamed(data["name"])} for data in reply["candidates"]]
        return self._verdict(name, source, path, {**reply, "name": name, "candidates": candidates,
                                                  "errors": {renamed(v): e for v, e in reply["errors"].items()}},
                             stored=True)

    def _verdict_file(self, name: str, source: str, weighed: bool) -> Path | None:
        """Where a passed verdict is kept: its key holds the sizes its programs were weighed at where they were
        (`weighed`: a file's; the task's own shaping has no programs to weigh)."""
        folder = verdict_cache_dir()
        if folder is None:
            return None
        key = repr((code_fingerprint(), self.task, self.shaper_types, self.timeout_s, self.memory_bytes,
                    self.platform, *([self.cost_envs] if weighed else []), name, source))
        return folder / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.json"

    def _stored(self, name: str, source: str, path: str | None) -> Verdict | None:
        """A passed verdict kept on disk by an earlier run, or None (none, or unreadable: checked anew)."""
        file = self._verdict_file(name, source, path is not None)
        try:
            verdict = self._verdict(name, source, path, json.loads(file.read_text()), stored=True)
        except Exception:  # noqa: BLE001 - a missing or damaged entry is a cache miss
            return None
        return verdict if verdict.ok else None

    def _store(self, name: str, source: str, reply: dict, weighed: bool) -> None:
        file = self._verdict_file(name, source, weighed)
        if file is not None:
            store_entry(file, json.dumps(reply).encode())

    def close(self) -> None:
        """End this validator's workers, and those started ahead (`start_workers`) that it did not take."""
        close_started()
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                return
            if worker is not None:
                worker.kill()
                with self._count:
                    self._running -= 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

