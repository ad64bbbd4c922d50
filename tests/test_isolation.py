"""A corpus of bad candidate files: each gets its own error, nothing leaves the sandbox, and the good
candidate in the same run gets the same results as in a run without the bad ones."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from envcoder.runs.evaluation import EvalSettings, run_evaluation
from envcoder.runs.watchdog import EXIT_STATUS

from conftest import BUNDLED

CORPUS = Path(__file__).parent / "candidates" / "bad"
GOOD = BUNDLED / "cartpole" / "good_upright.py"
SHELL_NAME = "shell name; $(touch envcoder_sandbox_marker) `id`"
MARKERS = [Path("/tmp/envcoder_sandbox_marker"), Path("/tmp/envcoder_sandbox_marker.npy"),
           Path("/tmp/envcoder_sandbox_marker.txt"), Path.cwd() / "envcoder_sandbox_marker"]

EXPECTED = {
    "syntax_error": "syntax error",
    "missing_function": "defines none of the selected shaping functions",
    "misspelled": "(found compute_rewards: misspelled?)",
    "wrong_signature": "wrong signature",
    "wrong_shape": "in compute_reward(): returned shape (68, 2), expected (68,)",
    "wrong_dtype": "in compute_reward(): returned dtype int32, expected a float array",
    "nan_reward": "in compute_reward(): returned NaN or inf on the sample state",
    "forbidden_import": "import of 'subprocess' is not allowed",
    "file_access": "use of 'open' is not allowed",
    "file_via_jnp": "use of .save is not allowed",
    "endless_loop": "in compute_reward() while tracing it: took longer than 10 s (a Python loop that never ends",
    "huge_allocation": "MiB of working memory",
    # escapes through attribute chains of the allowed modules
    "getattr_computed": "use of 'getattr' is not allowed",
    "format_field": "use of .format is not allowed in candidate code (str.format reads attributes by name",
    "format_map": "use of .format_map is not allowed",
    "numpy_load": "use of .load is not allowed",
    "numpy_fromfile": "use of .fromfile is not allowed",
    "numpy_memmap": "use of .memmap is not allowed",
    "numpy_savetxt": "use of .savetxt is not allowed",
    "host_callback": "use of .pure_callback is not allowed",
    "jax_config_update": "use of .config is not allowed",
    "config_from_import": "`from jax import config` is not allowed",
    "attribute_chain": "in compute_reward(): failed on the sample state: AttributeError: jax.core is not available",
    "dunder_escape": "access to the private attribute '__globals__' is not allowed",
    "envcoder_package": "would bind the whole envcoder package",
    # changing what other candidates share
    "monkeypatch_module": "assigning to the attribute .sum is not allowed",
    "monkeypatch_helper": "assigning to the attribute .quat_rotate is not allowed",
    "mutate_state": "in compute_reward(): changes its argument 'state' in place (item assignment)",
    "mutate_state_method": "in compute_reward(): changes its argument 'state' in place (.pop())",
    # trace-time blow-ups and hangs only a separate process can stop
    "unrolled_loop": "in compute_reward() while tracing it",
    "deep_recursion": "in compute_reward(): failed on the sample state: RecursionError",
    "xla_while_forever": "in compute_reward() while running it: took longer than 10 s (a lax.while_loop that never",
    "module_level_hang": "while its module-level code ran: took longer than 10 s",
    # files that are not candidates
    "empty_file": "the file is empty",
    "non_utf8": "is not UTF-8 text (byte 0xff",
    SHELL_NAME: "has characters other than letters, digits",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    for marker in MARKERS:
        marker.unlink(missing_ok=True)
    root = tmp_path_factory.mktemp("isolation")
    corpus, only_good = root / "corpus_files", root / "only_good"
    shutil.copytree(CORPUS, corpus)
    (corpus / "non_utf8.py").write_bytes(b"def compute_reward(state):\n    return state['dof_pos'][:, 1]  # \xff\xfe\n")
    (corpus / f"{SHELL_NAME}.py").write_text("def compute_reward(state):\n    return state['dof_pos'][:, 1]\n")
    only_good.mkdir()
    for directory in (corpus, only_good):  # the same good candidate next to the bad ones, and alone
        shutil.copy(GOOD, directory / "good.py")
    results = {}
    for name, functions in (("corpus", corpus), ("good", only_good)):
        settings = EvalSettings(task="Cartpole", functions=functions, out=root / name, envs_per_candidate=8,
                                iterations=2, seeds=(0, 1), validation_timeout_s=10.0,
                                overrides={"horizon_length": 8, "mini_epochs": 2, "units": (16, 16)})
        results[name] = run_evaluation(settings)
    return root, results


def test_each_bad_file_has_its_specific_error(runs):
    root, results = runs
    failures = {f.name: f.error for f in results["corpus"].failures}
    assert len(EXPECTED) >= 30
    assert set(failures) == set(EXPECTED)
    for name, message in EXPECTED.items():
        assert message in failures[name], (name, failures[name])
        assert str(root / "corpus_files" / f"{name}.py") in failures[name]
    on_disk = {f["name"] for f in json.loads((root / "corpus" / "failures.json").read_text())}
    assert on_disk == set(EXPECTED)


def test_nothing_outside_the_sandbox_was_touched(runs):
    assert not any(marker.exists() for marker in MARKERS)


def test_good_candidate_unaffected_by_bad_neighbours(runs):
    _, results = runs
    assert len(results["corpus"].groups) == len(results["good"].groups) == 2  # two seeds
    for with_bad, alone in zip(results["corpus"].groups, results["good"].groups):
        assert with_bad.candidate == alone.candidate == "good" and with_bad.seed == alone.seed
        for key in ("task_fitness", "episode_length", "shaped_return", "training_task_fitness"):
            assert np.array_equal(getattr(with_bad, key), getattr(alone, key), equal_nan=True), key  # bit for bit


def test_seed_statistics_in_results(runs):
    _, results = runs
    (ranked,) = results["good"].ranking
    per_seed = [g.task_fitness for g in results["good"].groups]
    assert ranked.seeds == 2 and ranked.fitness_mean == pytest.approx(sum(per_seed) / 2)
    assert ranked.ci_low <= ranked.fitness_mean <= ranked.ci_high
    assert results["good"].not_separable_from_best == []  # nothing else to compare with


HANGS_IN_TRAINING = """
def compute_reward(state):
    while state["dof_pos"].shape[0] == 8:  # only with the run's 8 envs: the sandbox checks 68 sample states
        pass
    return state["dof_pos"][:, 1]
