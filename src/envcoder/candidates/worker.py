"""The jailed worker's side of the sandbox (`envcoder.candidates.sandbox` is the parent's): a process that imports
what validation needs, runs no candidate code itself, and serves each request in a fresh child forked from it, locked
in by `envcoder.candidates.jail.lock` and limited.

Protocol: the parent writes one JSON header line (task, shaper types, folders, limits); the worker answers
`{"ready": true}` once the sample states are ready. Each request then gets `{"child": pid}`, `{"phase": [name,
function, step]}` lines as the child goes, one answer named as the request, and `{"exit": status}` when the child
ended:

- `{"name", "path", "source", "cpu_seconds", "platform"}`: a candidate file checked; the answer is
  `{"name", "candidates": [each variant that passed, validated: `Candidate.to_wire`], "errors": {variant: reason},
  "programs": {function: exported programs}}` (the variants share the programs). All of it is the candidate's
  process's word.
- `{"name", "path", "verify": {"programs", "claims"}, "cpu_seconds", "platform", "cost_envs"}`: a file's programs
  verified (`envcoder.candidates.verifier`) by a child that runs no candidate code; the answer is
  `{"name", "verified": {"programs", "costs"}}` or `{"name", "error"}`.
- `{"name", "work": "envcoder.module:function", "args", "cpu_seconds"}`: that function of envcoder's run on
  candidate *text* (a sweep frozen, an offline search's child written, a find flattened:
  `SandboxValidator.jailed`); the answer is `{"name", "result"}` or `{"name", "error"}`. The training process parses
  no candidate's text.

A candidate's own `print` goes to stderr, never into the protocol.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import resource
import select
import signal
import sys
import types
from pathlib import Path

from envcoder.candidates.jail import end_descendants, lock

FILE_SIZE_LIMIT = 64 * 2**20
"""Bytes a candidate's process may write to one file (its own temporary folder is the only place it can)."""

CORES = 8
"""The most CPU cores a worker (and the children it forks) runs on. XLA sizes its thread pools by the cores a process
may use, and every thread's stack counts towards a child's memory limit (`RLIMIT_DATA`): on a 64-core host a child
compiling an Ant reward failed to start threads under the default 4 GiB ("pthread_create() failed", exit -6); on 8
cores of that host it passed (docs/benchmarks/search.md). Several workers run at once, each on its own share."""


