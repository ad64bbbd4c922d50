"""Shaping candidates: loading a candidate file safely and resolving its functions against task defaults.

A candidate is one Python file that defines any subset of the shaping API (`SHAPER_TYPES`). Candidate
code is untrusted (it is often written by an LLM), so a file is checked statically before it runs:
only allow-listed imports, no file/OS/network access, no `eval`/`exec`, no dunder access. It then runs
in a namespace with a restricted set of builtins and views of the allowed modules (`ModuleView`), under a
time limit. Validation in a worker process (`envcoder.search.sandbox`) comes before any of it runs in a
training process.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import hashlib
import inspect
import itertools
import math
import re
import signal
import threading
import types
from pathlib import Path
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp

from envcoder.shaping.curriculum import TableError, parse_table, table_curriculum, table_sampler
from envcoder.shaping.helpers import HELPERS

SHAPER_TYPES = (
    "compute_reward",
    "compute_observation",
    "compute_critic_observation",
    "compute_torque",
    "compute_terminal",
    "sample_initial_state",
    "sample_goal",
    "sample_physics",
    "curriculum",
)
"""Every function of the shaping API, in the order they are documented."""

ALIASES = {"compute_action": "compute_torque"}
"""Other names accepted for API functions (EnvCoderBench spells the action mapping `compute_action`)."""

SIGNATURES = {
    "compute_reward": ("state",),
    "compute_observation": ("state",),
    "compute_critic_observation": ("state",),
    "compute_torque": ("action", "state"),
    "compute_terminal": ("state",),
    "sample_initial_state": ("key", "state"),
    "sample_goal": ("key", "state"),
    "sample_physics": ("key", "params"),
    "curriculum": ("iteration", "metrics"),
}
FALLBACKS = {"compute_critic_observation": "compute_observation"}
"""API functions that, where neither the candidate nor the task defines them, are the candidate's own function of
another API: a critic without observations of its own reads the actor's (a symmetric actor-critic)."""
OPTIONAL_ARGUMENTS = {"curriculum": ("params",)}
"""Arguments an API function may also take: a curriculum that takes `params` gets its own previous values."""

ALLOWED_IMPORTS = {"jax", "jax.numpy", "jax.lax", "jax.random", "jax.nn", "math", "envcoder.shaping.helpers"}
"""Modules a candidate may import."""

FORBIDDEN_NAMES = {
    "eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "input", "breakpoint", "exit", "quit", "memoryview", "help", "dir", "type", "object",
}
"""Builtins that a candidate may not name: they reach outside the sandbox or around its checks."""

FORBIDDEN_ATTRIBUTES = {
    "save", "savez", "savez_compressed", "load", "loadtxt", "savetxt", "genfromtxt", "fromfile", "tofile",
    "memmap", "DataSource", "config", "experimental", "distributed", "profiler", "pure_callback", "io_callback",
    "callback", "ffi", "extend", "dlpack", "lib", "tools", "monitoring", "clear_caches", "live_arrays",
    "format", "format_map", "set_printoptions", "printoptions", "breakpoint",
}
"""Attributes that reach files, the host or the runtime, or read attributes by name (`str.format`'s
`{0.attr}` fields); shaping needs none of them."""

ALLOWED_MODULES = ("jax.numpy", "jax.lax", "jax.random", "jax.nn", "jax.scipy", "jax.tree", "jax.tree_util",
                   "jax.dtypes", "jax.image", "jax.ops", "math", "envcoder.shaping.helpers")
"""Modules (and their submodules) that candidate code may reach by attribute, e.g. `jax.numpy.linalg`."""

JAX_ATTRIBUTES = {
    "numpy", "lax", "random", "nn", "scipy", "tree", "tree_util", "dtypes", "image", "ops", "Array", "vmap", "jit",
    "grad", "value_and_grad", "jacobian", "jacfwd", "jacrev", "hessian", "jvp", "vjp", "linearize", "checkpoint",
    "remat", "eval_shape", "custom_jvp", "custom_vjp", "named_call", "ShapeDtypeStruct", "float0",
}
"""What candidate code may use of the top-level `jax` module (its transformations and the allowed modules)."""

