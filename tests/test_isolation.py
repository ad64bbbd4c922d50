"""A corpus of bad candidate files: each gets its own error, nothing leaves the sandbox, and the good
candidate in the same run gets the same results as in a run without the bad ones."""

import json
import shutil
from pathlib import Path

import pytest

from envcoder.runs.evaluation import EvalSettings, run_evaluation

from conftest import BUNDLED

CORPUS = Path(__file__).parent / "candidates" / "bad"
GOOD = BUNDLED / "cartpole" / "good_upright.py"
MARKERS = [Path("/tmp/envcoder_sandbox_marker"), Path("/tmp/envcoder_sandbox_marker.npy")]

EXPECTED = {
    "syntax_error": "syntax error",
    "missing_function": "defines none of the selected shaping functions",
    "misspelled": "(found compute_rewards: misspelled?)",
    "wrong_signature": "wrong signature",
    "wrong_shape": "in compute_reward(): returned shape (4, 2), expected (4,)",
    "wrong_dtype": "in compute_reward(): returned dtype int32, expected a float array",
    "nan_reward": "in compute_reward(): returned NaN or inf on the sample state",
    "forbidden_import": "import of 'subprocess' is not allowed",
    "file_access": "use of 'open' is not allowed",
    "file_via_jnp": "use of .save is not allowed",
    "endless_loop": "in compute_reward(): failed on the sample state: TimeoutError",
    "huge_allocation": "MiB of working memory",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    for marker in MARKERS:
        marker.unlink(missing_ok=True)
    patch = pytest.MonkeyPatch()
    patch.setattr("envcoder.shaping.validate.TRACE_TIME_LIMIT_S", 3.0)
    root = tmp_path_factory.mktemp("isolation")
    corpus, only_good = root / "corpus_files", root / "only_good"
    shutil.copytree(CORPUS, corpus)
    only_good.mkdir()
    for directory in (corpus, only_good):  # the same good candidate next to the bad ones, and alone
        shutil.copy(GOOD, directory / "good.py")
    results = {}
    for name, functions in (("corpus", corpus), ("good", only_good)):
        settings = EvalSettings(task="Cartpole", functions=functions, out=root / name, envs_per_candidate=8,
                                iterations=2, seeds=(0, 1),
                                ppo={"horizon_length": 8, "mini_epochs": 2, "units": (16, 16)})
        results[name] = run_evaluation(settings)
    patch.undo()
    return root, results


def test_each_bad_file_has_its_specific_error(runs):
    root, results = runs
    failures = {f["name"]: f["error"] for f in results["corpus"]["failures"]}
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
    assert len(results["corpus"]["groups"]) == len(results["good"]["groups"]) == 2  # two seeds
    for with_bad, alone in zip(results["corpus"]["groups"], results["good"]["groups"]):
        assert with_bad["candidate"] == alone["candidate"] == "good" and with_bad["seed"] == alone["seed"]
        for key in ("task_fitness", "episode_length", "shaped_return"):
            assert with_bad[key] == pytest.approx(alone[key], rel=1e-6)


def test_seed_statistics_in_results(runs):
    _, results = runs
    (ranked,) = results["good"]["ranking"]
    per_seed = [g["task_fitness"] for g in results["good"]["groups"]]
    assert ranked["seeds"] == 2 and ranked["fitness_mean"] == pytest.approx(sum(per_seed) / 2)
    assert ranked["ci_low"] <= ranked["fitness_mean"] <= ranked["ci_high"]
    assert results["good"]["not_separable_from_best"] == []  # nothing else to compare with