def _fewer_cores() -> None:
    """Run on at most `CORES` of the cores this process may use, a share picked by the process id so that workers
    started together spread over the machine; before anything starts a thread."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) > CORES:
        first = (os.getpid() * CORES) % len(cores)
        os.sched_setaffinity(0, [cores[(first + i) % len(cores)] for i in range(CORES)])


def _serve() -> None:
    """The worker's main loop (see the module docstring for the protocol). It imports what validation needs but
    starts no JAX backend and runs no candidate code: each file is checked in a child forked from it."""
    _fewer_cores()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything printed, by us or a candidate, goes to stderr
    sys.stdout = sys.stderr

    def reply(message: dict) -> None:
        protocol.write(json.dumps(message) + "\n")

    try:  # before the header: a worker started ahead of its validator (`pool.start_workers`) imports meanwhile
        import mujoco
        import numpy  # noqa: F401 - imported before the children fork, as everything they use

        from envcoder.candidates import expand_sweeps, load_candidate, task_default_candidate  # noqa: F401
        from envcoder.candidates import costs, handover, programs, samples, validate, verifier  # noqa: F401
        from envcoder.tasks import get_task
    except Exception as err:  # noqa: BLE001 - reported to the parent
        reply({"ready": False, "error": f"{type(err).__name__}: {err}"})
        return
    end_descendants()  # nothing to end yet; outside a PID namespace of its own, orphans are the worker's from now
    header = json.loads(sys.stdin.readline())
    if header.get("mount_scratch"):  # in its own mount namespace: the children's scratch folder, size-limited
        from envcoder.candidates.jail import mount_scratch

        mount_scratch(header["scratch"])
    if header.get("jailed_id") is not None:  # the candidates' processes write there as the uid that owns nothing
        os.chown(header["scratch"], header["jailed_id"], header["jailed_id"])
    try:
        task = get_task(header["task"])
        mj_model = mujoco.MjModel.from_xml_path(str(task.model_file))
    except Exception as err:  # noqa: BLE001 - reported to the parent
        reply({"ready": False, "error": f"{type(err).__name__}: {err}"})
        return
    code = _in_child(lambda _: _warm_up(header, task, mj_model), reply, protocol)
    if code != 0:
        reply({"ready": False, "error": f"preparing the sample states failed (exit {code})"})
        return
    reply({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        if "work" in request:
            _in_child(lambda answer: _work(header, request, answer), reply, protocol, request["name"])
        elif "verify" in request:
            _in_child(lambda answer: _verify(header, task, request, answer), reply, protocol, request["name"])
        else:
            _in_child(lambda answer: _check_file(header, task, mj_model, request, answer), reply, protocol,
                      request["name"])


MAX_REPLY_BYTES = 256 * 2**20
"""The most a child may send back (its programs, as text): beyond it, its verdict is lost and it counts as died."""


def _in_child(work, reply, protocol, name: str | None = None) -> int:
    """Run `work(child_reply)` in a forked child (a clean copy of this process) in a process group of its own, and
    wait for it; its exit status. The child has no stdin and not the protocol: its lines come through a pipe of its
    own, and only its phases and one verdict named `name` are passed on, so that it cannot answer for another
    file. Whatever it started is killed when it ends."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.setsid()
            os.close(read_end)
            os.close(protocol.fileno())
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            out = os.fdopen(write_end, "w", buffering=1)
            work(lambda message: out.write(json.dumps(message) + "\n"))
            out.flush()
            status = 0
        except BaseException:  # noqa: BLE001 - the traceback goes to stderr, the status to the parent
            import traceback

            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(status)
    os.close(write_end)
    reply({"child": pid})
    buffer, answered, exited = b"", False, None
    while exited is None:
        ready, _, _ = select.select([read_end], [], [], 0.2)
        chunk = os.read(read_end, 1 << 20) if ready else b""
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            exited = os.waitstatus_to_exitcode(status)
        buffer += chunk
        if exited is not None:  # what it wrote before it ended
            os.set_blocking(read_end, False)
            with contextlib.suppress(BlockingIOError):
                while more := os.read(read_end, 1 << 20):
                    buffer += more
                    if len(buffer) > MAX_REPLY_BYTES:
                        break
        if len(buffer) > MAX_REPLY_BYTES:
            buffer = b""
            answered = True  # nothing more of it is passed on
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            answered = _pass_on(line, name, answered, reply)
    os.close(read_end)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    end_descendants()
    reply({"exit": exited})
    return exited


def _pass_on(line: bytes, name: str | None, answered: bool, reply) -> bool:
    """Pass one of a child's lines to the parent if it is a phase or the first verdict on `name`; whether the verdict
    has been passed on."""
    try:
        message = json.loads(line)
    except ValueError:
        return answered
    if answered or not isinstance(message, dict):
        return answered
    if set(message) == {"phase"} and isinstance(message["phase"], list) and len(message["phase"]) == 3 \
            and all(isinstance(x, str) for x in message["phase"]):
        reply(message)
        return False
    if name is not None and message.get("name") == name and (
            {"candidates", "errors", "programs"} <= set(message)
            or set(message) in ({"name", "result"}, {"name", "error"}, {"name", "verified"})):
        reply(message)
        return True
    return answered


def _use_cache(directory: str, write: bool) -> None:
    """JAX's compilation cache of the parent: written only by the trusted warm-up, read by the candidates' children
    (a program a candidate's process wrote there could be loaded by the training process)."""
    import jax

    if directory:
        jax.config.update("jax_compilation_cache_dir", directory)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0 if write else 1e9)


def _warm_up(header: dict, task, mj_model) -> None:
    """The first child, before any candidate's code: the sample states (those shipped for the task where they are
    this code's, `envcoder.candidates.samples`, else `rollout_states`; kept in `states_file` for the children and
    later runs) and the task's own functions compiled once into the cache."""
    import jax
    import numpy as np

    from envcoder.candidates import task_default_candidate
    from envcoder.candidates.samples import state_bytes, task_states
    from envcoder.candidates.validate import validate_candidate
    from envcoder.compile_cache import store_entry

    _use_cache(header["cache_dir"], write=True)
    path = Path(header["states_file"])
    try:
        states = dict(np.load(path, allow_pickle=False))
    except (OSError, ValueError):
        states = task_states(task)  # shipped, or rolled out here where stale (MJX imported, the model built)
        if not path.exists() and not store_entry(path, state_bytes(states)):
            raise RuntimeError(f"cannot write the sample states to {path}")
    if header["cache_dir"]:
        simulator = types.SimpleNamespace(mj_model=mj_model)
        validate_candidate(task, simulator, task_default_candidate(task, header["shaper_types"]),
                           jax.device_put(states))


