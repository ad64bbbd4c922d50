"""The README's first run, `envcoder eval --task Cartpole` (4 candidates × 256 environments × 60 iterations): its
results to the last bit against the recording of this kind of CPU, its run directory, metrics, TensorBoard events and
report. CI trains it once, from the installed wheel outside the checkout (`.ci/run`), and these tests read that run
(ENVCODER_README_RUN) in the quick suite; without it they train it themselves and are slow tests."""

import csv
import dataclasses
import json
import os
from pathlib import Path

import pytest

from conftest import BUNDLED
from goldens import assert_a_recording_equals, run_as_a_user, same_fitness
from test_loggers import read_scalars
from envcoder.cli import main
from envcoder.rl.config import load_config_file
from envcoder.rl.ppo.config import PPOConfig

README_RUN = os.environ.get("ENVCODER_README_RUN")
"""The README's run trained elsewhere (CI: by the installed wheel, with `--config` and the override below)."""
pytestmark = [] if README_RUN else [pytest.mark.slow]

PPO_YAML = "critic_coef: 4.0\nmini_epochs: 8\n"
"""The config file the run is given, restating Cartpole's own values (`.ci/run` writes the same)."""

ITERATIONS = 60  # the README's run: `envcoder eval --task Cartpole` (256 envs per candidate, Cartpole's 60)


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    """The README's first command, with a config file and an override that restate the task's own values: they go
    through every layer without changing what the run learns. CI runs it from the installed wheel, outside the
    checkout, and names its directory in ENVCODER_README_RUN; elsewhere it trains here (a slow test)."""
    if README_RUN:
        return 0, Path(README_RUN)
    root = tmp_path_factory.mktemp("runs")
    out = root / "cartpole"
    (root / "ppo.yaml").write_text(PPO_YAML)
    status = run_as_a_user(["eval", "--task", "Cartpole", "--config", str(root / "ppo.yaml"), "ppo.reward_scale=0.1",
                            "--out", str(out)])
    return status, out


def test_the_readme_run_gives_the_recorded_results_bit_for_bit(cartpole_run):
    """`results.json` of the README's Cartpole run (CPU, fixed seeds: JAX is deterministic there) is, to the last bit
    of every float, the one recorded on this kind of CPU (tests/golden/cartpole_readme/, one file per kind; the
    first was recorded before the redesign of the trainer into environment, learners and driver, and written again
    when the ranking gained learning speed: every group's number stayed the same). Only the timings differ between
    runs. On a kind of CPU with no recording, every candidate's fitness must be a recording's (tests/goldens.py)."""
    _, out = cartpole_run
    results = json.loads((out / "results.json").read_text())
    assert_a_recording_equals(results, "cartpole_readme", same_fitness(1e-3))


def test_candidates_that_all_reach_the_ceiling_are_ranked_by_learning_speed(cartpole_run):
    """The README's run ends with three candidates at exactly 1.000: they are ordered by the area under their
    training curve (each group's from metrics.csv), said to be tied, and never "not separable"."""
    from envcoder.runs.directory import RunDirectory
    from envcoder.runs.ranking import learning_auc
    from envcoder.runs.results import RunResults

    _, out = cartpole_run
    results = RunResults.read(out)
    ceiling = [r for r in results.ranking if r.fitness_mean == 1.0]
    assert len(ceiling) == 3 and results.ranking[:3] == ceiling
    assert [r.auc for r in ceiling] == sorted((r.auc for r in ceiling), reverse=True)
    assert ceiling[0].auc > ceiling[2].auc
    curves = RunDirectory(out, resume=True, writes=False).read_group_series("task_fitness")
    for r in ceiling:
        assert r.auc == pytest.approx(learning_auc(curves[(r.name, 0)]))
    assert results.tied_with_best == [r.name for r in ceiling[1:]] and results.not_separable_from_best == []
    assert results.fitness_bounds == (0.0, 1.0)


