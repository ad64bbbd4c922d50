"""Caches that make a second run of the same job (same candidates, sizes and settings) start fast, on by default
for envcoder's commands:

- JAX's persistent compilation cache: the compiled programs (XLA's output) are loaded from disk instead of
  compiled again;
- the trace cache (`CachedJit`): the traced programs (`jax.export`'s serialized StableHLO) are loaded from disk
  instead of traced again. Tracing is Python, several seconds for a job of many candidates, and the
  compilation cache cannot skip it: its key is the traced program;
- the sandbox's verdicts (`envcoder.candidates.sandbox.SandboxValidator`): a candidate file that passed validation
  is not validated again while its source, the task, envcoder and the limits are the same.

The compilation cache lives in `$ENVCODER_CACHE_DIR`, else `$XDG_CACHE_HOME/envcoder/jax`
(`~/.cache/envcoder/jax`), the others in its `envcoder-traces/` and `envcoder-verdicts/` folders.
`ENVCODER_CACHE_DIR=` (empty) turns all three off; a compilation cache directory set through JAX itself
(`JAX_COMPILATION_CACHE_DIR`, or `jax.config`) is left as it is and holds the others too. The caches are
trusted as code is: whoever can write them chooses what a run executes (the trace cache's entries hold a
pickled treedef; a verdict lets a source skip the sandbox), so they belong in the user's own directories.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import os
import pickle
import re
import sys
import types
from pathlib import Path
from typing import Callable, Mapping, Sequence

import jax
import numpy as np

from envcoder import atomic

XLA_OPTIONS = {"gpu": {"xla_gpu_experimental_enable_fusion_autotuner": False}}
"""XLA options of the learner's programs, per backend. On a GPU, XLA's fusion autotuner picks each fusion's
emitter by compiling and timing variants while it compiles, so the same program could compile to other kernels on
another run; off, the README job compiled as fast and ran as fast (docs/benchmarks/throughput.md)."""

MIN_COMPILE_TIME_S = 0.0
"""Compilations faster than this are not written: none. JAX's default, 1 s, would leave the initialization's small
functions out, and they add up to seconds on a GPU; at 0.2 s, an `auto` generation that changed only constants
still compiled 20 small programs on a GPU (6.5 s of compiling and loading, against 45.7 s for the first;
docs/benchmarks/search.md)."""


_CACHE_DIR: Path | None = None
"""The compilation cache's directory while envcoder's caches are on (`enable_compilation_cache`), else None."""


def enable_compilation_cache() -> Path | None:
    """Turn the caches on (see the module docstring); returns the compilation cache's directory, or None when
    off."""
    global _CACHE_DIR
    if jax.config.jax_compilation_cache_dir:
        path = Path(jax.config.jax_compilation_cache_dir)
    else:
        setting = os.environ.get("ENVCODER_CACHE_DIR")
        if setting == "":
            return None
        path = Path(setting) if setting else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / \
            "envcoder" / "jax"
        jax.config.update("jax_compilation_cache_dir", str(path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
    _CACHE_DIR = path
    return path


def trace_cache_dir() -> Path | None:
    """Where `CachedJit` keeps traced programs; None while the caches are off (the default of the library:
    `enable_compilation_cache` turns them on)."""
    return _CACHE_DIR / "envcoder-traces" if _CACHE_DIR is not None else None


def verdict_cache_dir() -> Path | None:
    """Where the sandbox keeps the verdicts of candidates that passed; None while the caches are off."""
    return _CACHE_DIR / "envcoder-verdicts" if _CACHE_DIR is not None else None


def code_fingerprint() -> str:
    """A hash of envcoder's own files (code, task models and configs), of the task files this process read
    (`envcoder.tasks.fingerprint`) and of what else shapes a trace: an edited checkout or task file, another JAX or
    MuJoCo, or another JAX numerics setting traces anew."""
    from envcoder.tasks import fingerprint, task_files

    files = sorted(f"{task.source}:{fingerprint(task)}" for task in task_files())
    return _own_fingerprint() if not files else hashlib.sha256(
        repr([_own_fingerprint(), *files]).encode()).hexdigest()


@functools.cache
def _own_fingerprint() -> str:
    """`code_fingerprint` of envcoder and its versions alone."""
    import jaxlib
    import mujoco

    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".xml", ".yaml", ".stl", ".obj"):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    flags = ("jax_enable_x64", "jax_default_matmul_precision", "jax_threefry_partitionable",
             "jax_default_prng_impl", "jax_numpy_dtype_promotion")
    digest.update(repr([jax.__version__, jaxlib.__version__, mujoco.__version__, jax.default_backend()]
                       + [getattr(jax.config, flag, None) for flag in flags]).encode())
    return digest.hexdigest()


def fingerprint(obj, _path: tuple = ()) -> str:
    """A text that changes when `obj` would trace differently: what a trace cache key holds for the Python
    objects a traced function reads (a task, a simulator's class). Functions count by their code, constants,
    defaults and closures, classes by their name; either one defined outside envcoder also by its module's
    file (its globals and methods); files (`Path`) by their content; containers and dataclasses by their
    items; other objects by their type and attributes. A global changed at run time is not seen."""
    if id(obj) in _path or len(_path) > 16:
        return "<cycle>" if id(obj) in _path else "..."
    inner = functools.partial(fingerprint, _path=_path + (id(obj),))
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return repr(obj)
    if isinstance(obj, Path):
        return f"Path({str(obj)!r}, {_file_digest(obj)})"
    if isinstance(obj, type):
        return f"class {obj.__module__}.{obj.__qualname__}{_module_digest(obj.__module__)}"
    if isinstance(obj, functools.partial):
        return f"partial({inner(obj.func)}, {inner(obj.args)}, {inner(obj.keywords)})"
    if isinstance(obj, types.MethodType):
        return f"method({inner(type(obj.__self__))}, {inner(obj.__func__)})"
    if isinstance(obj, types.FunctionType):
        closure = [cell.cell_contents for cell in obj.__closure__ or ()]
        return (f"function {obj.__module__}.{obj.__qualname__}{_module_digest(obj.__module__)} "
                f"{_code_digest(obj.__code__)} {inner(obj.__defaults__)} {inner(obj.__kwdefaults__)} "
                f"{inner(closure)}")
    if hasattr(obj, "__wrapped__"):  # jax.jit and functools.wraps
        return f"wrapped({inner(obj.__wrapped__)})"
    if isinstance(obj, (list, tuple)):
        return f"{type(obj).__name__}[{', '.join(map(inner, obj))}]"
    if isinstance(obj, (set, frozenset)):
        return f"set[{', '.join(sorted(map(inner, obj)))}]"
    if isinstance(obj, Mapping):
        return "{" + ", ".join(sorted(f"{inner(k)}: {inner(v)}" for k, v in obj.items())) + "}"
    if hasattr(obj, "shape") and hasattr(obj, "dtype"):
        array = np.asarray(obj)
        return f"array({array.shape}, {array.dtype}, {hashlib.sha256(array.tobytes()).hexdigest()[:16]})"
    if dataclasses.is_dataclass(obj):
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        return f"{inner(type(obj))}({inner(fields)})"
    if isinstance(obj, enum.Enum):
        return f"{inner(type(obj))}.{obj.name}"
    attributes = getattr(obj, "__dict__", None)
    if attributes is not None:
        return f"{inner(type(obj))}({inner(attributes)})"
    return f"{inner(type(obj))}:{re.sub(r' at 0x[0-9a-fA-F]+', '', repr(obj))}"


def _code_digest(code: types.CodeType) -> str:
    digest = hashlib.sha256(code.co_code)
    digest.update(repr(code.co_names).encode())
    for const in code.co_consts:
        digest.update((_code_digest(const) if isinstance(const, types.CodeType) else repr(const)).encode())
    return digest.hexdigest()[:16]


def _file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError:
        return "unreadable"


def _module_digest(name: str) -> str:
    """'' for envcoder's modules and the libraries' (the code fingerprint and the versions cover them), else the
    hash of the module's file: a test's or a user's simulator, task or learner."""
    module = sys.modules.get(name)
    file = getattr(module, "__file__", None)
    if name.split(".")[0] in ("envcoder", "jax", "jaxlib", "mujoco", "numpy", "builtins", "optax", "flax") or \
            file is None:
        return ""
    return f"@{_file_digest(Path(file))}"


@functools.cache
def xla_options() -> dict:
    """`XLA_OPTIONS` of the default backend that this XLA knows (an option it does not know is left out: older
    and newer jaxlibs rename such options)."""
    options = dict(XLA_OPTIONS.get(jax.default_backend(), {}))
    for name in list(options):
        try:
            jax.jit(lambda x: x + 1, compiler_options={name: options[name]}).lower(np.float32(0)).compile()
        except Exception:  # noqa: BLE001 - XLA's "No such compile option"
            del options[name]
    return options


def _aval(x) -> tuple:
    return tuple(x.shape), str(x.dtype), bool(getattr(x, "weak_type", False))


class CachedJit:
    """`jax.jit(function)` whose traced program is kept in the trace cache (see the module docstring).

    `key` must name everything the trace depends on besides envcoder's own code and the argument shapes (the
    learner's: its candidates' code and constants, settings and sizes). The program runs as
    `jax.jit(exported.call)` both when it is traced and when it is loaded, so the two compile to the same XLA
    program and share the compilation cache's entry. A function that `jax.export` cannot serialize (a custom
    call without a stability guarantee, such as MuJoCo Warp's kernels) runs as a plain `jax.jit`, traced every
    time. Called, it takes and returns the function's pytrees; `lower(...).compile()` gives a callable that does.
    """

    def __init__(self, function: Callable, key: str, donate_argnums: Sequence[int] = (),
                 compiler_options: dict | None = None):
        if tuple(donate_argnums) not in ((), (0,)):
            raise ValueError(f"CachedJit donates its first argument or none, not {donate_argnums}")
        self._function, self._key, self._donate = function, key, tuple(donate_argnums)
        self._options = compiler_options
        # argument signature -> (jit of the exported program, output treedef, the exported program), or None
        self._programs: dict = {}
        self._traced: dict = {}  # argument signature -> `_flat`'s jit and box, until the program is exported
        self.loaded = self.stored = 0  # programs loaded from the cache / traced and written to it, for timings

    def out_shapes(self, *args):
        """The output's shapes (`jax.ShapeDtypeStruct`s) for `args` (arrays or shapes): from the program where it
        is known or in the trace cache, else traced only, not lowered: what a caller needs to trace the next program
        before this one is lowered. The trace is kept for this program's own export."""
        leaves, in_tree = jax.tree.flatten(args)
        signature = (in_tree, tuple(_aval(x) for x in leaves))
        if signature not in self._programs:
            path = self._path(in_tree, signature)
            if path is None or not path.exists():
                jitted, box = self._flat(in_tree, signature)
                out = jitted.trace(*leaves).out_info
                return jax.tree.unflatten(box["tree"], [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in out])
        program = self._program(args)
        if program is None:
            return jax.eval_shape(self._plain, *args)
        _, out_tree, exported = program
        return jax.tree.unflatten(out_tree, [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in exported.out_avals])

    def _path(self, in_tree, signature) -> Path | None:
        """The trace cache's file of the program for `signature`, or None while the cache is off."""
        if trace_cache_dir() is None:
            return None
        # The treedef's text, without the addresses of objects in it (MJX's static fields, which the key's task
        # model determines).
        tree = re.sub(r" at 0x[0-9a-fA-F]+", "", str(in_tree))
        name = hashlib.sha256(repr((code_fingerprint(), self._key, tree, signature[1])).encode()).hexdigest()
        return trace_cache_dir() / f"{name[:40]}.exported"

    def _program(self, args: tuple):
        leaves, in_tree = jax.tree.flatten(args)
        signature = (in_tree, tuple(_aval(x) for x in leaves))
        if signature in self._programs:
            return self._programs[signature]
        # The program takes the arguments' leaves: those of a donated first argument lead.
        flat_donate = tuple(range(len(jax.tree.leaves(args[0])))) if self._donate else ()
        path = self._path(in_tree, signature)
        program = _load(path) if path is not None else None
        if program is not None:
            self.loaded += 1
        else:
            program = self._export(in_tree, signature, leaves)
            try:  # this run uses what a later run loads (deserializing drops weak types: the signatures match)
                data = _encode(*program) if program is not None else None
                program = _decode(data) if data is not None else program
            except Exception:  # noqa: BLE001 - a program or treedef that does not serialize is not stored
                data = None
            if data is not None and path is not None and store_entry(path, data):
                self.stored += 1
        if program is not None:
            exported, out_tree = program
            program = (jax.jit(exported.call, donate_argnums=flat_donate, compiler_options=self._options), out_tree,
                       exported)
        self._programs[signature] = program
        self._traced.pop(signature, None)
        return program

    def _flat(self, in_tree, signature):
        """`(jax.jit of the function on the arguments' leaves, a box that its trace fills with the output's
        treedef)`, one per signature: a trace by `out_shapes` is found again by the export (JAX keeps a jit's
        traces)."""
        if signature not in self._traced:
            box = {}

            def flat(*flat_args):
                out = self._function(*jax.tree.unflatten(in_tree, flat_args))
                out_leaves, box["tree"] = jax.tree.flatten(out)
                return out_leaves
            self._traced[signature] = (jax.jit(flat), box)
        return self._traced[signature]

    def _export(self, in_tree, signature, leaves):
        jitted, box = self._flat(in_tree, signature)
        try:
            exported = jax.export.export(jitted)(*leaves)
        except ValueError as err:
            if "custom call" not in str(err).lower():
                raise
            return None  # e.g. MuJoCo Warp's physics: traced every time
        return exported, box["tree"]

    def __call__(self, *args):
        program = self._program(args)
        if program is None:
            return self._plain(*args)
        jitted, out_tree, _ = program
        return jax.tree.unflatten(out_tree, jitted(*jax.tree.leaves(args)))

    @functools.cached_property
    def _plain(self):
        return jax.jit(self._function, donate_argnums=self._donate, compiler_options=self._options)

    def lower(self, *args) -> "_Lowered":
        program = self._program(args)
        if program is None:
            return self._plain.lower(*args)
        jitted, out_tree, _ = program
        return _Lowered(jitted.lower(*jax.tree.leaves(args)), out_tree)

    def _cache_size(self) -> int:
        """How many programs this function has compiled (as `jax.jit`'s)."""
        return sum(p[0]._cache_size() if p is not None else 0 for p in self._programs.values()) + (
            self._plain._cache_size() if "_plain" in self.__dict__ else 0)


class _Lowered:
    def __init__(self, lowered, out_tree):
        self._lowered, self._out_tree = lowered, out_tree

    @property
    def out_info(self):
        return jax.tree.unflatten(self._out_tree, self._lowered.out_info)

    def compile(self):
        compiled, out_tree = self._lowered.compile(), self._out_tree
        return lambda *args: jax.tree.unflatten(out_tree, compiled(*jax.tree.leaves(args)))


def signature(tree) -> tuple:
    """A pytree's structure and leaves' avals, as `jax.jit` tells calls apart (a weak-typed leaf compiles anew)."""
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple(_aval(x) for x in leaves)


def _encode(exported, out_tree) -> bytes:
    body = bytes(exported.serialize())
    return len(body).to_bytes(8, "little") + body + pickle.dumps(out_tree)


def _decode(data: bytes):
    size = int.from_bytes(data[:8], "little")
    return jax.export.deserialize(bytearray(data[8:8 + size])), pickle.loads(data[8 + size:])


def _load(path: Path):
    """A stored `(exported, output treedef)`, or None when there is none or it cannot be read (a damaged or
    foreign file is traced anew and replaced)."""
    try:
        return _decode(path.read_bytes())
    except Exception:  # noqa: BLE001 - a missing or unreadable entry is a cache miss
        return None


def store_entry(path: Path, data: bytes) -> bool:
    """Write an entry atomically (a concurrent run reads a whole entry or none); False where it cannot be
    written (a read-only cache)."""
    try:
        atomic.write_atomically(path, data)
        return True
    except OSError:
        return False


class CompileMeter:
    """What XLA compiled in this process since `start()`: `compiles` (programs compiled, not loaded from the
    compilation cache), `cache_hits` and `seconds` (compiling or loading them). Counted from JAX's monitoring
    events, in every thread: a search's generation that changes only constants compiles nothing."""

    _installed = False
    _totals = {"programs": 0, "cache_hits": 0, "seconds": 0.0}

    @classmethod
    def _install(cls) -> None:
        if cls._installed:
            return
        cls._installed = True

        def event(name: str, **_):
            if name == "/jax/compilation_cache/cache_hits":
                cls._totals["cache_hits"] += 1

        def duration(name: str, seconds: float, **_):
            if name == "/jax/core/compile/backend_compile_duration":  # compiled, or loaded from the cache
                cls._totals["programs"] += 1
                cls._totals["seconds"] += seconds
        jax.monitoring.register_event_listener(event)
        jax.monitoring.register_event_duration_secs_listener(duration)

    def __init__(self):
        self._install()
        self._start = dict(self._totals)

    def read(self) -> dict:
        """`{"compiles", "cache_hits", "seconds"}` since this meter was made."""
        hits = self._totals["cache_hits"] - self._start["cache_hits"]
        return {"compiles": self._totals["programs"] - self._start["programs"] - hits, "cache_hits": hits,
                "seconds": round(self._totals["seconds"] - self._start["seconds"], 3)}
