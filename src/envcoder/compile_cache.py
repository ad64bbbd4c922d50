"""JAX's persistent compilation cache, on by default for envcoder's commands: a second run of the same job
(same candidates, sizes and settings) loads its compiled iteration and evaluation from disk instead of
compiling them again.

The cache lives in `$ENVCODER_CACHE_DIR`, else `$XDG_CACHE_HOME/envcoder/jax` (`~/.cache/envcoder/jax`).
`ENVCODER_CACHE_DIR=` (empty) turns it off; a cache directory set through JAX itself
(`JAX_COMPILATION_CACHE_DIR`, or `jax.config`) is left as it is.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

MIN_COMPILE_TIME_S = 0.2
"""Compilations faster than this are not written (JAX's default, 1 s, would leave the initialization's
small functions out, and they add up to seconds on a GPU)."""


def enable_compilation_cache() -> Path | None:
    """Turn the persistent cache on (see the module docstring); returns its directory, or None when off."""
    if jax.config.jax_compilation_cache_dir:
        return Path(jax.config.jax_compilation_cache_dir)
    setting = os.environ.get("ENVCODER_CACHE_DIR")
    if setting == "":
        return None
    path = Path(setting) if setting else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / \
        "envcoder" / "jax"
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_TIME_S)
    return path
