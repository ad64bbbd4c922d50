"""Decisive rankings, with numbers worked by hand: learning speed breaks ties at the ceiling, intervals stay within
the fitness's range, the best is compared with the task's default, and seeds are added in rounds exactly until the
best is separable. The evaluations are stood in for where training is not the point (a table of fitness per
candidate and seed); the real runs are the README's (test_cli) and auto's (test_auto)."""

import io
import math

import pytest
from rich.console import Console

from conftest import FakeEvaluations
from envcoder.candidates import TASK_DEFAULT
from envcoder.runs import evaluation
from envcoder.runs.ranking import compare, learning_auc, mean_ci, rank, separation
from envcoder.runs.results import GroupResult, RunResults, print_results, ranked_results
from envcoder.runs.eval_settings import EvalSettings
from envcoder.tasks import get_task

CARTPOLE = get_task("Cartpole")
UPRIGHT = CARTPOLE.get_fitness()[1]


def row(fitness, auc=math.nan):
    return {"task_fitness": fitness, "shaped_return": 1.0, "episode_length": 500.0, "training_auc": auc}


def test_the_area_under_a_training_curve_holds_the_last_value_where_no_episode_finished():
    # iterations 0..4: 0.2, (none: 0.2), 0.6, (absent: 0.6), 1.0
    assert learning_auc({0: 0.2, 1: math.nan, 2: 0.6, 4: 1.0}) == pytest.approx((0.2 + 0.2 + 0.6 + 0.6 + 1.0) / 5)
    assert learning_auc({0: math.nan, 1: 0.5, 2: 1.0}) == pytest.approx(0.75)  # from the first finished episode
    assert math.isnan(learning_auc({0: math.nan})) and math.isnan(learning_auc({}))


def test_candidates_at_the_ceiling_are_ranked_by_learning_speed_and_reported_as_tied_not_unseparated():
    per_seed = {"slow": [row(1.0, a) for a in (0.60, 0.62, 0.58)],
                "fast": [row(1.0, a) for a in (0.80, 0.79, 0.81)],
                "weak": [row(f, 0.3) for f in (0.50, 0.70, 0.60)]}
    results = ranked_results("Cartpole", "upright", UPRIGHT, "flat",
                             [GroupResult(name, seed, r["task_fitness"], 500.0, 1.0, r["task_fitness"], None, None, {},
                                          training_auc=r["training_auc"])
                              for name, rows in per_seed.items() for seed, r in enumerate(rows)], [], {},
                             lambda name: {})
    assert [r.name for r in results.ranking] == ["fast", "slow", "weak"]
    assert results.tied_with_best == ["slow"] and results.not_separable_from_best == []
    # AUC 0.80 ± 0.01 against 0.60 ± 0.02 over 3 seeds: t = 0.2 / sqrt(0.01²/3 + 0.02²/3) = 15.5, far past 95%
    assert results.separation["by"] == "auc" and results.separation["separable"]
    assert results.ranking[0].auc == pytest.approx(0.80) and results.ranking[1].auc == pytest.approx(0.60)
    text = io.StringIO()
    print_results(Console(file=text, width=100), results)
    printed = text.getvalue()
    assert "tied: fast and slow reach the same fitness (1.000, to within 0.0001); ranked by learning speed" in " ".join(
        printed.split())
    assert "more seeds would tell them apart" not in printed and "AUC" in printed
    # Learning speed first: the fastest learner leads even where its final fitness is lower.
    per_seed["quick"] = [row(0.9, a) for a in (0.95, 0.94, 0.96)]
    assert [r.name for r in rank(per_seed, rank_by="auc")] == ["quick", "fast", "slow", "weak"]
    with pytest.raises(ValueError, match="rank_by 'speed'"):
        rank(per_seed, rank_by="speed")


