"""Caches that make a second run of the same job (same candidates, sizes and settings) start fast, on by default
for envcoder's commands:

- JAX's persistent compilation cache: the compiled programs (XLA's output) are loaded from disk instead of
  compiled again;
- the trace cache (`CachedJit`): the traced programs (`jax.export`'s serialized StableHLO) are loaded from disk
  instead of traced again. Tracing is Python, several seconds for a job of many candidates, and the
  compilation cache cannot skip it: its key is the traced program.

The compilation cache lives in `$ENVCODER_CACHE_DIR`, else `$XDG_CACHE_HOME/envcoder/jax`
(`~/.cache/envcoder/jax`), the trace cache in its `envcoder-traces/` folder. `ENVCODER_CACHE_DIR=` (empty) turns
both off; a compilation cache directory set through JAX itself (`JAX_COMPILATION_CACHE_DIR`, or `jax.config`)
is left as it is and holds the traces too. Both caches are trusted as code is: whoever can write them chooses
what a run executes (the trace cache's entries hold a pickled treedef), so they belong in the user's own
directories.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import re
import tempfile
from pathlib import Path
from typing import Callable, Sequence

import jax

MIN_COMPILE_TIME_S = 0.2
"""Compilations faster than this are not written (JAX's default, 1 s, would leave the initialization's
small functions out, and they add up to seconds on a GPU)."""


_TRACE_DIR: Path | None = None
"""The trace cache's directory, None while it is off."""


def enable_compilation_cache() -> Path | None:
    """Turn both caches on (see the module docstring); returns the compilation cache's directory, or None when
    off."""
    global _TRACE_DIR
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
    _TRACE_DIR = path / "envcoder-traces"
    return path


def trace_cache_dir() -> Path | None:
    """Where `CachedJit` keeps traced programs; None while the trace cache is off (the default of the library:
    `enable_compilation_cache` turns it on)."""
    return _TRACE_DIR


@functools.cache
def _code_fingerprint() -> str:
    """A hash of envcoder's own files (code, task models and configs) and of what else shapes a trace: an edited
    checkout, another JAX or MuJoCo, or another JAX numerics setting traces anew."""
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


def _aval(x) -> tuple:
    return tuple(x.shape), str(x.dtype), bool(getattr(x, "weak_type", False))


class CachedJit:
    """`jax.jit(function)` whose traced program is kept in the trace cache (see the module docstring).

    `key` must name everything the trace depends on besides envcoder's own code and the argument shapes (the
    trainer's: its candidates' code and constants, settings and sizes). The program runs as
    `jax.jit(exported.call)` both when it is traced and when it is loaded, so the two compile to the same XLA
    program and share the compilation cache's entry. A function that `jax.export` cannot serialize (a custom
    call without a stability guarantee, such as MuJoCo Warp's kernels) runs as a plain `jax.jit`, traced every
    time. Called, it takes and returns the function's pytrees; `lower(...).compile()` gives a callable that does.
    """

    def __init__(self, function: Callable, key: str, donate_argnums: Sequence[int] = ()):
        if tuple(donate_argnums) not in ((), (0,)):
            raise ValueError(f"CachedJit donates its first argument or none, not {donate_argnums}")
        self._function, self._key, self._donate = function, key, tuple(donate_argnums)
        self._programs: dict = {}  # argument signature -> (jit of the exported program, output treedef), or None
        self.loaded = self.stored = 0  # programs loaded from the cache / traced and written to it, for timings

    def _program(self, args: tuple):
        leaves, in_tree = jax.tree.flatten(args)
        signature = (in_tree, tuple(_aval(x) for x in leaves))
        if signature in self._programs:
            return self._programs[signature]
        # The program takes the arguments' leaves: those of a donated first argument lead.
        flat_donate = tuple(range(len(jax.tree.leaves(args[0])))) if self._donate else ()
        path = None
        if trace_cache_dir() is not None:
            # The treedef's text, without the addresses of objects in it (MJX's static fields, which the key's
            # task model determines).
            tree = re.sub(r" at 0x[0-9a-fA-F]+", "", str(in_tree))
            name = hashlib.sha256(repr((_code_fingerprint(), self._key, tree, signature[1])).encode()).hexdigest()
            path = trace_cache_dir() / f"{name[:40]}.exported"
        program = _load(path) if path is not None else None
        if program is not None:
            self.loaded += 1
        else:
            program = self._export(in_tree, leaves)
            try:  # this run uses what a later run loads (deserializing drops weak types: the signatures match)
                data = _encode(*program) if program is not None else None
                program = _decode(data) if data is not None else program
            except Exception:  # noqa: BLE001 - a program or treedef that does not serialize is not stored
                data = None
            if data is not None and path is not None and _write(path, data):
                self.stored += 1
        if program is not None:
            exported, out_tree = program
            program = (jax.jit(exported.call, donate_argnums=flat_donate), out_tree)
        self._programs[signature] = program
        return program

    def _export(self, in_tree, leaves):
        box = {}

        def flat(*flat_args):
            out = self._function(*jax.tree.unflatten(in_tree, flat_args))
            out_leaves, box["tree"] = jax.tree.flatten(out)
            return out_leaves
        try:
            exported = jax.export.export(jax.jit(flat))(*leaves)
        except ValueError as err:
            if "custom call" not in str(err).lower():
                raise
            return None  # e.g. MuJoCo Warp's physics: traced every time
        return exported, box["tree"]

    def __call__(self, *args):
        program = self._program(args)
        if program is None:
            return self._plain(*args)
        jitted, out_tree = program
        return jax.tree.unflatten(out_tree, jitted(*jax.tree.leaves(args)))

    @functools.cached_property
    def _plain(self):
        return jax.jit(self._function, donate_argnums=self._donate)

    def lower(self, *args) -> "_Lowered":
        program = self._program(args)
        if program is None:
            return self._plain.lower(*args)
        jitted, out_tree = program
        return _Lowered(jitted.lower(*jax.tree.leaves(args)), out_tree)

    def _cache_size(self) -> int:
        """How many programs this function has compiled (as `jax.jit`'s)."""
        return sum(p[0]._cache_size() if p is not None else 0 for p in self._programs.values()) + (
            self._plain._cache_size() if "_plain" in self.__dict__ else 0)


class _Lowered:
    def __init__(self, lowered, out_tree):
        self._lowered, self._out_tree = lowered, out_tree

    def compile(self):
        compiled, out_tree = self._lowered.compile(), self._out_tree
        return lambda *args: jax.tree.unflatten(out_tree, compiled(*jax.tree.leaves(args)))


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


def _write(path: Path, data: bytes) -> bool:
    """Write an entry atomically (a concurrent run reads a whole entry or none); False where it cannot be
    written (a read-only cache)."""
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as f:
            temporary = f.name
            f.write(data)
        os.replace(temporary, path)
        return True
    except OSError:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        return False