"""

LOOPS_ON_THE_DEVICE = """
import jax
import jax.numpy as jnp


def compute_reward(state):
    if state["dof_pos"].shape[0] == 8:  # only in training, as above; then a loop that never ends inside XLA
        count = jax.lax.while_loop(lambda c: jnp.isfinite(c), lambda c: c + 1.0, jnp.float32(0.0))
        return state["dof_pos"][:, 1] + 0.0 * count
    return state["dof_pos"][:, 1]
"""


@pytest.mark.slow
@pytest.mark.parametrize("source, limit, message", [
    (HANGS_IN_TRAINING, ["--compile-timeout", "60"],
     "compiling the initialization and the training iteration took longer than 60 s while tracing compute_reward() "
     "of hangs (a Python loop"),
    (LOOPS_ON_THE_DEVICE, ["--iteration-timeout", "5"],
     "training iteration 0 did not finish in 5 s; the candidates with a lax.while_loop, which can run for ever on "
     "the device: hangs;"),
])
def test_the_watchdog_ends_a_hung_run_naming_the_candidate(tmp_path, source, limit, message):
    """What passes the sandbox and hangs only in training (here: only with the run's env count) ends the run
    with one line naming the candidate; the run directory stays readable."""
    functions = tmp_path / "functions"
    functions.mkdir()
    shutil.copy(GOOD, functions / "good.py")
    (functions / "hangs.py").write_text(source)
    out = tmp_path / "run"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "ENVCODER_CACHE_DIR": jax.config.jax_compilation_cache_dir}
    proc = subprocess.run([sys.executable, "-c", "import sys; from envcoder.cli import main; sys.exit(main())",
                           "eval", "--task", "Cartpole", "--functions", str(functions), "--out", str(out),
                           "--envs-per-candidate", "8", "--iterations", "2", *limit, "ppo.horizon_length=8",
                           "ppo.mini_epochs=1"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == EXIT_STATUS, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("envcoder: error: ") and message in last, last
    assert json.loads((out / "config.json").read_text())["candidates"] == ["good", "hangs"]
