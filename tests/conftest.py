"""Test setup: CPU, and JAX's persistent compilation cache and envcoder's trace cache, so repeated compiles are
cheap."""

import contextlib
import ctypes.util
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")


def _fast_compiles() -> str:
    """The tests compile far more than they run, so they compile the cheap way: without LLVM's optimizations
    (Cartpole with every shaping type: the iteration 12.5 -> 4.3 s, the evaluation 6.2 -> 4.1 s) and, where this
    jaxlib has them, with XLA:CPU's loop emitters instead of its fusion emitters (test_shaping's six candidates trained
    and evaluated 15.3 -> 9.1 s, the same numbers; the quick suite 4 min 44-5 min 1 -> 3 min 29-3 min 56 with jaxlib
    0.10.2: docs/benchmarks/tests.md). jaxlib 0.11.2 has no such flag, and XLA ends a process whose XLA_FLAGS name a
    flag it does not know: the run's first process asks a process of its own (about 1 s), and pytest-xdist's workers
    inherit the answer."""
    known = os.environ.get("ENVCODER_TESTS_XLA_FLAGS")
    if known is not None:
        return known
    flags, loop_emitters = "--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false"
    probe = subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()"],
                           env={**os.environ, "XLA_FLAGS": loop_emitters}, capture_output=True, timeout=300)
    flags = f"{flags} {loop_emitters}" if probe.returncode == 0 else flags
    os.environ["ENVCODER_TESTS_XLA_FLAGS"] = flags
    return flags


FAST_COMPILES = _fast_compiles()
"""XLA's flags in the tests' processes. Runs compared with a recording made by a user's process (tests/goldens.py)
run in a process of their own without them."""
if FAST_COMPILES not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILES}".strip()
# MuJoCo chooses its OpenGL backend on import: OSMesa renders without a display (`envcoder play` tests).
if ctypes.util.find_library("OSMesa"):
    os.environ.setdefault("MUJOCO_GL", "osmesa")

import jax  # noqa: E402
import pytest  # noqa: E402

pytest.register_assert_rewrite("goldens")  # its asserts show the differences, as a test's do

from envcoder.compile_cache import enable_compilation_cache  # noqa: E402

jax.config.update("jax_compilation_cache_dir", str(Path(__file__).resolve().parents[1] / ".jax_cache"))
# The trace cache too, for the whole suite (the commands that tests run in-process would turn it on anyway, from
# then on): every trainer's key is checked against every other test's job.
enable_compilation_cache()
jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)

TESTS = Path(__file__).resolve().parent
"""The tests' folder: laid out like src/envcoder (a module's tests where the module is), its helpers here."""
ROOT = TESTS.parent
BUNDLED = ROOT / "src" / "envcoder" / "examples"
BENCHMARKS = ROOT / "benchmarks"
CANDIDATES = TESTS / "candidates"
"""Candidate files the tests wrote (bad, attacks, escapes, shaping, auto), beside the candidates module's tests."""


class FakeEvaluations:
    """Stands in for `envcoder.runs.evaluation.evaluate_once` where training is not the point: each (candidate,
    seed) group's Cartpole fitness is `values(name, seed)`, and the run directory is written as a run writes it
    (config, candidate copies, results). Each run says it took `seconds` (timings' "total_s"); one called past its
    `until` says that its time was up after half its iterations, as a run says it. Every group's episodes last
    `episode_length` steps of Cartpole's 500."""

    def __init__(self, values, seconds: float = 0.0, episode_length: float = 500.0):
        self.values, self.seconds, self.calls, self.outs, self.untils = values, seconds, [], [], []
        self.episode_length = episode_length

    def __call__(self, plan, console=None, resume=False, validator=None, restart=None, until=None):
        import time

        from envcoder.candidates import TASK_DEFAULT, candidate_files
        from envcoder.runs.directory import RunDirectory
        from envcoder.runs.results import GroupResult, ranked_results
        from envcoder.tasks import get_task

        settings = plan.settings
        names = [p.stem for p in candidate_files(settings.functions)]
        names += [TASK_DEFAULT] if settings.task_default else []
        self.calls.append((names, settings.seeds))
        self.outs.append(Path(settings.out))
        self.untils.append(until)
        timings = {"total_s": self.seconds}
        if until is not None and time.time() >= until:
            timings.update(out_of_time=True, stopped_after_iteration=max(1, (settings.train_iterations or 2) // 2))
        run = RunDirectory(settings.out)
        run.write_config({**settings.to_config(), "candidates": names})
        for name in names:
            (settings.out / "candidates" / f"{name}.py").write_text(f"# {name}\n")
        groups = [GroupResult(name, seed, self.values(name, seed), self.episode_length, 1.0, 0.0, None, None, {})
                  for name in names for seed in settings.seeds]
        task = get_task("Cartpole")
        results = ranked_results("Cartpole", "upright", task.get_fitness()[1], "flat", groups, [], timings,
                                 lambda name: {}, settings.rank_by, max_episode_length=task.max_episode_length)
        run.write_results(results.to_json())
        return results


UNCHECKED_FRAMES = TESTS / "unchecked_frames"


@contextlib.contextmanager
def frames_unchecked():
    """Sandbox workers started inside the block let candidate files name frame attributes (`sitecustomize` in
    tests/unchecked_frames): the attack files walk a generator's frames to the real builtins, and what stops them then
    is the operating system's jail and the verifier, which these tests are about."""
    with pytest.MonkeyPatch.context() as patch:
        path = os.environ.get("PYTHONPATH")
        patch.setenv("PYTHONPATH", str(UNCHECKED_FRAMES) + (os.pathsep + path if path else ""))
        yield
