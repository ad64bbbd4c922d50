"""Test setup: CPU, and JAX's persistent compilation cache and envcoder's trace cache, so repeated compiles are
cheap."""

import ctypes.util
import os
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# MuJoCo chooses its OpenGL backend on import: OSMesa renders without a display (`envcoder play` tests).
if ctypes.util.find_library("OSMesa"):
    os.environ.setdefault("MUJOCO_GL", "osmesa")

import jax  # noqa: E402

from envcoder.compile_cache import enable_compilation_cache  # noqa: E402

jax.config.update("jax_compilation_cache_dir", str(Path(__file__).resolve().parents[1] / ".jax_cache"))
# The trace cache too, for the whole suite (the commands that tests run in-process would turn it on anyway, from
# then on): every trainer's key is checked against every other test's job.
enable_compilation_cache()
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)

BUNDLED = Path(__file__).resolve().parents[1] / "user_functions"