def test_a_ranking_of_policies_that_all_fail_early_says_so():
    """Cartpole's episode is 500 steps and an early end is a failure: where no candidate's evaluation episodes last
    a quarter of it (125 steps) on average, the run says so, names the longest-lived and writes it to results.json.
    A candidate halving dropped (its lengths are its training episodes') does not count; one at 125 ends it."""

    def run(lengths: dict[str, tuple[list[float], int | None]], max_episode_length=500) -> RunResults:
        groups = [GroupResult(name, seed, 0.1 * length / 100, length, 1.0, 0.1, None, None, {},
                              eliminated_at_iteration=dropped)
                  for name, (seeds, dropped) in lengths.items() for seed, length in enumerate(seeds)]
        return ranked_results("Cartpole", "upright", UPRIGHT, "flat", groups, [], {}, lambda name: {},
                              max_episode_length=max_episode_length)

    falling = {"a": ([100.0, 110.0], None), "b": ([60.0, 80.0], None), "dropped": ([400.0, 400.0], 3)}
    results = run(falling)
    assert results.episodes_end_early == {"candidate": "a", "episode_length": 105.0, "max_episode_length": 500}
    text = io.StringIO()
    print_results(Console(file=text, width=200), results)
    assert ("every policy fails early: a's episodes last longest, 105 of 500 steps on average; the ranking compares "
            "policies that all fail the task at this budget") in " ".join(text.getvalue().split())
    assert RunResults.from_json(results.to_json()) == results
    standing = run({**falling, "c": ([130.0, 120.0], None)})
    assert standing.episodes_end_early is None and "episodes_end_early" not in standing.to_json()
    text = io.StringIO()
    print_results(Console(file=text, width=200), standing)
    assert "fails early" not in text.getvalue()
    assert run(falling, max_episode_length=None).episodes_end_early is None  # a caller that does not know the task


def test_a_candidate_ranked_below_another_by_fitness_never_shows_the_same_number():
    """A ranking decided by fitness shows the digits that decide it (Cartpole: a fitness just under two at 1.0
    printed as 1.000, ranked below one with a lower AUC, read as a tie broken the wrong way); values within the tie
    tolerance are a tie, which the text states."""
    per_seed = {"slow_at_one": [row(1.0, 0.10)], "also_one": [row(1.0, 0.20)], "almost_one": [row(0.9998, 0.68)],
                "half": [row(0.5, 0.4)]}
    results = ranked_results("Cartpole", "upright", UPRIGHT, "flat",
                             [GroupResult(name, 0, r["task_fitness"], 500.0, 1.0, r["task_fitness"], None, None, {},
                                          training_auc=r["training_auc"]) for name, rows in per_seed.items()
                              for r in rows], [], {}, lambda name: {})
    assert [r.name for r in results.ranking] == ["also_one", "slow_at_one", "almost_one", "half"]
    text = io.StringIO()
    print_results(Console(file=text, width=120), results)
    rows = {line.split()[1]: line.split()[2] for line in text.getvalue().splitlines()
            if line.strip()[:1].isdigit() and len(line.split()) > 2}
    assert rows == {"also_one": "1.0000", "slow_at_one": "1.0000", "almost_one": "0.9998", "half": "0.5000"}


def test_intervals_stay_within_the_fitness_s_declared_range():
    # [1.0, 0.9]: mean 0.95, s = 0.0707; t(0.975, 1) = 12.706: 0.95 ± 12.706 · 0.0707 / √2 = 0.95 ± 0.635
    assert mean_ci([1.0, 0.9]) == pytest.approx((0.95 - 0.6353, 0.95 + 0.6353), abs=1e-4)
    assert mean_ci([1.0, 0.9], bounds=(0.0, 1.0)) == pytest.approx((0.95 - 0.6353, 1.0), abs=1e-4)
    assert mean_ci([0.0, 0.05], bounds=(0.0, 1.0))[0] == 0.0
    assert mean_ci([0.02, 0.01, 0.03], bounds=(0.0, None))[0] >= 0.0
    ranking = rank({"a": [row(1.0), row(0.9)], "b": [row(0.0), row(0.05)]}, bounds=UPRIGHT.bounds)
    assert all(0.0 <= r.ci_low <= r.ci_high <= 1.0 for r in ranking) and UPRIGHT.bounds == (0.0, 1.0)