MUTATING_METHODS = {"update", "pop", "popitem", "clear", "setdefault", "append", "extend", "insert", "remove",
                    "sort", "reverse", "add", "discard"}
"""Methods that change a dict, list or set in place."""

NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
"""A candidate file's name (without `.py`): it becomes a directory name and a label in every record."""

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
    """Hash of the candidate's code (all its files)."""
    function_keys: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Identity of each function's code, by API name: groups whose function has the same key share one
    trace, vmapped over them."""
    action_dim: int | None = None
    """Policy action size declared by the file as `ACTION_DIM` (otherwise inferred from `compute_torque`)."""
    sweep: Mapping[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
    """The file's `PARAMS` table: constant name -> values to sweep (expanded by `expand_sweeps`)."""
    params: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """This variant's values of the swept constants (empty when the file sweeps nothing)."""
    function_params: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    """The swept constants each function sees, by API name (a crossed candidate mixes files)."""
    providers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Of a crossed candidate: which file's candidate (variant) provides each function, by API name."""


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
    """Static checks: allow-listed imports only, no forbidden builtins, no dunder names or attributes, no
    assignment to attributes (a module's or a helper's: shared with the other candidates), and no shaping
    function that changes its arguments in place."""
    for node in ast.walk(tree):
        line = getattr(node, "lineno", None)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_IMPORTS:
                    raise CandidateError(file, f"import of {alias.name!r} is not allowed; allowed modules: "
                                               f"{', '.join(sorted(ALLOWED_IMPORTS))}", line=line)
                if alias.name.startswith("envcoder.") and alias.asname is None:
                    raise CandidateError(file, f"`import {alias.name}` would bind the whole envcoder package; "
                                               f"write `from {alias.name} import NAME`", line=line)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}"
                if module not in ALLOWED_IMPORTS and full not in ALLOWED_IMPORTS or node.level:
                    raise CandidateError(file, f"import from {module!r} is not allowed; allowed modules: "
                                               f"{', '.join(sorted(ALLOWED_IMPORTS))}", line=line)
                if alias.name == "*" or alias.name.startswith("_") or alias.name in FORBIDDEN_ATTRIBUTES or (
                        module == "jax" and alias.name not in JAX_ATTRIBUTES):
                    raise CandidateError(file, f"`from {module} import {alias.name}` is not allowed in candidate "
                                               "code (file, host or runtime access)", line=line)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            raise CandidateError(file, f"assigning to the attribute .{node.attr} is not allowed: it would change a "
                                       "module or object shared with the other candidates", line=line)
        elif isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or node.id.startswith("__")):
            raise CandidateError(file, f"use of {node.id!r} is not allowed in candidate code", line=line)
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise CandidateError(file, f"access to the private attribute {node.attr!r} is not allowed", line=line)
        elif isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            why = ("str.format reads attributes by name: use an f-string" if node.attr.startswith("format")
                   else "file, host or runtime access")
            raise CandidateError(file, f"use of .{node.attr} is not allowed in candidate code ({why})", line=line)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            raise CandidateError(file, "global/nonlocal statements are not allowed: shaping functions must be pure",
                                 line=line)
    module_names = {t.id for node in getattr(tree, "body", ()) if isinstance(node, (ast.Assign, ast.AnnAssign))
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.Lambda)):
            _check_no_mutation(fn, module_names, file)


