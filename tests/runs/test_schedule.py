"""`--schedule halving` (successive halving in one process) and the ranking's trust figures: the rungs' sizes,
who is dropped and why, what survivors carry into the next rung, resume inside and between rungs, and the
pairwise win probabilities and the still-improving check against hand-worked numbers."""

import csv
import json
import math
import shutil
import sys

import numpy as np
import pytest

from conftest import BENCHMARKS, BUNDLED
from envcoder.cli import main
from envcoder.rl.learner import TrainState
from envcoder.runs.directory import RunDirectory
from envcoder.runs.background import GIL_SWITCH_INTERVAL_S
from envcoder.runs.ranking import Ranked, mean_ci, rank, still_improving, win_probabilities
from envcoder.runs.schedule import Rung, carry_over, rungs, survivors

ITERATIONS, ENVS = 24, 16
NAMES = ("good_upright", "alive_bonus", "angle_penalty", "poor_spin")


# ---- the schedule's arithmetic ----------------------------------------------------------------------------


def test_rungs_halve_the_candidates_and_give_their_envs_to_the_survivors():
    assert rungs("flat", 10, 256, 500) == [Rung(500, 10, 256)]
    assert rungs("halving", 4, 16, 24) == [Rung(8, 4, 16), Rung(16, 2, 32), Rung(24, 1, 64)]
    # 20 candidates: 4 rungs (the default's most), every rung steps at most the first rung's 5120 envs.
    plan = rungs("halving", 20, 256, 500)
    assert [(r.end, r.candidates, r.envs_per_candidate) for r in plan] == [
        (125, 20, 256), (250, 10, 512), (375, 5, 1024), (500, 3, 1664)]
    assert all(r.candidates * r.envs_per_candidate <= 20 * 256 for r in plan)
    # 21 candidates: 11 survivors share 21 × 256 envs: 488 each, in steps of 64: 448.
    assert [r.envs_per_candidate for r in rungs("halving", 21, 256, 400)] == [256, 448, 896, 1792]
    # A batch that must split into minibatches of 1000 env steps: 448 and 384 do not fit, 320 does.
    assert rungs("halving", 21, 256, 400, count=2, fits=lambda envs: envs * 25 % 1000 == 0) == [
        Rung(200, 21, 256), Rung(400, 11, 320)]
    assert rungs("halving", 1, 64, 10) == [Rung(10, 1, 64)]


def test_rungs_beyond_what_the_candidates_or_iterations_allow_are_fewer():
    assert len(rungs("halving", 4, 16, 24, 9)) == 3  # 4 candidates halve to one in 3 rungs
    assert len(rungs("halving", 4, 16, 2, 3)) == 2  # 2 iterations: 2 rungs of one
    assert rungs("halving", 2, 16, 10, 5) == [Rung(5, 2, 16), Rung(10, 1, 32)]


@pytest.mark.parametrize("args, message", [
    (("halving", 4, 16, 24, 0), "--rungs 0: pass 1 or more"),
    (("sometimes", 4, 16, 24), "--schedule 'sometimes': choose one of flat, halving"),
])
def test_bad_schedules_are_refused_with_what_to_pass(args, message):
    with pytest.raises(ValueError, match=message):
        rungs(*args)


def test_survivors_are_the_best_scores_nan_last_in_the_given_order():
    scores = {"a": 0.2, "b": float("nan"), "c": 0.9, "d": 0.5}
    assert survivors(scores, 2, higher_is_better=True) == ["c", "d"]
    assert survivors(scores, 2, higher_is_better=False) == ["a", "d"]
    assert survivors(scores, 3, higher_is_better=True) == ["a", "c", "d"]