def _check_file(header: dict, task, mj_model, request: dict, reply) -> None:
    """One candidate file in a child: locked in (`envcoder.candidates.jail`), limited, then read, loaded, validated
    variant by variant and exported; one verdict line."""
    states_file = header["states_file"]
    lock(header["scratch"], readable=tuple(p for p in (header["cache_dir"], str(Path(states_file).parent)) if p),
         jailed_id=header.get("jailed_id"))
    _limit(header["memory_bytes"], request["cpu_seconds"], header.get("user_namespace", False))
    import jax
    import numpy as np

    from envcoder.candidates import CandidateError, expand_sweeps, load_candidate, task_default_candidate

    _use_cache(header["cache_dir"], write=False)
    states = jax.device_put(dict(np.load(states_file, allow_pickle=False)))
    simulator = types.SimpleNamespace(mj_model=mj_model)
    name, path, shaper_types = request["name"], request["path"], tuple(header["shaper_types"])
    outcomes = []
    for lift in (True, False):  # its float constants as data; else (one needed as a Python number) literals
        validated, errors, programs = [], {}, {}
        try:
            base = (task_default_candidate(task, shaper_types) if path is None else
                    load_candidate(Path(path), shaper_types, name=name, source=request["source"], lift=lift,
                                   task=task))
            variants = [base] if path is None else expand_sweeps([base])
        except BaseException as err:  # noqa: BLE001 - a CandidateError, or whatever else the file's code raised
            errors[name] = str(err) if isinstance(err, CandidateError) else f"{path}: {type(err).__name__}: {err}"
            base, variants = None, []
        for candidate in variants:
            _validate(task, simulator, states, candidate, path, reply, validated, errors)
        if validated and path is not None:
            try:
                programs = _export(task, states, base, validated[0], request["platform"], reply)
            except CandidateError as err:
                errors.update({c.name: str(err) for c in validated})
                validated = []
        outcomes.append((len(errors), not lift, validated, errors, programs))
        if not errors or base is None or not any(c.function_params for c in variants):
            break
    _, _, validated, errors, programs = min(outcomes, key=lambda o: o[:2])  # fewer failures; data first
    reply({"name": name, "candidates": [c.to_wire() for c in validated], "errors": errors, "programs": programs})


PROCESS_LIMIT = 256
"""The most processes and threads that a child's user may have at once in the worker's user namespace: a fork storm
(300 double-forked daemons made 439 processes) ends there, well above what XLA's thread pools need on `CORES` cores."""


def _limit(memory_bytes: int, cpu_seconds: int, processes: bool = False) -> None:
    """A child's limits: its memory, its CPU time, one file's size, no core dump, and with `processes` (the worker
    has a user namespace of its own, where the count is the jail's alone) `PROCESS_LIMIT`."""
    if processes:
        resource.setrlimit(resource.RLIMIT_NPROC, (PROCESS_LIMIT, PROCESS_LIMIT))
    resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _work(header: dict, request: dict, reply) -> None:
    """One function of envcoder's (`request["work"]`, "module:function") on candidate text, in a child locked in and
    limited as a file's is; its result (JSON) or its error in one line. What it reads is candidate text, so parsing
    it may raise anything or exhaust the limits: never in the training process."""
    lock(header["scratch"], jailed_id=header.get("jailed_id"))
    _limit(header["memory_bytes"], request["cpu_seconds"], header.get("user_namespace", False))
    module, _, function = request["work"].partition(":")
    if module.split(".")[0] != "envcoder":
        raise ValueError(f"not envcoder's: {request['work']}")
    work = getattr(importlib.import_module(module), function)
    try:
        result = work(**request["args"])
    except Exception as err:  # noqa: BLE001 - the candidate text's fault, reported to the parent
        from envcoder.shaping.api import CandidateError

        message = str(err) if isinstance(err, (CandidateError, ValueError)) and str(err) else (
            f"{type(err).__name__}: {err}")
        reply({"name": request["name"], "error": message})
        return
    reply({"name": request["name"], "result": result})


