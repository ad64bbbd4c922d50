"""A candidate's float constants as data: files that differ only in them share one function class, one trace and
one compiled program, train as their literal files do, and a search's generation that changes only them compiles
nothing."""

import ast
import json

import jax
import numpy as np
import pytest

import tiny
from conftest import BUNDLED
from envcoder.candidates import load_candidate
from envcoder.candidates.prepare import sandboxed_candidates
from envcoder.candidates.validate import sample_state, validate_candidate
from envcoder.cli import main
from envcoder.rl.ppo.config import PPOConfig
from envcoder.rl.ppo.learner import GroupedPPO
from envcoder.runs.eval_settings import EvalSettings
from envcoder.sim import Simulator
from envcoder.tasks import get_task

GOOD = (BUNDLED / "cartpole" / "good_upright.py").read_text()


def test_files_that_differ_only_in_float_constants_have_the_same_code_and_their_constants_as_data(tmp_path):
    a = load_candidate(tmp_path / "a.py", source=GOOD)
    b = load_candidate(tmp_path / "b.py", source=GOOD.replace("0.01 *", "0.05 *"))
    assert a.code_key == b.code_key and a.function_keys == b.function_keys
    # In order: 1.0 - angle², 0.01 and 0.005 of the motion, the penalty -2.0 (its sign is data too); the threshold
    # `|cart_pos| > 3.0` decides when the cart fell, a comparison's literal: it stays code, as the rail's end.
    assert a.function_params["compute_reward"] == {"_K_0": 1.0, "_K_1": 0.01, "_K_2": 0.005, "_K_3": -2.0}
    assert b.function_params["compute_reward"]["_K_1"] == 0.05
    assert load_candidate(tmp_path / "d.py", source=GOOD.replace("> 3.0", "> 2.5")).code_key != a.code_key
    flipped = load_candidate(tmp_path / "e.py", source=GOOD.replace("-2.0", "2.0").replace("0.01 *", "-0.01 *"))
    assert flipped.code_key == a.code_key  # a sign flipped is the same code
    assert flipped.function_params["compute_reward"]["_K_3"] == 2.0
    # Integers are sizes, indices and exponents: code. The literal file keys its floats too.
    assert load_candidate(tmp_path / "c.py", source=GOOD.replace("[:, 1]", "[:, 0]")).code_key != a.code_key
    literal = [load_candidate(tmp_path / f"{n}.py", source=s, lift=False)
               for n, s in (("a", GOOD), ("b", GOOD.replace("0.01 *", "0.05 *")))]
    assert literal[0].code_key != literal[1].code_key and literal[0].function_params == {}
    # A module-level float constant keeps its name.
    named = load_candidate(tmp_path / "d.py", source="SIGMA = 0.25\n\n" + GOOD.replace("0.01 *", "SIGMA *"))
    assert named.function_params["compute_reward"]["SIGMA"] == 0.25


@pytest.fixture(scope="module")
def runs():
    """good_upright trained from its file with its constants as literals, alone; and with its constants as data,
    next to a copy whose constants differ (one class: one trace, vmapped over both)."""
    task, sim, state = tiny.cartpole()
    path = BUNDLED / "cartpole" / "good_upright.py"
    candidates = {"data": load_candidate(path), "literal": load_candidate(path, lift=False),
                  "other": load_candidate(path.parent / "other.py", source=GOOD.replace("-2.0", "-5.0"))}
    candidates = {name: validate_candidate(task, sim, c, state) for name, c in candidates.items()}

    def train(selected):
        run = tiny.train(task, selected, 2, sim=sim)
        return run.trainer, run.ts, run.history
    return {"literal": train([candidates["literal"]]), "both": train([candidates["data"], candidates["other"]])}