def test_how_much_one_candidate_beats_another_with_its_interval():
    a, b = rank({"a": [row(1.0), row(0.8)], "b": [row(0.5), row(0.3)]})
    verdict = compare(a, b)
    # difference 0.5; standard error √(0.02/2 + 0.02/2) = 0.1414; Welch's dof 2, t(0.975, 2) = 4.303
    assert verdict["difference"] == pytest.approx(0.5)
    assert verdict["ci"] == pytest.approx([0.5 - 4.3027 * 0.14142, 0.5 + 4.3027 * 0.14142], abs=1e-3)
    assert verdict["p_beats"] == pytest.approx(0.9642, abs=1e-3) and not verdict["beats"]  # t = 3.54 on 2 dof
    lower = compare(*rank({"a": [row(0.2), row(0.3)], "b": [row(0.9), row(1.0)]}, higher_is_better=False), False)
    assert lower["difference"] == pytest.approx(0.7) and lower["beats"]  # an error 0.7 lower, every seed apart


def alternating(mean):
    """± 0.1 around `mean`, by the seed's parity: over 2n seeds, s = 0.1 √(2n / (2n - 1))."""
    return lambda seed: mean + (0.1 if seed % 2 == 0 else -0.1)


def run_rounds(tmp_path, monkeypatch, means, budget, task_default=False, stop_at_call=None):
    folder = tmp_path / "files"
    folder.mkdir(parents=True)
    for name in means:
        if name != TASK_DEFAULT:
            (folder / f"{name}.py").write_text("def compute_reward(state):\n    return state['dof_pos'][:, 0]\n")
    fake = FakeEvaluations(lambda name, seed: alternating(means[name])(seed))
    evaluate = fake
    if stop_at_call is not None:
        def evaluate(*args, **kwargs):  # Ctrl-C in the evaluation `stop_at_call`
            if len(fake.calls) + 1 == stop_at_call:
                raise KeyboardInterrupt
            return fake(*args, **kwargs)
    monkeypatch.setattr(evaluation, "evaluate_once", evaluate)
    settings = EvalSettings(task="Cartpole", functions=folder, out=tmp_path / "run", seeds=(0, 1, 2, 3),
                            seeds_until_separable=budget, task_default=task_default)
    return evaluation.run_evaluation(settings, Console(file=io.StringIO())), fake.calls


def test_seed_rounds_stop_exactly_when_the_best_is_separable(tmp_path, monkeypatch):
    """a and b 0.15 apart, each ±0.1 by seed. Welch's t for n seeds each: 0.15 / (0.1 √(n / (n - 1)) √(2 / n)).
    n = 4: t = 1.84 on 6 dof, P = 0.943 < 0.975; n = 8: t = 2.81 on 14 dof, P = 0.993: one round of 4 more.
    c (0.3) is separated from the start and trains no more."""
    results, calls = run_rounds(tmp_path, monkeypatch, {"a": 0.8, "b": 0.65, "c": 0.3}, budget=16)
    assert calls == [(["a", "b", "c"], (0, 1, 2, 3)), (["a", "b"], (4, 5, 6, 7))]
    assert {r.name: r.seeds for r in results.ranking} == {"a": 8, "b": 8, "c": 4}
    assert results.separation["separable"] and results.separation["p_best_beats"] == pytest.approx(0.9931, abs=1e-3)
    rounds = results.seed_rounds
    assert rounds["stopped"] == "separable" and [r["seeds"] for r in rounds["rounds"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert "a is separable at 95% from the runner-up b after 8 seed(s)" in rounds["verdict"]
    assert RunResults.read(tmp_path / "run").seed_rounds == rounds  # the run's results.json: every round ranked


def test_seed_rounds_end_at_the_budget_and_say_so(tmp_path, monkeypatch):
    """0.05 apart: not separable at 4, 8 or 10 seeds; the budget of 10 allows rounds of 4, 4 and 2."""
    results, calls = run_rounds(tmp_path, monkeypatch, {"a": 0.8, "b": 0.75, TASK_DEFAULT: 0.1}, budget=10,
                                task_default=True)
    assert [seeds for _, seeds in calls] == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9)]
    assert calls[1][0] == ["a", "b"]  # the task's default is separated from the start
    assert results.seed_rounds["stopped"] == "budget"
    assert "not separable at 95% from the runner-up b" in results.seed_rounds["verdict"]
    assert {r.name: r.seeds for r in results.ranking} == {"a": 10, "b": 10, TASK_DEFAULT: 4}