def _check_no_mutation(fn: ast.FunctionDef | ast.Lambda, module_names: set[str], file: str) -> None:
    """A function may not change its arguments (the state mapping above all) or module-level values in place:
    the state it is given is the one the other shaping functions read."""
    args = fn.args
    params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    local = {t.id for node in ast.walk(fn) if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For))
             for t in ast.walk(node.targets[0] if isinstance(node, ast.Assign) else node.target)
             if isinstance(t, ast.Name)} - params
    shared = params | (module_names - local)
    name = getattr(fn, "name", "lambda")
    for node in ast.walk(fn):
        target, how = None, None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
            target, how = node.value, "item assignment" if isinstance(node.ctx, ast.Store) else "del"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in MUTATING_METHODS):
            target, how = node.func.value, f".{node.func.attr}()"
        if isinstance(target, ast.Name) and target.id in shared:
            what = "its argument" if target.id in params else "the module-level value"
            raise CandidateError(file, f"changes {what} {target.id!r} in place ({how}); shaping functions must not "
                                       "change what they are given: build a new value, e.g. {**state, 'key': value}",
                                 function=name, line=node.lineno)


class ModuleView:
    """What candidate code sees of an allowed module: its attributes, except the forbidden ones (and of `jax`
    only `JAX_ATTRIBUTES`); a submodule only as another view, and only one of `ALLOWED_MODULES`. Nothing can
    be assigned to it. The static checks refuse most escapes with a line number; this refuses the rest
    (an alias of a module, a chain of attributes) when the code runs."""

    __slots__ = ("_module",)

    def __init__(self, module: types.ModuleType):
        object.__setattr__(self, "_module", module)

    def __getattr__(self, name: str):
        module = object.__getattribute__(self, "_module")
        where = f"{module.__name__}.{name}"
        if name.startswith("_") or name in FORBIDDEN_ATTRIBUTES or (module.__name__ == "jax"
                                                                   and name not in JAX_ATTRIBUTES):
            raise AttributeError(f"{where} is not available to candidate code")
        value = getattr(module, name)
        if isinstance(value, types.ModuleType):
            if not _allowed_module(value.__name__):
                raise AttributeError(f"{where} is not available to candidate code")
            return ModuleView(value)
        return value

    def __setattr__(self, name, value):
        raise AttributeError(f"candidate code may not change the module {object.__getattribute__(self, '_module').__name__}")

    __delattr__ = __setattr__

    def __repr__(self) -> str:
        return f"<module {object.__getattribute__(self, '_module').__name__!r} (candidate view)>"


def _allowed_module(name: str) -> bool:
    return name == "jax" or any(name == m or name.startswith(m + ".") for m in ALLOWED_MODULES)


def _restricted_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level or name not in ALLOWED_IMPORTS and not any(f"{name}.{item}" in ALLOWED_IMPORTS for item in fromlist or ()):
        raise ImportError(f"import of {name!r} is not allowed in candidate code")
    if name.startswith("envcoder.") and not fromlist:
        raise ImportError(f"write `from {name} import NAME`")
    return ModuleView(__import__(name, globals, locals, fromlist, level))


def candidate_namespace() -> dict:
    """The globals a candidate's code runs in: restricted builtins, views of jax, jnp and math, and the helpers."""
    builtins = dict(SAFE_BUILTINS, __import__=_restricted_import)
    return {"__builtins__": builtins, "__name__": "candidate", "jax": ModuleView(jax), "jnp": ModuleView(jnp),
            "math": ModuleView(math), **HELPERS}


def _check_signature(fn: ast.FunctionDef, api_name: str, file: str) -> None:
    expected = SIGNATURES[api_name]
    optional = OPTIONAL_ARGUMENTS.get(api_name, ())
    args = fn.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    required = len(positional) - len(args.defaults)
    if args.vararg is None and (len(positional) < len(expected) or required > len(expected) + len(optional)):
        also = f" (or {api_name}({', '.join(expected + optional)}))" if optional else ""
        raise CandidateError(file, f"wrong signature: takes ({', '.join(positional)}), "
                                   f"the API calls it as {api_name}({', '.join(expected)}){also}",
                             function=fn.name, line=fn.lineno)