def test_a_candidate_with_its_constants_as_data_trains_as_its_literal_file_does(runs):
    """test_equivalence's comparison: the same candidate, here as data among another's constants."""
    _, literal, m_literal = runs["literal"]
    trainer, both, m_both = runs["both"]
    g = trainer.labels.index("good_upright#0")
    for a, b in zip(jax.tree.leaves(literal.params), jax.tree.leaves(both.params)):
        np.testing.assert_allclose(a[0], b[g], rtol=1e-5, atol=1e-6)
    for a, b in zip(m_literal, m_both):
        for key in a:
            np.testing.assert_allclose(a[key][0], b[key][g], rtol=1e-4, atol=1e-6, err_msg=key)
    assert literal.constants == {} and both.constants["compute_reward:_K_1"][g] == np.float32(0.01)


def test_candidates_that_differ_only_in_constants_are_one_class_and_each_keeps_its_own(runs):
    trainer, ts, _ = runs["both"]
    classes = trainer.plan.classes["compute_reward"]
    assert len(classes) == 1 and classes[0].names == ("good_upright", "other")
    fell = ts.constants["compute_reward:_K_3"]  # the penalty for falling: -2.0 and -5.0, signs included
    assert {label: float(fell[i]) for i, label in enumerate(trainer.labels)} == {"good_upright#0": -2.0,
                                                                                 "other#0": -5.0}


def test_a_file_that_needs_a_float_as_a_python_number_keeps_its_literals(tmp_path):
    """Validation traces the constants as the trainer does; a file that branches on one in Python is loaded with
    its literals instead of being refused."""
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "branchy.py").write_text("SCALE = 2.0\n\n\ndef compute_reward(state):\n    if SCALE > 1.0:\n"
                                       "        return state['dof_pos'][:, 1] * 0.0 + 1.0\n"
                                       "    return state['dof_pos'][:, 1]\n")
    (folder / "plain.py").write_text(GOOD)
    settings = EvalSettings(task="Cartpole", functions=folder, out=tmp_path / "run")
    candidates, failures = sandboxed_candidates(settings, get_task("Cartpole"))
    assert failures == []
    assert {c.name: c.constants_as_data for c in candidates} == {"branchy": False, "plain": True}


@pytest.mark.slow  # 1.5 min here: two evaluations, every program cached
def test_a_generation_that_changes_only_constants_compiles_nothing(tmp_path):
    """Two evaluations as a search's generations: the second's files are the first's with other float constants
    and other names. Its programs are loaded from the trace cache and XLA's compilation cache: nothing is traced
    or compiled (`results.json`'s timings say so). Every compiled program is cached here (the command line leaves
    out those that compile in under `MIN_COMPILE_TIME_S`; the suite, in under a second)."""
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # restored by the fixture below
    alive = (BUNDLED / "cartpole" / "alive_bonus.py").read_text()
    generations = {"g1": {"a": GOOD, "b": GOOD.replace("0.01 *", "0.05 *"), "c": alive},
                   "g2": {"x": GOOD.replace("0.005 *", "0.002 *"), "y": GOOD.replace("-2.0", "-5.0"), "z": alive}}
    timings = {}
    for generation, files in generations.items():
        folder = tmp_path / generation
        folder.mkdir()
        for name, source in files.items():
            (folder / f"{name}.py").write_text(source)
        out = tmp_path / f"run_{generation}"
        assert main(["eval", "--task", "Cartpole", "--functions", str(folder), "--envs-per-candidate", "8",
                     "--iterations", "2", "--no-tensorboard", "--out", str(out)]) == 0
        timings[generation] = json.loads((out / "results.json").read_text())["timings"]
    assert timings["g2"]["xla"]["compiles"] == 0 and timings["g2"]["xla"]["cache_hits"] > 0
    assert timings["g2"]["traces"] == {"traced": 0, "loaded": 4}


@pytest.fixture(autouse=True)
def _keep_the_suites_cache_threshold():
    threshold = jax.config.jax_persistent_cache_min_compile_time_secs
    yield
    jax.config.update("jax_persistent_cache_min_compile_time_secs", threshold)