def test_carry_over_takes_the_survivors_rows_and_the_overlap_of_padded_sizes():
    def state(params, obs_rms, iteration):
        fields = dict.fromkeys(TrainState._fields)
        return TrainState(**{**fields, "params": params, "obs_rms": obs_rms, "env": "old env",
                             "iteration": np.asarray(iteration), "learning_rate": np.arange(3.0)})
    old = state({"w": np.arange(3 * 2 * 4.0).reshape(3, 2, 4)}, np.arange(3 * 5.0).reshape(3, 5), 7)
    fresh = state({"w": -np.ones((2, 3, 3))}, -np.ones((2, 4)), 0)._replace(env="fresh env",
                                                                            learning_rate=np.zeros(2))
    new = carry_over(old, np.array([2, 0]), fresh)
    w = new.params["w"]
    np.testing.assert_array_equal(w[:, :2, :3], old.params["w"][[2, 0]][:, :, :3])  # the overlap: old's
    np.testing.assert_array_equal(w[:, 2, :], -1)  # a size the survivors now need more of: fresh's
    np.testing.assert_array_equal(new.obs_rms, old.obs_rms[[2, 0]][:, :4])  # a shrunk padding: cut
    np.testing.assert_array_equal(new.learning_rate, [2.0, 0.0])
    assert new.env == "fresh env" and int(new.iteration) == 7


# ---- trust in a ranking -----------------------------------------------------------------------------------


def test_win_probability_by_hand():
    # Welch's t. c = (0.4, 0.8) against the constant d = 0.5: difference 0.1, standard error sqrt(0.08 / 2) = 0.2,
    # 1 degree of freedom (a Cauchy distribution): P = 1/2 + atan(0.5) / pi.
    p = win_probabilities({"a": [1.0, 2.0], "b": [0.0, 1.0], "c": [0.4, 0.8], "d": [0.5, 0.5], "one": [1.0]})
    assert p["c"]["d"] == pytest.approx(0.5 + math.atan(0.5) / math.pi) and p["d"]["c"] == pytest.approx(
        0.5 - math.atan(0.5) / math.pi)
    # a against b: equal variances 0.5, difference 1, standard error sqrt(0.5 / 2 + 0.5 / 2), t = sqrt(2), 2 degrees
    # of freedom, whose CDF is 1/2 + t / (2 sqrt(2 + t^2)) = 1/2 + sqrt(2) / 4.
    assert p["a"]["b"] == pytest.approx(0.5 + math.sqrt(2) / 4) and p["b"]["a"] == pytest.approx(0.5 - math.sqrt(2) / 4)
    assert "one" not in p and "one" not in p["a"]  # one seed: no spread to reason from
    lower = win_probabilities({"a": [1.0, 2.0], "b": [0.0, 1.0]}, higher_is_better=False)
    assert lower["a"]["b"] == pytest.approx(0.5 - math.sqrt(2) / 4)
    # no spread: certain, and equal constants tie at a half
    assert win_probabilities({"x": [1.0, 1.0], "y": [0.0, 0.0]})["x"]["y"] == 1.0
    assert win_probabilities({"x": [1.0, 1.0], "y": [1.0, 1.0]})["x"]["y"] == 0.5


def test_two_seeds_that_never_overlap_are_not_a_certain_win():
    # The case measured on Ant (docs/benchmarks/fidelity.md): two seeds each, every value of one above every
    # value of the other. A bootstrap over seeds called that 1.00; a third seed reversed the pair.
    p = win_probabilities({"forward_velocity": [3.049, 4.886], "forward_only": [2.592, 2.938]})
    assert 0.7 < p["forward_velocity"]["forward_only"] < 0.9


def test_a_95_percent_interval_from_few_seeds_holds_the_true_mean_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    for seeds in (2, 3, 6):
        draws = rng.normal(1.0, 0.5, size=(4000, seeds))
        covered = [low <= 1.0 <= high for low, high in map(mean_ci, draws)]
        assert np.mean(covered) == pytest.approx(0.95, abs=0.015), seeds
    # by hand: 2 seeds (1, 2): mean 1.5, standard error 0.5, t(0.975, 1 dof) = tan(0.475 pi)
    np.testing.assert_allclose(mean_ci([1.0, 2.0]), (1.5 - 0.5 * math.tan(0.475 * math.pi),
                                                       1.5 + 0.5 * math.tan(0.475 * math.pi)))
    assert mean_ci([0.7, 0.7, 0.7]) == pytest.approx((0.7, 0.7)) and mean_ci([0.3]) == (0.3, 0.3)