def api_callable(api_name: str, fn: Callable) -> Callable:
    """`fn` as the trainer calls it: with every argument of the API, its optional ones included (which `fn` may
    ignore), and `sample_physics` with the keys of all environments `[E, 2]` (it is written for one)."""
    if api_name == "sample_physics":  # written for one environment; called with every environment's key
        @functools.wraps(fn)
        def per_environment(keys, params):
            return jax.vmap(lambda key: fn(key, params))(keys)
        return per_environment
    optional = OPTIONAL_ARGUMENTS.get(api_name, ())
    if not optional:
        return fn
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return fn
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return fn
    accepted = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)
    takes = SIGNATURES[api_name] + optional
    if accepted >= len(takes):
        return fn

    @functools.wraps(fn)
    def call(*args):
        return fn(*args[:accepted])
    return call


def check_name(name: str, file: str) -> None:
    """A candidate's name becomes a directory name and a label: letters, digits, `_`, `-` and `.` only."""
    if not NAME_PATTERN.fullmatch(name):
        raise CandidateError(file, f"the file name {name + '.py'!r} has characters other than letters, digits, '_', "
                                   "'-' and '.' (candidate names become directory names and labels): rename the file")


def read_source(path: Path) -> str:
    """A candidate file's text (UTF-8), or a `CandidateError` that says why it cannot be used."""
    file = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise CandidateError(file, f"cannot read the file: {err.strerror or err}") from None
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CandidateError(file, f"is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}): save "
                                   "it as UTF-8") from None
    if not source.strip():
        raise CandidateError(file, "the file is empty: write at least one shaping function")
    return source


def check_statically(source: str, file: str, shaper_types: Sequence[str]) -> tuple[ast.Module, dict[str, str]]:
    """Every check that needs no execution: syntax, the sandbox rules of `check_source`, and that the file
    defines at least one selected function with the API's signature.

    Returns the parsed tree and `{api name: function name}` of the selected functions it defines.
    """
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
    if not wanted and "curriculum" in shaper_types and _assigns(tree, "CURRICULUM"):
        return tree, wanted
    if not wanted:
        near = [n for n in defined if n not in SIGNATURES and n not in ALIASES and n.startswith(("compute", "sample"))]
        hint = f" (found {', '.join(near)}: misspelled?)" if near else ""
        raise CandidateError(file, f"defines none of the selected shaping functions "
                                   f"{', '.join(shaper_types)}{hint}")
    return tree, wanted


def _assigns(tree: ast.Module, name: str) -> bool:
    """Whether the module's top level assigns `name`."""
    return any(isinstance(t, ast.Name) and t.id == name for node in tree.body if isinstance(node, ast.Assign)
               for t in node.targets)


def load_candidate(path: str | Path, shaper_types: Sequence[str] = ("compute_reward",), name: str | None = None,
                   source: str | None = None) -> Candidate:
    """Load one candidate file, keeping only the functions of `shaper_types`.

    Raises `CandidateError` naming the file, function and reason for any problem.
    """
    path = Path(path)
    file = str(path)
    check_name(name or path.stem, file)
    source = read_source(path) if source is None else source
    tree, wanted = check_statically(source, file, shaper_types)

    namespace = candidate_namespace()
    try:
        with time_limit(LOAD_TIME_LIMIT_S, "running the file's module-level code"):
            exec(compile(tree, file, "exec"), namespace)  # noqa: S102 - sandboxed: checked tree, restricted builtins
    except CandidateError:
        raise
    except BaseException as err:  # the file's own top-level code failed
        raise CandidateError(file, f"module-level code failed: {type(err).__name__}: {err}") from None

    functions = {api: namespace[fn_name] for api, fn_name in wanted.items()}
    code_key = hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:16]
    function_keys = {api: f"{code_key}:{fn_name}" for api, fn_name in wanted.items()}
    if "CURRICULUM" in namespace and "curriculum" in shaper_types:
        if "curriculum" in functions:
            raise CandidateError(file, "defines both curriculum() and a CURRICULUM table: keep one")
        try:
            table = parse_table(namespace["CURRICULUM"], defines_sampler="sample_physics" in functions)
        except TableError as err:
            raise CandidateError(file, str(err)) from None
        functions["curriculum"], function_keys["curriculum"] = table_curriculum(table), f"{code_key}:CURRICULUM"
        if "sample_physics" not in functions and "sample_physics" in shaper_types:
            functions["sample_physics"] = table_sampler(table)
            function_keys["sample_physics"] = f"{code_key}:CURRICULUM"

    action_dim = namespace.get("ACTION_DIM")
    if action_dim is not None and (not isinstance(action_dim, int) or action_dim < 1):
        raise CandidateError(file, f"ACTION_DIM must be a positive int, got {action_dim!r}")
    return Candidate(
        name=name or path.stem,
        path=path,
        source=source,
        functions=functions,
        code_key=code_key,
        function_keys=function_keys,
        action_dim=action_dim,
        sweep=_parse_sweep(namespace.get("PARAMS"), namespace, file),
    )


