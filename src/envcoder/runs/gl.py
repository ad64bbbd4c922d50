"""MuJoCo's OpenGL backend for `envcoder play --video`, chosen before anything imports MuJoCo. This module imports
nothing of MuJoCo or JAX."""

from __future__ import annotations

import os
import subprocess
import sys

GL_BACKENDS = ("egl", "osmesa")
"""MuJoCo's OpenGL backends that render without a display, in the order `envcoder play --video` tries them."""


def choose_gl_backend() -> str | None:
    """MuJoCo's OpenGL backend for rendering: `MUJOCO_GL` where it is set, else the first of `GL_BACKENDS` that
    creates a context on this machine, each tried in a subprocess (MuJoCo reads `MUJOCO_GL` once, when it is first
    imported, and a backend that is not installed fails that import); set in the environment before anything here
    imports MuJoCo. None where none works (rendering then fails with one line that says what to install)."""
    if os.environ.get("MUJOCO_GL"):
        return os.environ["MUJOCO_GL"]
    probe = "import mujoco; context = mujoco.GLContext(8, 8); context.make_current(); context.free()"
    for backend in GL_BACKENDS:
        try:
            done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "MUJOCO_GL": backend},
                                  capture_output=True, timeout=120)
        except subprocess.TimeoutExpired:
            continue
        if done.returncode == 0:
            os.environ["MUJOCO_GL"] = backend
            return backend
    return None