def _export(task, states, base, first, platform: str, reply) -> dict:
    """The file's functions as programs (`envcoder.candidates.programs`), traced as its first validated variant
    `first` (its sizes, its constants' names), each checked against its function on the sample states."""
    import jax
    import jax.numpy as jnp

    from envcoder.candidates import CandidateError, api_callable, resolve_functions
    from envcoder.candidates.handover import check_handover
    from envcoder.candidates.programs import Program, abstract_arguments, export_function
    from envcoder.shaping.api import SHAPING_TYPES
    from envcoder.shaping.curriculum import CURRICULUM_METRICS

    file = str(base.path)
    nan = {n: jnp.float32(jnp.nan) for n in CURRICULUM_METRICS}
    curriculum = jax.eval_shape(resolve_functions(first, task.defaults)["curriculum"], jnp.float32(0), nan, None)
    curriculum = {n: tuple(v.shape) for n, v in (curriculum or {}).items()}
    programs = {}
    for api, fn in base.functions.items():
        reply({"phase": [first.name, api, "exporting"]})
        arguments = abstract_arguments(api, states, first.action_dim, task.discrete, curriculum)
        own = first.function_params.get(api, {})
        programs[api] = export_function(api_callable(api, fn), list(own), arguments, platform, file, api)
        reply({"phase": [first.name, api, "running its program"]})
        check_handover(api_callable(api, fn), own, programs[api], arguments, states, file, api)
        kind = SHAPING_TYPES.get(api)
        size = getattr(first, kind.size) if kind is not None and kind.size else None
        if size is not None:  # traced with the policy's own action in state["actions"]: the size validated?
            (out,) = Program(programs[api], file, api).exported[0].out_avals
            if out.shape[-1] != size:
                raise CandidateError(file, f"returns {out.shape[-1]} features when state['actions'] holds the "
                                           f"policy's {first.action_dim} action entries, {size} on the sample "
                                           "state: its size must not depend on the action's", function=api)
    return programs


def _verify(header: dict, task, request: dict, reply) -> None:
    """A file's hand-over verified (`envcoder.candidates.verifier.verify_handover`) in a child that runs no candidate
    code, locked in and limited as a candidate's is: it parses what a candidate's process wrote. One answer: the
    verified programs and their costs, or why they are refused."""
    states_file = header["states_file"]
    lock(header["scratch"], readable=tuple(p for p in (header["cache_dir"], str(Path(states_file).parent)) if p),
         jailed_id=header.get("jailed_id"))
    _limit(header["memory_bytes"], request["cpu_seconds"], header.get("user_namespace", False))
    import numpy as np

    from envcoder.candidates.verifier import verify_handover
    from envcoder.shaping.api import CandidateError

    _use_cache(header["cache_dir"], write=False)
    name, verify = request["name"], request["verify"]
    states = dict(np.load(states_file, allow_pickle=False))
    try:
        verified = verify_handover({**verify, "path": request["path"], "platform": request["platform"],
                                    "cost_envs": request["cost_envs"]}, task, states,
                                   lambda api, step: reply({"phase": [name, api, step]}))
    except CandidateError as err:
        reply({"name": name, "error": str(err)})
        return
    except Exception as err:  # noqa: BLE001 - hostile bytes the deserializer choked on: this file's, not the run's
        reply({"name": name, "error": f"{request['path']}: its programs cannot be verified: {type(err).__name__}: "
                                      f"{str(err)[:300]}"})
        return
    reply({"name": name, "verified": verified})


def _validate(task, simulator, states, candidate, path, reply, validated: list, errors: dict) -> None:
    """One variant validated in the child: the record with its sizes into `validated`, or its reason into `errors`;
    `reply` reports the phases (a hang names its function)."""
    from envcoder.candidates import CandidateError
    from envcoder.candidates.files import check_length
    from envcoder.candidates.validate import validate_candidate

    def on_phase(function, step):
        reply({"phase": [candidate.name, function, step]})
    try:
        check_length(candidate.name, str(path))  # a sweep variant's name holds its values
        validated.append(validate_candidate(task, simulator, candidate, states, on_phase))
    except CandidateError as err:
        errors[candidate.name] = str(err)
    except BaseException as err:  # noqa: BLE001 - MemoryError, RecursionError, ...: the candidate's fault
        errors[candidate.name] = f"{path}: {type(err).__name__}: {err}"


if __name__ == "__main__":
    _serve()