def _parse_sweep(table, namespace: dict, file: str) -> dict[str, tuple[float, ...]]:
    """Check a `PARAMS = {"NAME": [values...]}` table; each NAME is a module-level constant."""
    if table is None:
        return {}
    if not isinstance(table, dict) or not table:
        raise CandidateError(file, "PARAMS must be a non-empty dict of constant name -> list of values")
    sweep = {}
    for key, values in table.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise CandidateError(file, f"PARAMS key {key!r} must be the name of a module-level constant")
        if key not in namespace:
            raise CandidateError(file, f"PARAMS names {key!r}, but the file defines no constant {key} "
                                       f"(add e.g. `{key} = {values[0] if values else 1.0}` at module level)")
        if (not isinstance(values, (list, tuple)) or not values
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
            raise CandidateError(file, f"PARAMS[{key!r}] must be a non-empty list of numbers")
        sweep[key] = tuple(float(v) for v in values)
    return sweep


def expand_sweeps(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Each candidate with a `PARAMS` table becomes one variant per combination of its values.

    Variants share the code (and so one trace, vmapped over their constants); a variant is named
    `stem[NAME=value,...]`, so its PRNG key, like any candidate's, follows from its name.
    """
    expanded = []
    for candidate in candidates:
        if not candidate.sweep:
            expanded.append(candidate)
            continue
        names = list(candidate.sweep)
        for values in itertools.product(*(candidate.sweep[n] for n in names)):
            params = dict(zip(names, values))
            label = ",".join(f"{n}={v:g}" for n, v in params.items())
            expanded.append(dataclasses.replace(candidate, name=f"{candidate.name}[{label}]", params=params,
                                                function_params={api: params for api in candidate.functions
                                                                 if not candidate.function_keys[api].endswith(
                                                                     ":CURRICULUM")}))
    return expanded


def cross_candidates(candidates: Sequence[Candidate], shaper_types: Sequence[str]) -> list[Candidate]:
    """The product across shaper types: every combination of one file per selected type.

    With `--shaper-types compute_reward compute_observation`, 5 files that define a reward and 3 that
    define an observation give 15 candidates named `reward_file+observation_file`. A file that defines
    several selected types contributes to each of them.
    """
    per_type = []
    for api in shaper_types:
        providers = [c for c in candidates if api in c.functions]
        if not providers:
            raise ValueError(f"--cross: no candidate file defines {api}; drop it from --shaper-types or add files")
        per_type.append((api, providers))
    combined = []
    for choice in itertools.product(*(providers for _, providers in per_type)):
        distinct = list({c.name: c for c in choice}.values())  # a file may provide several types
        parts = [c.name for c in distinct]
        functions = {api: c.functions[api] for (api, _), c in zip(per_type, choice)}
        function_keys = {api: c.function_keys[api] for (api, _), c in zip(per_type, choice)}
        function_params = {api: c.function_params.get(api, {}) for (api, _), c in zip(per_type, choice)}
        key_source = "|".join(f"{api}:{key}" for api, key in function_keys.items())
        sources = "\n".join(f"# ---- {c.name}: {c.path} ----\n{c.source}" for c in distinct)
        torque = next((c for (api, _), c in zip(per_type, choice) if api == "compute_torque"), None)
        params = {k: v for c in distinct for k, v in c.params.items()}
        combined.append(Candidate(name="+".join(parts), path=choice[0].path, source=sources, functions=functions,
                                  code_key=hashlib.sha256(key_source.encode()).hexdigest()[:16],
                                  function_keys=function_keys, action_dim=torque.action_dim if torque else None,
                                  params=params, function_params=function_params,
                                  providers={api: c.name for (api, _), c in zip(per_type, choice)}))
    return combined


def call_with_params(fn: Callable, params: Mapping, *args):
    """Call a candidate function with its swept constants set to `params` (numbers or traced arrays).

    The constants are globals of the candidate's own namespace; they are swapped in for the call
    only. Under `jax.vmap` this traces the function once for all variants of a file. The swap holds a lock:
    the trainer traces its evaluation in a background thread while the main thread traces the iteration.
    """
    if not params:
        return fn(*args)
    namespace = inspect.unwrap(fn).__globals__
    with _SWAP_LOCK:
        saved = {name: namespace[name] for name in params}
        namespace.update(params)
        try:
            return fn(*args)
        finally:
            namespace.update(saved)


_SWAP_LOCK = threading.RLock()


@dataclasses.dataclass(frozen=True)
class LoadFailure:
    """A candidate file left out of a run, and why."""

    file: str
    name: str
    error: str


def candidate_files(directory: str | Path) -> list[Path]:
    """The candidate files of `directory`: its `*.py` files not starting with `_`, sorted by name."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"candidate directory {str(directory)!r} does not exist")
    files = sorted(p for p in directory.glob("*.py") if not p.name.startswith("_"))
    if not files:
        raise FileNotFoundError(f"candidate directory {str(directory)!r} has no .py candidate files")
    return files


def load_candidates(directory: str | Path, shaper_types: Sequence[str]) -> tuple[list[Candidate], list[LoadFailure]]:
    """Load every candidate file of `directory` in this process (no sandbox: for trusted files); failures are
    returned, not raised."""
    candidates, failures = [], []
    for file in candidate_files(directory):
        try:
            candidates.append(load_candidate(file, shaper_types))
        except CandidateError as err:
            failures.append(LoadFailure(file=str(file), name=file.stem, error=str(err)))
    return candidates, failures


def source_api(candidate: Candidate, api_name: str, defaults: Mapping[str, Callable]) -> str:
    """The API whose function of `candidate` serves as its `api_name` (itself, or its `FALLBACKS` entry where
    neither the candidate nor the task defines `api_name`)."""
    if api_name in FALLBACKS and api_name not in candidate.functions and api_name not in defaults:
        return FALLBACKS[api_name]
    return api_name


def resolve_functions(candidate: Candidate, defaults: Mapping[str, Callable]) -> dict[str, Callable]:
    """The full set of shaping functions for a candidate, its own bound to its swept constants, and the
    task's defaults for the rest."""
    resolved = {}
    for api in SHAPER_TYPES:
        source = source_api(candidate, api, defaults)
        fn = api_callable(api, candidate.functions[source] if source in candidate.functions else defaults[source])
        params = candidate.function_params.get(source)
        resolved[api] = functools.partial(call_with_params, fn, params) if params else fn
    return resolved


def defines(candidate: Candidate, api_name: str, defaults: Mapping[str, Callable]) -> bool:
    """Whether `candidate` (or the task, for it) defines `api_name` itself, rather than falling back."""
    return source_api(candidate, api_name, defaults) == api_name


def function_key(candidate: Candidate, api_name: str) -> str:
    """Identity of the code behind one API function of a candidate ('default' when it uses the task's)."""
    return candidate.function_keys.get(api_name, "default")