def test_a_run_that_separates_at_once_adds_no_round(tmp_path, monkeypatch):
    results, calls = run_rounds(tmp_path, monkeypatch, {"a": 0.9, "b": 0.1}, budget=16)
    assert len(calls) == 1 and results.seed_rounds["stopped"] == "separable"
    assert separation(results.ranking)["undecided"] == []


def test_an_interrupted_round_starts_again_and_the_resumed_run_ends_as_an_uninterrupted_one(tmp_path, monkeypatch):
    from envcoder.runs.eval_settings import settings_from_run

    means = {"a": 0.8, "b": 0.65, "c": 0.3}
    whole, _ = run_rounds(tmp_path / "whole", monkeypatch, means, budget=16)
    with pytest.raises(KeyboardInterrupt):
        run_rounds(tmp_path / "cut", monkeypatch, means, budget=16, stop_at_call=2)  # in round 1
    out = tmp_path / "cut" / "run"
    assert (out / "results.json").exists() and (out / "seed_rounds" / "round_1_candidates").exists()
    fake = FakeEvaluations(lambda name, seed: alternating(means[name])(seed))
    monkeypatch.setattr(evaluation, "evaluate_once", fake)
    resumed = evaluation.run_evaluation(settings_from_run(out), Console(file=io.StringIO()), resume=True)
    assert fake.calls == [(["a", "b"], (4, 5, 6, 7))]  # round 0 read back, round 1 trained again
    assert repr(resumed.ranking) == repr(whole.ranking) and resumed.seed_rounds["stopped"] == "separable"  # NaN AUCs


@pytest.mark.parametrize("columns", [60, 80])
def test_the_ranking_fits_a_narrow_terminal_with_every_name_and_number_whole(columns):
    """At 60 and 80 columns the names used to vanish (`rank fitne… 95% CI see…`): columns give way instead, names
    fold, and the rank, the name and the fitness always show."""
    names = ["good_upright", "weighted_upright[UPRIGHT_WEIGHT=1,SPEED_WEIGHT=0.1]",
             "weighted_upright[UPRIGHT_WEIGHT=2,SPEED_WEIGHT=0.1]", "alive_bonus"]
    results = ranked_results("Cartpole", "upright", UPRIGHT, "flat",
                             [GroupResult(n, s, 0.1 * i + 0.01 * s, 500.0, 1.0, 0.5, None, None, {}, training_auc=0.3)
                              for i, n in enumerate(names) for s in range(2)], [], {}, lambda name: {})
    text = io.StringIO()  # as a run's console: its messages soft-wrap (a table laid out so overflowed, values blank)
    print_results(Console(file=text, width=columns, force_terminal=True, color_system=None, soft_wrap=True), results)
    printed = text.getvalue()
    table = [line for line in printed.splitlines() if "│" in line or line.strip()[:1].isdigit() or "─" in line]
    assert "…" not in printed and max(len(line) for line in table) <= columns
    assert all(header in printed for header in ("rank", "candidate", "fitness"))
    for name in names:  # a long name is folded over lines: its start and its end show
        assert name[:20] in printed and name[-6:] in printed, name
    for value in ("0.305", "0.205", "0.105", "0.005"):
        assert value in printed


