"""Recorded results, one recording per kind of CPU.

On the CPU JAX is deterministic: the same code gives the same bits, run after run and machine after machine of one
kind. XLA compiles for the CPU it runs on, though, and another instruction set rounds otherwise: between the CI
machines before 2026-11-26 and the AVX-512 FP16/AMX ones after, the README's Cartpole run kept every candidate's
fitness while one AUC went from 0.33 to 0.10, and a small Anymal run's fitnesses moved by up to 7e-5.
So `tests/golden/<run>/` holds one recording per kind of CPU, named by `cpu_kind()`, and a run must equal one of
them to the last bit. On a kind with no recording yet the bits cannot be checked; the run's robust numbers are
compared with a recording instead (`close`) and the test says how to record one:

    ENVCODER_RECORD_GOLDEN=1 pytest -q tests/runs/test_readme_run.py tests/runs/test_golden.py -m "slow or not slow" -k bit_for_bit
"""

import json
import os
import platform
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Callable

GOLDEN = Path(__file__).parent / "golden"
ISA = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "avx_vnni", "asimd", "sve")
"""Instruction-set flags (Linux's /proc/cpuinfo names) under which XLA's CPU code may round otherwise."""


def run_as_a_user(argv: list[str]) -> int:
    """`envcoder ARGV` in a process of its own, with XLA's settings as a user's process has them (the tests' process
    compiles without LLVM's optimizations: `conftest.FAST_COMPILES`), as the recordings were made; its exit status."""
    from conftest import FAST_COMPILES
    import jax

    flags = os.environ.get("XLA_FLAGS", "").replace(FAST_COMPILES, "").strip()
    env = {**os.environ, "XLA_FLAGS": flags, "ENVCODER_CACHE_DIR": jax.config.jax_compilation_cache_dir or ""}
    return subprocess.run([sys.executable, "-m", "envcoder.cli", *argv], env=env, timeout=1800).returncode


def cpu_kind() -> str:
    """This machine's kind of CPU, as far as XLA's code for it goes: its architecture and instruction sets."""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":")[0].strip() in ("flags", "Features"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return "-".join([platform.machine() or "unknown", *[f for f in ISA if f in flags]])


DERIVED = ("training_best", "training_best_std")
"""Fields of a ranking row or a group added after the recordings, each computed from the training curve of the task
fitness, which the recorded AUC already checks bit for bit: left out of the comparison."""


def normalized(results: dict) -> dict:
    """`results.json` without what differs between identical runs: the timings, and the groups' order (the run's
    layout, which follows the code's classes); and without the `DERIVED` fields."""
    results = {k: v for k, v in results.items() if k != "timings"}
    for key in ("groups", "ranking"):
        results[key] = [{k: v for k, v in row.items() if k not in DERIVED} for row in results[key]]
    results["groups"] = sorted(results["groups"], key=lambda g: (g["candidate"], g["seed"]))
    return results


def assert_a_recording_equals(results: dict, run: str, close: Callable[[dict, dict], None]) -> None:
    """`results` equal one of `tests/golden/<run>/*.json` bit for bit. With `ENVCODER_RECORD_GOLDEN` set they are
    first written as this CPU kind's recording. Where this kind has a recording, the run must equal it; elsewhere
    `close(results, recording)` must hold for some recording (it raises AssertionError otherwise)."""
    folder, kind, results = GOLDEN / run, cpu_kind(), normalized(results)
    if os.environ.get("ENVCODER_RECORD_GOLDEN"):
        (folder / f"{kind}.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    recordings = {p.stem: normalized(json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))}
    assert recordings, f"no recording in {folder}"
    if any(results == recorded for recorded in recordings.values()):
        return
    if kind in recordings:
        assert results == recordings[kind], f"{run}: not this CPU's recording {folder / kind}.json"
    errors = []
    for name, recorded in recordings.items():
        try:
            close(results, recorded)
        except AssertionError as e:
            errors.append(f"{name}: {e}")
        else:
            warnings.warn(f"{run}: no recording for this kind of CPU ({kind}); the bits were not checked, the run is "
                          f"close to recording {name}. Record it with ENVCODER_RECORD_GOLDEN=1 (tests/goldens.py).")
            return
    raise AssertionError(f"{run}: far from every recording, and none for this CPU ({kind}):\n" + "\n".join(errors))


def same_fitness(tolerance: float) -> Callable[[dict, dict], None]:
    """A `close` for `assert_a_recording_equals`: the same candidates, each with the recording's final task fitness
    within `tolerance` (relative, and absolute near zero). Training curves (AUC, shaped returns, episode lengths)
    are chaotic and not compared; candidates tied on fitness may swap places."""

    def close(results: dict, recorded: dict) -> None:
        mine, theirs = ({r["name"]: r["fitness_mean"] for r in record["ranking"]} for record in (results, recorded))
        assert mine.keys() == theirs.keys(), f"candidates {sorted(mine)} against {sorted(theirs)}"
        for name, value in theirs.items():
            assert abs(mine[name] - value) <= tolerance * max(1.0, abs(value)), f"{name}: {mine[name]} against {value}"

    return close