@pytest.mark.slow  # 45 s
def test_a_population_step_copies_the_winners_state_exactly_and_changes_only_the_losers(tmp_path):
    """Four copies of one file (one class): after an iteration, the worst (by the fitness given) takes over the
    best's training state and perturbs its constants; every other group, and every group's environments and
    randomness, stay as they were; training goes on with the same compiled programs."""
    from envcoder.runs.pbt import Population, PopulationSettings

    task = get_task("Cartpole")
    sim = Simulator(task.model_file, task.substeps)
    state = sample_state(task, sim)
    copies = [load_candidate(tmp_path / f"c{i}.py", source=GOOD.replace("0.01 *", f"{0.01 * (i + 1)} *"))
              for i in range(4)]
    copies = [validate_candidate(task, sim, c, state) for c in copies]
    trainer = GroupedPPO(task, copies, PPOConfig.for_task(task, horizon_length=8, mini_epochs=1, units=(16, 16)), 8,
                         (0,), sim)
    ts, _ = trainer.iteration(trainer.init())
    population = Population(PopulationSettings(interval=1, fraction=0.25, scale=0.5, flip=0.0), trainer.plan,
                            trainer.labels, higher_is_better=True)
    assert [sorted(m.tolist()) for m in population.members] == [[0, 1, 2, 3]]
    fitness = {"c0": 0.2, "c1": 0.9, "c2": 0.5, "c3": np.nan}  # c3 (no finished episode) takes no part
    history = [(0, {"task_fitness": np.array([fitness[label.split("#")[0]] for label in trainer.labels])})]
    before = jax.device_get(ts)
    after = jax.device_get(population.step(ts, 1, history, np.full(4, np.nan)))
    loser, winner = trainer.labels.index("c0#0"), trainer.labels.index("c1#0")
    assert len(population.lineage) == 1
    assert population.lineage[0]["group"] == "c0#0" and population.lineage[0]["from"] == "c1#0"
    for field in ("params", "opt_state", "learning_rate", "obs_rms", "own", "best"):
        for a, b in zip(jax.tree.leaves(getattr(before, field)), jax.tree.leaves(getattr(after, field))):
            if np.ndim(a) == 0:
                continue
            np.testing.assert_array_equal(b[loser], a[winner], err_msg=field)  # the winner's, exactly
            keep = [g for g in range(4) if g != loser]
            np.testing.assert_array_equal(b[keep], a[keep], err_msg=field)  # the others: untouched
    for a, b in zip(jax.tree.leaves(before.env), jax.tree.leaves(after.env)):
        np.testing.assert_array_equal(a, b)  # environments and randomness are the group's own
    np.testing.assert_array_equal(before.key, after.key)
    for key, column in after.constants.items():
        old = before.constants[key]
        assert np.array_equal(np.delete(column, loser), np.delete(old, loser)), key
        assert (column[loser] == 0) == (old[winner] == 0) and np.sign(column[loser]) == np.sign(old[winner]), key
    assert after.constants["compute_reward:_K_1"][loser] != before.constants["compute_reward:_K_1"][winner]
    assert population.lineage[0]["constants"]["compute_reward:_K_1"] == float(
        after.constants["compute_reward:_K_1"][loser])
    compiled = trainer.iteration.collect._cache_size(), trainer.iteration.learn._cache_size()
    trainer.iteration(population.step(ts, 1, history, np.full(4, np.nan)))
    assert (trainer.iteration.collect._cache_size(), trainer.iteration.learn._cache_size()) == compiled
    # With `flip`, the constant that jumps has its sign flipped too: a term of the wrong sign is fixed by data alone.
    flipping = Population(PopulationSettings(interval=1, fraction=0.25, scale=0.5, flip=1.0), trainer.plan,
                          trainer.labels, higher_is_better=True)
    flipped = jax.device_get(flipping.step(ts, 1, history, np.full(4, np.nan))).constants
    signs = {key: np.sign(flipped[key][loser]) != np.sign(before.constants[key][winner])
             for key in flipped if before.constants[key][winner] != 0}
    assert sum(signs.values()) == 1, signs