def test_still_improving_by_hand():
    iterations = np.arange(100)
    rising = still_improving(iterations, iterations * 0.01)
    # the tail is iterations 80..99 (20%): earlier half 80..89 (mean 0.845), later 90..99 (mean 0.945)
    assert rising["improving"] and rising["from_iteration"] == 80 and rising["to_iteration"] == 99
    assert rising["earlier_mean"] == pytest.approx(0.845) and rising["later_mean"] == pytest.approx(0.945)
    assert rising["gain"] == pytest.approx(0.1)
    assert not still_improving(iterations, iterations * 0.01, higher_is_better=False)["improving"]
    noise = np.random.default_rng(0).normal(size=100)
    assert not still_improving(iterations, noise)["improving"]
    assert still_improving(iterations[:10], iterations[:10] * 1.0) is None  # too few points


def test_rank_puts_candidates_that_trained_longer_first():
    def row(fitness, dropped=None):
        return {"task_fitness": fitness, "shaped_return": 0.0, "episode_length": 1.0,
                "eliminated_at_iteration": dropped}
    ranked = rank({"early": [row(0.9, 8)], "late": [row(0.1, 16)], "end": [row(0.2)], "end2": [row(0.5)]})
    assert [r.name for r in ranked] == ["end2", "end", "late", "early"]
    assert [r.eliminated_at for r in ranked] == [None, None, 16, 8]


# ---- a halving run end to end (Cartpole, CPU) -------------------------------------------------------------


def eval_args(functions, out):
    return ["eval", "--task", "Cartpole", "--functions", str(functions), "--envs-per-candidate", str(ENVS),
            "--iterations", str(ITERATIONS), "--seeds", "2", "--schedule", "halving", "ppo.save_frequency=3",
            "--no-tensorboard", "--out", str(out)]


def killed_at(iteration):
    append = RunDirectory.append_metrics

    def append_or_stop(self, i, *args):
        if i == iteration:
            raise KeyboardInterrupt
        return append(self, i, *args)
    return append_or_stop


@pytest.fixture(scope="module")
def halving(tmp_path_factory):
    """A whole halving run, and the same run killed inside rung 2 (after the checkpoint of iteration 15, so that
    the end of rung 2 needs iteration 14's metrics from before the kill) and at the first iteration of rung 2
    (after the checkpoint that ends rung 1), each resumed."""
    root = tmp_path_factory.mktemp("halving")
    functions = root / "functions"
    functions.mkdir()
    for name in NAMES:
        shutil.copy(BUNDLED / "cartpole" / f"{name}.py", functions)
    # Training runs with a short thread switch interval (the evaluation traces in a background thread meanwhile:
    # docs/benchmarks/throughput.md) and gives the process its own back.
    before, seen, append = sys.getswitchinterval(), [], RunDirectory.append_metrics
    with pytest.MonkeyPatch.context() as watching:
        watching.setattr(RunDirectory, "append_metrics",
                         lambda self, *a, **k: (seen.append(sys.getswitchinterval()), append(self, *a, **k))[1])
        assert main(eval_args(functions, root / "whole")) == 0
    assert seen and all(x == pytest.approx(GIL_SWITCH_INTERVAL_S) for x in seen)
    assert sys.getswitchinterval() == before and before != pytest.approx(GIL_SWITCH_INTERVAL_S)
    for name, iteration, checkpointed in (("inside", 15, 15), ("between", 8, 8)):
        with pytest.MonkeyPatch.context() as killing:
            killing.setattr(RunDirectory, "append_metrics", killed_at(iteration))
            assert main(eval_args(functions, root / name)) == 130
        assert json.loads((root / name / "checkpoints" / "progress.json").read_text())["iteration"] == checkpointed
        assert main(["eval", "--resume", str(root / name)]) == 0
    return root


