"""Shaping candidates: loading a candidate file safely and resolving its functions against task defaults.

A candidate is one Python file that defines any subset of the shaping API (`SHAPER_TYPES`). Candidate
code is untrusted (it is often written by an LLM), so a file is checked statically before it runs:
only allow-listed imports, no file/OS/network access, no `eval`/`exec`, no dunder access. It then runs
in a namespace with a restricted set of builtins, under a time limit.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import math
import signal
import threading
from pathlib import Path
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp

from envcoder.shaping.helpers import HELPERS

SHAPER_TYPES = (
    "compute_reward",
    "compute_observation",
    "compute_torque",
    "compute_terminal",
    "sample_initial_state",
    "sample_goal",
)
"""Every function of the shaping API, in the order they are documented."""

ALIASES = {"compute_action": "compute_torque"}
"""Other names accepted for API functions (EnvCoderBench spells the action mapping `compute_action`)."""

SIGNATURES = {
    "compute_reward": ("state",),
    "compute_observation": ("state",),
    "compute_torque": ("action", "state"),
    "compute_terminal": ("state",),
    "sample_initial_state": ("key", "state"),
    "sample_goal": ("key", "state"),
}

ALLOWED_IMPORTS = {"jax", "jax.numpy", "jax.lax", "jax.random", "jax.nn", "math", "envcoder.shaping.helpers"}
"""Modules a candidate may import."""

FORBIDDEN_NAMES = {
    "eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "input", "breakpoint", "exit", "quit", "memoryview", "help", "dir", "type", "object",
}
"""Builtins that a candidate may not name: they reach outside the sandbox or around its checks."""

SAFE_BUILTINS = {
    name: getattr(__builtins__, name) if not isinstance(__builtins__, dict) else __builtins__[name]
    for name in (
        "abs", "all", "any", "bool", "dict", "enumerate", "float", "int", "isinstance", "len", "list",
        "max", "min", "pow", "range", "reversed", "round", "sorted", "sum", "tuple", "zip", "map", "filter",
        "ValueError", "TypeError", "KeyError", "IndexError", "ZeroDivisionError", "Exception",
        "True", "False", "None", "slice", "str", "print", "set", "frozenset", "divmod",
    )
}

LOAD_TIME_LIMIT_S = 10.0
"""Seconds a candidate file may take to execute its module-level code."""


class CandidateError(Exception):
    """A candidate that cannot be used, with where and why. `str()` is the one-line report."""

    def __init__(self, file: str, reason: str, function: str | None = None, line: int | None = None):
        self.file, self.reason, self.function, self.line = file, reason, function, line
        where = file + (f":{line}" if line else "") + (f" in {function}()" if function else "")
        super().__init__(f"{where}: {reason}")


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One shaping candidate: the functions it overrides, and where they came from."""

    name: str
    """Unique name in a run (the file's stem); PRNG keys derive from it, never from a position."""
    path: Path | None
    """The candidate file, or None for the task's defaults."""
    source: str
    """The file's full text, copied into the run directory."""
    functions: Mapping[str, Callable]
    """The overriding functions, by API name (only the selected shaper types)."""
    code_key: str
    """Hash of the code; candidates with equal keys share one trace, vmapped over their groups."""
    action_dim: int | None = None
    """Policy action size declared by the file as `ACTION_DIM` (with a custom `compute_torque`)."""


@contextlib.contextmanager
def time_limit(seconds: float, what: str):
    """Raise TimeoutError if the block runs longer than `seconds` (main thread only; elsewhere no limit)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_alarm(signum, frame):
        raise TimeoutError(f"{what} took longer than {seconds:g} s (an endless loop?)")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_source(tree: ast.AST, file: str) -> None:
    """Static checks: allow-listed imports only, no forbidden builtins, no dunder names or attributes."""
    for node in ast.walk(tree):
        line = getattr(node, "lineno", None)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_IMPORTS:
                    raise CandidateError(file, f"import of {alias.name!r} is not allowed; allowed modules: "
                                               f"{', '.join(sorted(ALLOWED_IMPORTS))}", line=line)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}"
                if module not in ALLOWED_IMPORTS and full not in ALLOWED_IMPORTS or node.level:
                    raise CandidateError(file, f"import from {module!r} is not allowed; allowed modules: "
                                               f"{', '.join(sorted(ALLOWED_IMPORTS))}", line=line)
        elif isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or node.id.startswith("__")):
            raise CandidateError(file, f"use of {node.id!r} is not allowed in candidate code", line=line)
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise CandidateError(file, f"access to the private attribute {node.attr!r} is not allowed", line=line)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            raise CandidateError(file, "global/nonlocal statements are not allowed: shaping functions must be pure",
                                 line=line)


def _restricted_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level or name not in ALLOWED_IMPORTS and not any(f"{name}.{item}" in ALLOWED_IMPORTS for item in fromlist or ()):
        raise ImportError(f"import of {name!r} is not allowed in candidate code")
    return __import__(name, globals, locals, fromlist, level)


def candidate_namespace() -> dict:
    """The globals a candidate's code runs in: restricted builtins, jax, jnp, math and the helpers."""
    builtins = dict(SAFE_BUILTINS, __import__=_restricted_import)
    return {"__builtins__": builtins, "__name__": "candidate", "jax": jax, "jnp": jnp, "math": math, **HELPERS}


