"""What a candidate's process hands over is parsed, checked, measured and run by the verifier, never by the training
process: each file of tests/candidates/forged reaches the real builtins (a frame walk, let past the static check
here) and hands over what ended or falsified a run before (damaged bytecode, a program for a TPU only, a size check
on the data, a 2^31-step loop with no cost reported, a step reported for another file with terminal escapes, a
death with escapes on its standard error, a fork storm). Beside two honest files in `envcoder eval`, the run ends
normally, the honest files' results are bitwise those of a run of the pair alone, every forged file is left out or
harmless under its own name, no escape byte reaches a record, and no jail folder stays behind."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from envcoder.runs.evaluation import EvalSettings, run_evaluation

from conftest import BUNDLED, CANDIDATES, ROOT, frames_unchecked

FORGED = CANDIDATES / "forged"
HONEST = ("good_upright", "alive_bonus")
LEFT_OUT = {
    "fuzzed_program": "its program",  # damaged bytes: refused, or the verifier died on them
    "tpu_program": "its program is made for the platforms ['tpu'], the run takes ['cpu']",
    "forged_cost_loop": "operations per environment and step at",
    "lying_phase": "took longer than",
    "lying_death": "the validation process died (exit 3)",
    "fork_storm": "STARTED",
}
"""Forged files left out, and what their one line says. `data_size_check` trains: the verifier removed the size
check, and what is left computes its reward."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("verifier")
    pair, forged = root / "pair", root / "forged"
    for folder in (pair, forged):
        folder.mkdir()
        for name in HONEST:
            shutil.copy(BUNDLED / "cartpole" / f"{name}.py", folder / f"{name}.py")
    for file in FORGED.glob("*.py"):
        shutil.copy(file, forged / file.name)
    results = {}
    for name, functions in (("pair", pair), ("forged", forged)):
        settings = EvalSettings(task="Cartpole", functions=functions, out=root / f"{name}_run", envs_per_candidate=8,
                                train_iterations=2, seeds=(0,), validation_timeout_s=10.0,
                                shaper_types=("compute_reward",),
                                overrides={"horizon_length": 8, "mini_epochs": 2, "units": (16, 16)})
        with frames_unchecked():
            results[name] = run_evaluation(settings)
    return root, results


def test_forged_hand_overs_end_no_run_and_change_no_honest_result(runs):
    root, results = runs
    honest = {r.name: r for r in results["pair"].ranking}
    beside = {r.name: r for r in results["forged"].ranking}
    assert set(honest) == set(HONEST) <= set(beside)
    for name in HONEST:
        assert beside[name].fitness_mean == honest[name].fitness_mean  # bitwise
    failures = json.loads((root / "forged_run" / "failures.json").read_text())
    named = {f["name"]: f["error"] for f in failures}
    assert not set(named) & set(HONEST), named
    for name, message in LEFT_OUT.items():
        assert message in named.get(name, ""), (name, named.get(name))
        assert "\n" not in named[name] and "\x1b" not in named[name] and "\x07" not in named[name]
    assert int(named["fork_storm"].split("STARTED ")[1].split()[0]) < 300
    assert "data_size_check" in beside  # harmless once its size check is gone
    for record in ("failures.json", "report.html", "results.json"):
        text = (root / "forged_run" / record).read_text()
        assert "\x1b" not in text and "\x07" not in text, record


def test_no_jail_folder_is_left_behind(runs):
    mine = list(Path(tempfile.gettempdir()).glob(f"envcoder-jail-{os.getpid()}-*"))
    assert mine == []


def test_a_frame_walk_is_refused_before_it_runs():
    """The static check refuses frame attributes by name and in strings: the second wall behind the jail."""
    from envcoder.candidates.sandbox import SandboxValidator

    walk = CANDIDATES / "attacks" / "frame_walk.py"
    named = "import jax.numpy as jnp\nA = 'f_back'\n\n\ndef compute_reward(state):\n    return jnp.cos(state['dof_pos'][:, 1])\n"
    with SandboxValidator("Cartpole", ("compute_reward",), timeout_s=30.0) as validator:
        by_name, by_text = validator.validate([("walk", walk.read_text(), str(walk)), ("text", named, "text.py")])
    assert "use of .f_back is not allowed in candidate code" in by_name.error
    assert "the text 'f_back' is not allowed in candidate code" in by_text.error


def test_the_folders_of_a_killed_run_are_removed_by_the_next():
    """A training process killed before it removed its workers' folders: the next process's first worker removes
    them; a living process's folders stay."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = Path(tempfile.mkdtemp(prefix=f"envcoder-jail-{int(gone.stdout)}-"))
    (dead / "states.npz").write_bytes(b"left behind")
    alive = Path(tempfile.mkdtemp(prefix=f"envcoder-jail-{os.getpid()}-"))
    try:
        code = "from envcoder.candidates.pool import remove_abandoned_folders; print(remove_abandoned_folders())"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=120)
        assert str(dead) in out.stdout and not dead.exists() and alive.exists(), out.stderr[-2000:]
    finally:
        shutil.rmtree(dead, ignore_errors=True)
        shutil.rmtree(alive, ignore_errors=True)