def read_metrics(run):
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow  # the halving fixture: 3 min here (a whole halving run, two kills, two resumes)
def test_each_rung_drops_the_worse_half_by_its_last_quarter_of_training_fitness(halving):
    results = json.loads((halving / "whole" / "results.json").read_text())
    rows = read_metrics(halving / "whole")
    assert all(None not in row.values() for row in rows)  # every row has the header's columns
    dropped = {g["candidate"]: g.get("eliminated_at_iteration") for g in results["groups"]}
    alive = list(NAMES)
    for end, keep in ((8, 2), (16, 1)):
        window = range(end - 2, end)  # the last quarter of the rung's 8 iterations
        score = {}
        for name in alive:
            per_seed = []
            for seed in ("0", "1"):
                mine = [r for r in rows if r["candidate"] == name and r["seed"] == seed and r["task_fitness"] != ""
                        and int(r["iteration"]) < end]
                recent = [float(r["task_fitness"]) for r in mine if int(r["iteration"]) in window]
                # no episode ended in the window: the last one that did
                per_seed.append(np.mean(recent) if recent else float(mine[-1]["task_fitness"]))
            score[name] = np.mean(per_seed)
        best = sorted(alive, key=lambda n: -score[n])
        assert {n for n in alive if dropped[n] == end} == set(best[keep:])
        for g in results["groups"]:
            if g["candidate"] in best[keep:]:  # its reported fitness is that window's mean over its episodes
                assert g["eliminated_at_iteration"] == end
        # a dropped candidate has no metrics rows after its rung
        assert not [r for r in rows if r["candidate"] in best[keep:] and int(r["iteration"]) >= end]
        alive = best[:keep]
    assert [r["name"] for r in results["ranking"]][0] == alive[0]
    assert results["ranking"][0]["eliminated_at"] is None
    assert [r["eliminated_at"] for r in results["ranking"]][1:] == [16, 8, 8]


@pytest.mark.slow
def test_survivors_train_on_with_the_freed_envs(halving):
    results = json.loads((halving / "whole" / "results.json").read_text())
    assert [(r["candidates"], r["envs_per_candidate"], r["first_iteration"]) for r in results["timings"]["rungs"]] == [
        (4, 16, 0), (2, 32, 8), (1, 64, 16)]
    rows = read_metrics(halving / "whole")
    winner = results["ranking"][0]["name"]
    steps = {int(r["iteration"]): float(r["episodes"]) for r in rows if r["candidate"] == winner and r["seed"] == "0"}
    assert sorted(steps) == list(range(ITERATIONS))  # trained every iteration, without a gap between rungs
    # It kept learning across the rungs (the carried-over policy, not a fresh one): the last rung's episodes
    # are better than the first rung's.
    fitness = {int(r["iteration"]): float(r["task_fitness"]) for r in rows
               if r["candidate"] == winner and r["seed"] == "0" and r["task_fitness"] != ""}
    assert np.mean([v for i, v in fitness.items() if i >= 16]) > np.mean([v for i, v in fitness.items() if i < 8])
    # Win probabilities compare only candidates that trained equally long: the two dropped after rung 1.
    first_out = [r["name"] for r in results["ranking"] if r["eliminated_at"] == 8]
    p = results["win_probability"]
    assert {name for name, row in p.items() if row} == set(first_out)
    a, b = first_out
    assert set(p[a]) == {b} and p[a][b] + p[b][a] == pytest.approx(1.0)
    report = (halving / "whole" / "report.html").read_text()
    assert report.count("dropped by halving after iteration 8") == 2
    assert report.count("dropped by halving after iteration 16") == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["inside", "between"])
def test_a_halving_run_resumed_inside_or_between_rungs_equals_the_uninterrupted_one(halving, name):
    whole, resumed = halving / "whole", halving / name
    a, b = json.loads((whole / "results.json").read_text()), json.loads((resumed / "results.json").read_text())
    assert a["ranking"] == b["ranking"] and a["groups"] == b["groups"]

    def rows(run):
        return [{k: v for k, v in row.items() if k != "env_steps_per_s"} for row in read_metrics(run)]
    assert rows(whole) == rows(resumed)