def _check_signature(fn: ast.FunctionDef, api_name: str, file: str) -> None:
    expected = SIGNATURES[api_name]
    args = fn.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    required = len(positional) - len(args.defaults)
    if args.vararg is None and (len(positional) < len(expected) or required > len(expected)):
        raise CandidateError(file, f"wrong signature: takes ({', '.join(positional)}), "
                                   f"the API calls it as {api_name}({', '.join(expected)})",
                             function=fn.name, line=fn.lineno)


def load_candidate(path: str | Path, shaper_types: Sequence[str] = ("compute_reward",), name: str | None = None,
                   source: str | None = None) -> Candidate:
    """Load one candidate file, keeping only the functions of `shaper_types`.

    Raises `CandidateError` naming the file, function and reason for any problem.
    """
    path = Path(path)
    file = str(path)
    if source is None:
        try:
            source = path.read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise CandidateError(file, f"cannot read the file: {err}") from None
    try:
        tree = ast.parse(source, filename=file)
    except SyntaxError as err:
        raise CandidateError(file, f"syntax error: {err.msg}", line=err.lineno) from None
    check_source(tree, file)

    defined = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    wanted = {}
    for fn_name, node in defined.items():
        api_name = ALIASES.get(fn_name, fn_name)
        if api_name in shaper_types:
            _check_signature(node, api_name, file)
            wanted[api_name] = fn_name
    if not wanted:
        near = [n for n in defined if n not in SIGNATURES and n not in ALIASES and n.startswith(("compute", "sample"))]
        hint = f" (found {', '.join(near)}: misspelled?)" if near else ""
        raise CandidateError(file, f"defines none of the selected shaping functions "
                                   f"{', '.join(shaper_types)}{hint}")

    namespace = candidate_namespace()
    try:
        with time_limit(LOAD_TIME_LIMIT_S, "running the file's module-level code"):
            exec(compile(tree, file, "exec"), namespace)  # noqa: S102 - sandboxed: checked tree, restricted builtins
    except CandidateError:
        raise
    except BaseException as err:  # the file's own top-level code failed
        raise CandidateError(file, f"module-level code failed: {type(err).__name__}: {err}") from None

    action_dim = namespace.get("ACTION_DIM")
    if action_dim is not None and (not isinstance(action_dim, int) or action_dim < 1):
        raise CandidateError(file, f"ACTION_DIM must be a positive int, got {action_dim!r}")
    code_key = hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]
    return Candidate(
        name=name or path.stem,
        path=path,
        source=source,
        functions={api: namespace[fn_name] for api, fn_name in wanted.items()},
        code_key=code_key,
        action_dim=action_dim,
    )


@dataclasses.dataclass(frozen=True)
class LoadFailure:
    """A candidate file left out of a run, and why."""

    file: str
    name: str
    error: str


def load_candidates(directory: str | Path, shaper_types: Sequence[str]) -> tuple[list[Candidate], list[LoadFailure]]:
    """Load every `*.py` file of `directory` (sorted by name); failures are returned, not raised."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"candidate directory {str(directory)!r} does not exist")
    files = sorted(p for p in directory.glob("*.py") if not p.name.startswith("_"))
    if not files:
        raise FileNotFoundError(f"candidate directory {str(directory)!r} has no .py candidate files")
    candidates, failures = [], []
    for file in files:
        try:
            candidates.append(load_candidate(file, shaper_types))
        except CandidateError as err:
            failures.append(LoadFailure(file=str(file), name=file.stem, error=str(err)))
    return candidates, failures


def resolve_functions(candidate: Candidate, defaults: Mapping[str, Callable]) -> dict[str, Callable]:
    """The full set of shaping functions for a candidate: its own, and the task's defaults for the rest."""
    return {api: candidate.functions.get(api, defaults[api]) for api in SHAPER_TYPES}


def function_key(candidate: Candidate, api_name: str) -> str:
    """Identity of the code behind one API function of a candidate ('default' when it uses the task's)."""
    return candidate.code_key if api_name in candidate.functions else "default"