def test_run_directory_is_complete_and_readable(cartpole_run):
    status, out = cartpole_run
    assert status == 0
    config = json.loads((out / "config.json").read_text())
    assert config["task"] == "Cartpole" and config["ppo"]["max_epochs"] == ITERATIONS
    assert config["config_file"].endswith("ppo.yaml") and config["overrides"] == {"reward_scale": 0.1}
    # The resolved settings are saved as YAML that resolves to the same config when reused as --config.
    resolved = PPOConfig.resolve([("ppo.yaml", load_config_file(out / "ppo.yaml"))])
    assert dataclasses.asdict(resolved) == {k: tuple(v) if isinstance(v, list) else v
                                            for k, v in config["ppo"].items()}
    bundled = sorted(p.stem for p in (BUNDLED / "cartpole").glob("*.py"))
    assert sorted(config["candidates"]) == bundled
    for name in bundled:
        assert (out / "candidates" / f"{name}.py").read_text() == (BUNDLED / "cartpole" / f"{name}.py").read_text()
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert len(rows) == ITERATIONS * len(bundled)
    assert {"task_fitness", "shaped_return", "episode_length", "kl", "learning_rate", "env_steps_per_s"} <= set(rows[0])
    results = json.loads((out / "results.json").read_text())
    assert [r["name"] for r in results["ranking"]] and json.loads((out / "failures.json").read_text()) == []
    # Reward components are logged for the candidate that defines them, and left blank for the others.
    last = {r["candidate"]: r for r in rows[-len(bundled):]}
    assert float(last["good_upright"]["reward/upright"]) > 0.5 and last["alive_bonus"]["reward/upright"] == ""


def test_good_candidate_learns_and_ranks_above_the_poor_one(cartpole_run):
    _, out = cartpole_run
    ranking = json.loads((out / "results.json").read_text())["ranking"]
    fitness = {r["name"]: r["fitness_mean"] for r in ranking}
    order = [r["name"] for r in ranking]
    assert fitness["good_upright"] >= 0.9, fitness
    assert order.index("good_upright") < order.index("poor_spin")
    assert fitness["poor_spin"] < 0.5


def test_tensorboard_events_per_candidate_match_the_metrics_file(cartpole_run):
    _, out = cartpole_run
    rows = [r for r in csv.DictReader((out / "metrics.csv").open()) if r["candidate"] == "good_upright"]
    scalars = read_scalars(out / "tensorboard" / "good_upright#0")
    for key in ("task_fitness", "shaped_return", "reward/upright", "episode_length", "kl", "learning_rate",
                "actor_loss", "env_steps_per_s"):
        logged = {int(r["iteration"]): float(r[key]) for r in rows if r[key] != ""}
        assert scalars[key] == pytest.approx(logged, rel=1e-6), key
    assert "reward/upright" not in read_scalars(out / "tensorboard" / "alive_bonus#0")


def test_report_lists_every_candidate_and_embeds_valid_images(cartpole_run, tmp_path):
    import base64
    import io
    import re
    import shutil

    import matplotlib.image

    from envcoder.runs.report import write_report

    _, out = cartpole_run
    page = (out / "report.html").read_text()  # written by the run itself
    results = json.loads((out / "results.json").read_text())
    for r in results["ranking"]:
        assert f"<td class=name>{r['name']}</td>" in page
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(images) == 3  # fitness curves, shaped-return curves, reward components
    for data in images:
        pixels = matplotlib.image.imread(io.BytesIO(base64.b64decode(data)), format="png")
        assert pixels.shape[0] > 100 and pixels.shape[1] > 100 and pixels.std() > 0
    # Failures and divergences are listed with their reasons.
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    results["failures"] = [{"file": "bad.py", "name": "bad", "error": "bad.py in compute_reward(): returned NaN"}]
    results["groups"][0]["diverged_at_iteration"] = 7
    assert "episodes_end_early" not in results  # the README's candidates hold the pole for all 500 steps
    results["episodes_end_early"] = {"candidate": "alive_bonus", "episode_length": 60.0, "max_episode_length": 500}
    (copy / "results.json").write_text(json.dumps(results))
    page = write_report(copy).read_text()
    assert "bad.py in compute_reward(): returned NaN" in page
    assert "<b>Every policy fails early:</b> alive_bonus's episodes last longest, 60 of 500 steps on average" in page
    assert f"<b>{results['groups'][0]['candidate']}</b>: seed 0 diverged at iteration 7" in page
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert main(["report", "--run", str(copy)]) == 0  # RUN, or --run RUN as `play` takes it


def test_out_directory_that_exists_is_refused(cartpole_run, capsys):
    _, out = cartpole_run
    assert main(["eval", "--task", "Cartpole", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