def test_fidelity_benchmark_agreement_and_training_scores_by_hand():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fidelity", BENCHMARKS / "fidelity.py")
    fidelity = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fidelity)
    reference = ["a", "b", "c", "d", "e"]
    same = fidelity.agreement(reference, reference, samples=200)
    assert same["spearman"] == pytest.approx(1.0) and same["top1"] and same["top3"] == 1.0
    flipped = fidelity.agreement(reference[::-1], reference, samples=200)
    assert flipped["spearman"] == pytest.approx(-1.0) and flipped["kendall"] == pytest.approx(-1.0)
    assert not flipped["top1"] and flipped["top3"] == pytest.approx(1 / 3)  # only "c" is in both top threes
    # One swap of neighbours among 5: Spearman 1 - 6·2/(5·24) = 0.9; Kendall (9 - 1)/10 = 0.8.
    swapped = fidelity.agreement(["b", "a", "c", "d", "e"], reference, samples=200)
    assert swapped["spearman"] == pytest.approx(0.9) and swapped["kendall"] == pytest.approx(0.8)
    # Training scores: the mean over the last quarter of the first k iterations, then over seeds; a seed with
    # no ended episode there takes its last one.
    rows = [{"iteration": str(i), "seed": str(s), "candidate": "x", "task_fitness": str(v)}
            for s, values in ((0, [1.0, 2.0, 3.0, 4.0]), (1, [5.0, "", "", ""])) for i, v in enumerate(values)]
    assert fidelity.training_scores(rows, 4, 1) == {"x": 4.0}
    assert fidelity.training_scores(rows, 4, 2) == {"x": (4.0 + 5.0) / 2}
    assert fidelity.training_scores(rows, 2, 1) == {"x": 2.0}


def test_fidelity_analysis_of_a_cut_off_reference_rescores_earlier_orders_with_their_regret(tmp_path):
    """A reference without results.json (cut off at iteration 4 of 10) is ranked by its training episodes over
    the last quarter of what it ran; an earlier analysis's order is compared with it, with the top-1 regret."""
    import argparse
    import csv
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("fidelity", BENCHMARKS / "fidelity.py")
    fidelity = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fidelity)
    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / "config.json").write_text(json.dumps({
        "task": "Cartpole", "fitness": "upright", "candidates": ["a", "b", "c"], "seeds": [0],
        "envs_per_candidate": 4, "iterations": 10, "algo": "ppo", "ppo": {"horizon_length": 2},
        "versions": {"device": "cpu"}}))
    final = {"a": 0.9, "b": 0.5, "c": 0.2}  # Cartpole's `upright`: higher is better, so a, b, c
    with open(reference / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["iteration", "candidate", "seed", "env_steps_per_s", "task_fitness"])
        for it in range(4):
            for name, value in final.items():
                w.writerow([it, name, 0, 24.0 * (it + 1), value if it == 3 else 0.0])
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"settings": [{"setting": "cheap", "order": ["c", "b", "a"], "envs": 4, "seeds": 1,
                                                 "iterations": 2, "seconds": 1.0, "env_steps": 48, "note": ""}]}))
    summary = fidelity.analyze(argparse.Namespace(reference=str(reference), cheap=[], halving=[], iterations=[2],
                                                  seeds=[1], rescore=[str(earlier)], out=None))
    ref = summary["reference"]
    assert ref["order"] == ["a", "b", "c"] and ref["iterations"] == 4 and ref["of_iterations"] == 10
    assert ref["ranked_by"] == "training episodes" and ref["scores"] == final  # last quarter of 4: iteration 3
    # Training seconds: each iteration's 3 candidates × 4 envs × horizon 2 = 24 env steps at 24·(k+1) per s.
    assert ref["seconds"] == pytest.approx(1 + 1 / 2 + 1 / 3 + 1 / 4)
    (setting,) = summary["settings"]
    assert setting["note"] == "run of earlier.json" and setting["spearman"] == pytest.approx(-1.0)
    assert setting["top1_regret"] == pytest.approx(0.9 - 0.2)  # it picks c, the reference's worst