def test_a_narrow_ranking_keeps_each_value_under_its_own_column():
    """At 80 columns a one-seed ranking drops `length` and `return` but keeps `P(>next)`: its values stay under it
    (they were added before the columns were taken out, and the dropped columns took them along: the column
    showed blank)."""
    names = ["good_upright", "alive_bonus", "weighted_upright[UPRIGHT_WEIGHT=2,SPEED_WEIGHT=0.01]"]
    results = ranked_results("Cartpole", "upright", UPRIGHT, "flat",
                             [GroupResult(n, 0, 0.1 * i, 500.0, 1.0, 0.5, None, None, {}, training_auc=0.3)
                              for i, n in enumerate(names)], [], {}, lambda name: {})
    text = io.StringIO()
    print_results(Console(file=text, width=80, force_terminal=True, color_system=None, soft_wrap=True), results)
    lines = text.getvalue().splitlines()
    header = next(line for line in lines if line.lstrip().startswith("rank"))
    rows = [line for line in lines if line.strip()[:1].isdigit() and line.lstrip().split()[0].isdigit()]
    assert header.rstrip().endswith("P(>next)") and "length" not in header and len(rows) == len(names)
    assert all(row.rstrip().endswith(" -") and len(row.rstrip()) == len(header.rstrip()) for row in rows), rows


def test_a_torque_mapping_that_controls_by_itself_is_flagged():
    """How much of the motor command the policy decides, on the sample states: all of it for Cartpole's own mapping
    (force = scale × action), almost none for a file that balances the pole itself and adds 0.01 N per unit of action
    (it ranked first at 1.000 from iteration 0, with no note, before); a PD-style mapping is not flagged."""
    import jax.numpy as jnp

    from envcoder.candidates.own_control import OWN_CONTROL_SHARE, policy_share
    from envcoder.tasks import get_task

    task = get_task("Cartpole")

    def controller(action, state):
        pole, pole_vel = state["dof_pos"][:, 1], state["dof_vel"][:, 1]
        return (40.0 * pole + 6.0 * pole_vel + 0.01 * action[:, 0])[:, None]

    def damped(action, state):  # the action sets a force, damped by the cart's speed
        return (10.0 * action[:, 0] - 0.5 * state["dof_vel"][:, 0])[:, None]
    own = policy_share(task.defaults["compute_torque"], task, 1)
    assert own == pytest.approx(1.0)
    assert policy_share(controller, task, 1) < 0.05 < OWN_CONTROL_SHARE * own
    assert policy_share(damped, task, 1) > OWN_CONTROL_SHARE * own


def test_a_narrow_terminal_says_which_columns_it_left_out_and_ties_are_named_briefly():
    """At 60 columns the ranking drops columns and says which (they were dropped silently); a tie of many candidates
    names four and counts the rest (41 tied names made a note of 1,000 characters)."""
    names = [f"it00_c{k:02d}-{k % 8}" for k in range(12)]
    results = ranked_results("Cartpole", "upright", UPRIGHT, "flat",
                             [GroupResult(n, 0, 1.0, 500.0, 1.0, 0.5, None, None, {}, training_auc=0.3 - 0.01 * i)
                              for i, n in enumerate(names)], [], {}, lambda name: {})
    text = io.StringIO()
    print_results(Console(file=text, width=60, force_terminal=True, color_system=None, soft_wrap=True), results)
    printed = " ".join(text.getvalue().split())
    assert "(columns left out at 60 columns: length, return" in printed, printed
    assert "tied: it00_c00-0, it00_c01-1, it00_c02-2 and 9 more reach the same fitness" in printed, printed


def test_the_progress_line_shows_small_and_large_rates_in_their_own_units():
    from envcoder.runs.background import steps_rate

    assert [steps_rate(v) for v in (850.0, 9_999.0, 83_000.0, 2_430_000.0)] == [
        "850 steps/s", "9,999 steps/s", "83k steps/s", "2.4M steps/s"]  # the first line read "0k steps/s"