def test_an_exploit_step_leaves_out_groups_without_a_finished_episode_and_takes_over_diverged_ones():
    """Hand-worked steps (fraction 0.25): a group none of whose episodes has ended (NaN) is neither a loser nor a
    winner (agents that stay up end a long episode last); a diverged group is the worst whatever its last fitness;
    a population with one group known, or none that has not diverged, is left alone."""
    from envcoder.runs.pbt import exploit

    rng = np.random.default_rng(0)
    members = [np.arange(4)]
    # Lower is better (a tracking error): the stood-up group 0 has no finished episode; 3 is the worst known.
    assert exploit(np.array([np.nan, 0.9, 0.5, 1.2]), members, 0.25, False, rng) == {3: 2}
    # Eight groups, five known: one loser (int(0.25 * 5) = 1), the best known one its winner.
    fitness = np.array([np.nan, 3.0, np.nan, 1.0, 2.0, np.nan, 5.0, 4.0])
    assert exploit(fitness, [np.arange(8)], 0.25, True, rng) == {3: 6}
    # Diverged (its last fitness, 9.0, from before it diverged) is the worst.
    diverged = np.array([False, False, True, False])
    assert exploit(np.array([1.0, 2.0, 9.0, np.nan]), members, 0.25, True, rng, diverged=diverged) == {2: 1}
    # Seven of eight diverged: the two worst take over the one that has not, never another diverged one.
    fitness = np.where(np.arange(8) == 5, 1.0, np.nan)
    assert exploit(fitness, [np.arange(8)], 0.25, True, rng, diverged=np.arange(8) != 5) == {6: 5, 7: 5}
    assert exploit(np.array([np.nan, 2.0, np.nan, np.nan]), members, 0.25, True, rng) == {}
    assert exploit(np.array([np.nan, 2.0, 9.0, np.nan]), members, 0.25, True, rng,
                   diverged=np.array([False, True, True, False])) == {}
    # Two populations are stepped apart.
    assert exploit(np.array([1.0, 2.0, 3.0, 4.0]), [np.array([0, 1]), np.array([2, 3])], 0.5, True, rng) == {
        0: 1, 2: 3}


def test_population_copies_start_from_the_file_and_spread_its_constants_over_decades():
    """`seed_population`: copy 0 is the file; the others keep its code and spread each non-zero constant over
    `INITIAL_DECADES` either way, now and then with one sign flipped; a file without constants joins once."""
    from envcoder.candidates.constants import lift_constants
    from envcoder.search.population import INITIAL_DECADES, seed_population

    bare = "def compute_reward(state):\n    return state['dof_pos'][:, 1] * 0 + 1\n"
    copies = seed_population({"good": GOOD, "bare": bare}, 40, seed=0)
    assert sorted(copies) == sorted([f"good-{k}" for k in range(40)] + ["bare-0"])
    assert copies["good-0"] == GOOD and copies["bare-0"] == bare
    tree, original, _ = lift_constants(ast.parse(GOOD))
    ratios = []
    for k in range(1, 40):
        _, values, code = lift_constants(ast.parse(copies[f"good-{k}"]))
        assert code == lift_constants(ast.parse(GOOD))[2]  # the same code: one class, one program
        ratios += [values[c] / v for c, v in original.items() if v != 0]
        assert all(values[c] == 0 for c, v in original.items() if v == 0)
    magnitudes = np.log10(np.abs(ratios))
    assert magnitudes.min() >= -INITIAL_DECADES and magnitudes.max() <= INITIAL_DECADES
    assert magnitudes.min() < -1 and magnitudes.max() > 1  # spread over decades, not a few percent
    assert 0 < sum(r < 0 for r in ratios) < len(ratios) / 4  # a few signs flipped


def test_a_copys_constants_are_written_in_place_on_a_line_with_non_ascii_text():
    """`ast` counts a column in UTF-8 bytes; a copy's constants go where the file's literals were all the same."""
    from envcoder.candidates.constants import with_constants

    source = "def compute_reward(state):\n    return {'ω': state['dof_pos']}['ω'][:, 1] * 0.25 + 0.5\n"
    assert with_constants(source, {"_K_0": 2.0, "_K_1": -1.0}) == source.replace("0.25 + 0.5", "2.0 + (-1.0)")