def test_a_ranking_in_a_log_file_keeps_every_number_whole_and_a_terminal_row_fits_100_columns():
    import io

    from rich.console import Console

    from envcoder.runs.results import print_table, ranking_table

    ranking = [Ranked("tracking_sigma[SIGMA=0.25]", 0.7123456, 0.1, 0.61234, 0.81234, 6, 3.08, 570.0),
               Ranked("proprioceptive_observation", 1.1, 0.2, 0.9, 1.3, 6, 2.88, 468.0)]
    doc = "tracking: mean abs error of the base velocity against the command (m/s); lower is better"
    win = {"tracking_sigma[SIGMA=0.25]": {"proprioceptive_observation": 0.93}}
    log = io.StringIO()
    print_table(Console(file=log), ranking_table(ranking, doc, win))  # a file: not a terminal, 80 columns
    text = log.getvalue()
    for number in ("0.712", "[0.612, 0.812]", "1.100", "[0.900, 1.300]", "3.08", "570", "0.93",
                   "tracking_sigma[SIGMA=0.25]", "proprioceptive_observation"):
        assert number in text, number
    assert "…" not in text
    terminal = io.StringIO()
    print_table(Console(file=terminal, width=100, force_terminal=True, color_system=None),
                ranking_table(ranking, doc, win))
    rows = [line for line in terminal.getvalue().splitlines() if "tracking_sigma" in line or "proprio" in line]
    assert len(rows) == 2 and all(len(row) <= 100 and "…" not in row for row in rows)


