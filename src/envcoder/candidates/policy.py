"""The security policy for candidate code: what a file may import and name, the namespace it runs in, and its
time limit. Candidate code is untrusted (it is often written by an LLM): a file is checked statically before it runs
(allow-listed imports, no file/OS/network access, no `eval`/`exec`, no dunder access), then runs with restricted
builtins and views of the allowed modules (`ModuleView`), under a time limit."""

from __future__ import annotations

import ast
import contextlib
import math
import re
import signal
import threading
import types

import jax
import jax.numpy as jnp

from envcoder.shaping.api import CandidateError
from envcoder.shaping.helpers import HELPERS

ALLOWED_IMPORTS = {"jax", "jax.numpy", "jax.lax", "jax.random", "jax.nn", "math", "envcoder.shaping.helpers",
                   "envcoder.shaping.isaac_torch"}
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
                   "jax.dtypes", "jax.image", "jax.ops", "math", "envcoder.shaping.helpers",
                   "envcoder.shaping.isaac_torch")
"""Modules (and their submodules) that candidate code may reach by attribute, e.g. `jax.numpy.linalg`."""


JAX_ATTRIBUTES = {
    "numpy", "lax", "random", "nn", "scipy", "tree", "tree_util", "dtypes", "image", "ops", "Array", "vmap", "jit",
    "grad", "value_and_grad", "jacobian", "jacfwd", "jacrev", "hessian", "jvp", "vjp", "linearize", "checkpoint",
    "remat", "eval_shape", "custom_jvp", "custom_vjp", "named_call", "ShapeDtypeStruct", "float0",
}
"""What candidate code may use of the top-level `jax` module (its transformations and the allowed modules)."""


FRAME_ATTRIBUTES = {
    "gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "gi_suspended", "cr_frame", "cr_code", "cr_await",
    "cr_origin", "cr_running", "cr_suspended", "ag_frame", "ag_code", "ag_await", "ag_running", "tb_frame", "tb_next",
    "tb_lasti", "tb_lineno", "f_back", "f_builtins", "f_globals", "f_locals", "f_code", "f_trace", "f_lasti",
    "co_code", "co_consts", "co_names", "func_globals", "func_code", "im_func", "im_self", "mro",
}
"""Attributes of generators, coroutines, tracebacks, frames and code objects: a walk up a generator's frames reaches
the loader's real builtins. Refused as names and inside strings, a second wall behind the operating system's jail
(`envcoder.candidates.jail`), which assumes they were reached."""




def _frame_words(text: str) -> list[str]:
    """The `FRAME_ATTRIBUTES` that `text` names as words (`mro` aside: an English word too)."""
    return sorted(set(re.findall(r"[A-Za-z_]\w*", text)) & (FRAME_ATTRIBUTES - {"mro"}))

MUTATING_METHODS = {"update", "pop", "popitem", "clear", "setdefault", "append", "extend", "insert", "remove",
                    "sort", "reverse", "add", "discard"}
"""Methods that change a dict, list or set in place."""


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
        elif isinstance(node, ast.Attribute) and node.attr in FRAME_ATTRIBUTES:
            raise CandidateError(file, f"use of .{node.attr} is not allowed in candidate code (it reaches the frames "
                                       "and code that run the file)", line=line)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _frame_words(node.value):
            raise CandidateError(file, f"the text {_frame_words(node.value)[0]!r} is not allowed in candidate code (it "
                                       "names the frames and code that run the file)", line=line)
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