@pytest.mark.parametrize("pieces", [False, True])
def test_fidelity_on_a_eureka_run_compares_each_iteration_and_eureka_s_own_order(tmp_path, pieces):
    """Per Eureka iteration, a cheap run's orders and Eureka's own (the last "saving next best successes" of each
    response's training output) against a reference ranked by its best training episodes; a response that did not
    train in Eureka is left out of Eureka's order only. The same from the run trained in two pieces (an iteration
    each, the task default and sparse reward in both): the same numbers, the pieces' env steps and seconds summed."""
    import argparse
    import csv
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("fidelity", BENCHMARKS / "fidelity.py")
    fidelity = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fidelity)
    names = [f"env_iter{i}_response{j}_rewardonly" for i in (0, 1) for j in range(4)]
    best = dict(zip(names, [4.0, 3.0, 2.0, 1.0, 1.0, 2.0, 3.0, 4.0]))  # iteration 0: r0 first; iteration 1: r3
    best.update(sparse=0.5, task_default=5.0)
    evaluation = {n: -v for n, v in best.items()}  # the deterministic evaluation says the reverse

    def run_dir(name: str, metrics: dict | None, iteration: int | None = None):
        folder = tmp_path / name
        folder.mkdir()
        trained = [n for n in best if iteration is None or not n.startswith("env_iter")
                   or n.startswith(f"env_iter{iteration}_")]
        (folder / "config.json").write_text(json.dumps({
            "task": "Ant", "fitness": "forward_speed", "candidates": trained, "seeds": [0],
            "envs_per_candidate": 4, "iterations": 2, "algo": "ppo", "ppo": {"horizon_length": 2},
            "versions": {"device": "cpu"}}))
        (folder / "results.json").write_text(json.dumps({
            "higher_is_better": True, "timings": {"total_s": 10.0, "init_s": 1.0, "first_iteration_s": 1.0},
            "groups": [{"candidate": n, "seed": 0, "task_fitness": evaluation[n], "training_best": best[n]}
                       for n in trained]}))
        if metrics:
            with open(folder / "metrics.csv", "w", newline="") as f:
                w = csv.writer(f)
                w.writerow(["iteration", "candidate", "seed", "env_steps_per_s", "task_fitness"])
                for it in range(2):
                    for n in trained:
                        w.writerow([it, n, 0, 80.0, metrics[n]])
        return [folder]

    def trained_in(name: str, metrics: dict | None):
        if not pieces:
            return run_dir(name, metrics)
        return run_dir(f"{name}_iter0", metrics, 0) + run_dir(f"{name}_iter1", metrics, 1)

    reference = trained_in("reference", None)
    cheap = trained_in("cheap", {n: (v if n.startswith("env_iter0") else -v) for n, v in best.items()})
    eureka = tmp_path / "eureka_run"
    eureka.mkdir()
    logged = {"env_iter0_response0": [1.0, 2.1], "env_iter0_response1": [1.5], "env_iter0_response2": [],
              "env_iter0_response3": [0.3], "env_iter1_response0": [9.0], "env_iter1_response1": [8.0],
              "env_iter1_response2": [7.0], "env_iter1_response3": [6.0]}
    for stem, values in logged.items():
        (eureka / f"{stem}.txt").write_text("epoch: 1/500\n" + "".join(
            f"saving next best successes:  {v}\n=> saving checkpoint 'x.pth'\n" for v in values))
    assert fidelity.eureka_scores(eureka) == {f"{s}_rewardonly": v[-1] for s, v in logged.items() if v}

    summary = fidelity.eureka(argparse.Namespace(
        run=str(eureka), reference=[str(r) for r in reference], reference_by="training_best",
        cheap=[str(c) for c in cheap], halving=[], iterations=[2], seeds=[1], out=str(tmp_path / "out.json")))
    assert summary["reference"]["ranked_by"] == "best training episodes"
    assert summary["reference"]["order"][:3] == ["task_default", "env_iter0_response0_rewardonly",
                                                "env_iter1_response3_rewardonly"]
    rows = {s["setting"]: s for s in summary["settings"]}
    same = rows["4 envs × 1 seed(s) × 2 it., best training episodes"]
    assert same["mean_spearman"] == pytest.approx(1.0) and (same["top1"], same["of"]) == (2, 2)
    reverse = rows["4 envs × 1 seed(s) × 2 it., deterministic evaluation"]
    assert reverse["mean_spearman"] == pytest.approx(-1.0) and reverse["top1"] == 0
    training = rows["4 envs × 1 seed(s) × 2 it., training episodes"]  # iteration 0 as the reference, 1 reversed
    assert training["iterations"][0]["spearman"] == pytest.approx(1.0)
    assert training["iterations"][1]["spearman"] == pytest.approx(-1.0) and training["top1"] == 1
    own = rows["Eureka's own training (its log's best successes, 1 seed; 7 of 8 responses)"]
    assert own["iterations"][0]["responses"] == 3 and own["iterations"][0]["top1"]  # response 2 never trained
    assert own["iterations"][1]["spearman"] == pytest.approx(-1.0)
    assert own["iterations"][1]["top3"] == pytest.approx(2 / 3)  # r1 and r2 in both top threes
    assert own["mean_top3"] == pytest.approx((1 + 2 / 3) / 2)
    assert json.loads((tmp_path / "out.json").read_text())["eureka_scores"]["env_iter0_response0_rewardonly"] == 2.1
    assert len(summary["settings"]) == 4 and summary["reference"]["seconds"] == pytest.approx(10.0 * len(reference))
    whole_steps = 10 * 1 * 4 * 2 * 2  # 8 responses, the default and sparse; 1 seed, 4 envs, horizon 2, 2 iterations
    assert same["env_steps"] == whole_steps + (2 * 4 * 2 * 2 if pieces else 0)  # the default and sparse twice
    assert set(summary["reference"]["order"]) == set(best)  # each name once
    if pieces:
        with pytest.raises(SystemExit, match="is in an earlier piece too; each response belongs to one piece"):
            fidelity.pieces_of([reference[0], reference[0]], "training_best")
        with pytest.raises(SystemExit, match="env_iter0_response0_rewardonly is in two runs of the setting"):
            fidelity.joined([same, same])
        config = json.loads((reference[1] / "config.json").read_text())
        (reference[1] / "config.json").write_text(json.dumps({**config, "envs_per_candidate": 8}))
        with pytest.raises(SystemExit, match="reference_iter1: its task or budget .* is not the first piece's"):
            fidelity.pieces_of(reference, "training_best")
