"""The offline search's structural moves (`envcoder.search.moves`): children that change a reward's terms, each a
file that passes validation."""

import ast
import random
import re
from pathlib import Path

import pytest

from envcoder.candidates import load_candidate
from envcoder.candidates.validate import rollout_states, validate_candidate
from envcoder.search.moves import MOVES, fitness_term_source, reward_terms, rewards_only_the_fitness, structural_child
from envcoder.search.proposers import OfflineProposer, Parent, Request
from envcoder.search.state_terms import state_terms
from envcoder.sim import Simulator
from envcoder.tasks import get_task
from conftest import BENCHMARKS, BUNDLED



def test_structural_moves_write_files_that_pass_validation_and_do_what_they_say():
    """One child per move from the bundled Cartpole rewards (and the task's fitness as a term): each passes the
    static checks and validation on the sample rollout, and its components show the move."""
    task = get_task("Cartpole")
    simulator = Simulator(task.model_file, task.substeps)
    states = rollout_states(task, simulator)
    folder = BUNDLED / "cartpole"
    parents = [Parent(p.stem, p.read_text(), 0.5) for p in sorted(folder.glob("*.py"))]
    good = next(p for p in parents if p.name == "good_upright")  # terms: upright, motion
    parents.append(Parent("centred", "import jax.numpy as jnp\n\n\ndef compute_reward(state):\n"
                                     "    centred = -0.1 * jnp.abs(state['dof_pos'][:, 0])\n"
                                     "    still = -0.01 * state['dof_vel'][:, 1] ** 2\n"
                                     "    return centred + still, {'centred': centred, 'still': still}\n", 0.4))
    fitness = (fitness_term_source(task.get_fitness()[1].step), True)
    library = state_terms(task.state_fields)
    assert set(MOVES) == {"reweight", "drop", "add", "cross", "kernel", "state"}
    assert [t[0] for t in library] == ["alive", "action_cost", "joint_speed_cost", "effort_cost"]  # no torso
    for move in ("reweight", "drop", "add", "cross", "state"):
        child, note = structural_child(random.Random(3), good, parents, fitness, move=move, library=library)
        candidate = load_candidate(Path(f"{move}.py"), source=child)
        terms = set(validate_candidate(task, simulator, candidate, states).reward_components)
        assert child.startswith(f"# offline: from good_upright; {note}")
        assert {"reweight": terms == {"upright", "motion"} and "W_REWEIGHT" in child,
                "drop": len(terms) == 1 and terms < {"upright", "motion"},
                "add": len(terms) == 3, "cross": terms == {"upright", "motion", "centred", "still"},
                "state": len(terms) >= 3 and (terms - {"upright", "motion"}) <= {t[0] for t in library}}[move], (
            move, terms, note)
    # A child's own terms are moved too (it is read flat): the grandchild drops the term its parent added.
    child, _ = structural_child(random.Random(3), good, parents, fitness, move="state", library=library)
    grandchild, note = structural_child(random.Random(0), Parent("child", child, 0.6), parents, None, move="drop")
    def components(source):
        return set(validate_candidate(task, simulator, load_candidate(Path("f.py"), source=source),
                                      states).reward_components)
    assert note.startswith("drop term") and components(grandchild) == components(child) - {note.split("'")[1]}
    # A sparse start (the fitness as a bare reward: no term to move) is shaped by the terms a state offers.
    sparse = Parent("sparse", (BENCHMARKS / "search_starts" / "sparse" /
                               "cartpole.py").read_text(), 0.1)
    assert structural_child(random.Random(0), sparse, [], None, move="reweight") is None
    child, note = structural_child(random.Random(0), sparse, [], None, library=library)
    assert "add the state's term" in note and validate_candidate(
        task, simulator, load_candidate(Path("sparse_child.py"), source=child), states).reward_components
    # The kernel move needs an exp(...): good_upright has none; a tracking kernel's width is scaled.
    kernel = Parent("k", "import jax.numpy as jnp\n\ndef compute_reward(state):\n"
                         "    return jnp.exp(-state['dof_pos'][:, 1] ** 2 / 0.25)\n", 0.5)
    child, note = structural_child(random.Random(0), kernel, [], None, move="kernel")
    assert "0.25 ->" in note and "/ 0.25)" not in child
    assert structural_child(random.Random(0), good, [], None, move="kernel") is None
    # ast counts columns in bytes: on a line with non-ASCII text before the width, the width is still what changes
    wide = Parent("w", kernel.source.replace("state['dof_pos']", "{'ω': state['dof_pos']}['ω']"), 0.5)
    child, note = structural_child(random.Random(0), wide, [], None, move="kernel")
    assert "0.25 ->" in note and "{'ω': state['dof_pos']}['ω'][:, 1] ** 2 / " in child and "/ 0.25)" not in child
    assert reward_terms(good.source) == ["upright", "motion"]


def test_a_file_without_float_constants_is_a_parent_for_structural_moves():
    """The offline search once failed on such files ("no non-zero float constants to mutate")."""
    bare = Parent("bare", "def compute_reward(state):\n    return state['dof_pos'][:, 0] * 0 + 1, "
                          "{'alive': state['dof_pos'][:, 0] * 0 + 1}\n", 0.2)
    request = Request("", (), iteration=1, slot=0, attempt=0, population=(bare,))
    texts = {OfflineProposer(seed=s, fitness=("def _task_fitness(state):\n    return state['dof_pos'][:, 1]", True))
             .sample(request).text.split(";")[1].split("(")[0].strip() for s in range(12)}
    assert texts and all(t for t in texts)  # every call wrote a child
    assert OfflineProposer(seed=0).sample(request).error is None  # re-weighting or dropping its one term


def test_a_population_tunes_the_weights_a_move_adds_not_the_terms_or_the_tasks_thresholds():
    """The copies of a child of each sparse start (`envcoder.search.population.seed_population`) differ only in the
    weights its move added: a state term's own numbers (the upright axis's `1 - 2 * tilt`) and the thresholds of the
    task's fitness and of the start (Humanoid: torso above 0.8 m, up axis above 0.7) stay as written. Once, every
    float of a function was a constant the population scaled by up to 30× either way: an upright bonus became
    `1.34 + 7.6 * tilt`, a reward for tilting, and a threshold of 0.8 m one of 24 m, which no torso reaches."""
    from envcoder.search.population import seed_population

    folder = BENCHMARKS / "search_starts" / "sparse"
    for task_name, file in (("Humanoid", "humanoid"), ("Cartpole", "cartpole"), ("Anymal", "anymal"), ("Ant", "ant")):
        task = get_task(task_name)
        kind, step = task.get_fitness()[1].higher_is_better, task.get_fitness()[1].step
        sparse = Parent("sparse", (folder / f"{file}.py").read_text(), None)
        first = ("state", 4) if kind else ("add", 0)  # the fitness is added to no start that is it (see below)
        for move, seed in (first, ("state", 1), ("state", 2), ("state", 3)):
            child, note = structural_child(random.Random(seed), sparse, [], (fitness_term_source(step), kind),
                                           move=move, library=state_terms(task.state_fields))
            copies = seed_population({"child": child}, 4, seed=seed)
            assert len(copies) == 4, (task_name, note)
            weights = [line.split(" = ")[0] for line in child.splitlines() if line.startswith(("W_", "FITNESS_"))]
            for copy in copies.values():  # the same file but for the lines that set the weights
                assert [line for line in copy.splitlines() if not line.startswith(tuple(weights))] == [
                    line for line in child.splitlines() if not line.startswith(tuple(weights))], (task_name, note)
            assert len({tuple(line for line in c.splitlines() if line.startswith("W_")) for c in copies.values()}) == 4


def test_the_fitness_is_not_added_to_a_reward_that_is_the_fitness():
    """Half of a sparse Ant start's children once added the task's fitness to itself, a reward only scaled (PPO
    normalizes values and advantages: it trained as the start, docs/benchmarks/archive/search.md § 24). A sparse start written
    as its fitness (Ant, Humanoid, Cartpole) now gets only the terms its state offers; Anymal's fitness is an error,
    added through a kernel (a term of its own), and a child with other terms may still weigh the fitness anew."""
    folder = BENCHMARKS / "search_starts" / "sparse"
    for task_name in ("Ant", "Humanoid", "Cartpole", "Anymal"):
        task = get_task(task_name)
        kind, step = task.get_fitness()[1].higher_is_better, task.get_fitness()[1].step
        fitness, library = (fitness_term_source(step), kind), state_terms(task.state_fields)
        sparse = Parent("sparse", (folder / f"{task_name.lower()}.py").read_text(), None)
        assert rewards_only_the_fitness(sparse.source, fitness[0]) == kind, task_name
        notes = [structural_child(random.Random(seed), sparse, [], fitness, library=library)[1] for seed in range(12)]
        assert all(n.startswith("add the state's") for n in notes) if kind else any("fitness" in n for n in notes)
        child, _ = structural_child(random.Random(0), sparse, [], fitness, move="state", library=library)
        assert structural_child(random.Random(0), Parent("child", child, 1.0), [], fitness, move="add") is not None
    # Written otherwise (other quotes, a docstring), the same statements still count as the fitness; others do not.
    ant = fitness_term_source(get_task("Ant").get_fitness()[1].step)
    assert rewards_only_the_fitness('def compute_reward(state):\n    """v."""\n    return state["root_states"][:, 7]\n',
                                    ant)
    assert not rewards_only_the_fitness("def compute_reward(state):\n    return state['root_states'][:, 8]\n", ant)
    assert not rewards_only_the_fitness("def compute_reward(state:\n", ant)


def test_every_state_child_of_a_reward_that_is_the_error_negated_pays_for_staying_alive():
    """Anymal's sparse start, -|command - velocity|, is negative at every step: a policy learns to end its episodes
    early. Each of its `state` children carries the alive bonus, weight in [ALIVE_FLOOR, 10]; a parent of any other
    kind (a poor Anymal start, Anymal's start with the minus dropped, the sparse Ant start) draws as before: most of
    its state children have no alive bonus."""
    from envcoder.search.moves import ALIVE_FLOOR

    root = BENCHMARKS / "search_starts"
    sparse = (root / "sparse" / "anymal.py").read_text()
    starts = {"sparse": ("Anymal", sparse), "poor": ("Anymal", (root / "anymal" / "missing_term.py").read_text()),
              "not negated": ("Anymal", sparse.replace("return -jnp.linalg", "return jnp.linalg")),
              "ant": ("Ant", (root / "sparse" / "ant.py").read_text())}
    for kind, (task_name, source) in starts.items():
        task = get_task(task_name)
        step, higher = task.get_fitness()[1].step, task.get_fitness()[1].higher_is_better
        fitness, library = (fitness_term_source(step), higher), state_terms(task.state_fields)
        assert rewards_only_the_fitness(source, fitness[0], negated=True) == (kind == "sparse"), kind
        weights = []
        for seed in range(24):
            _, note = structural_child(random.Random(seed), Parent(kind, source, None), [], fitness, move="state",
                                       library=library)
            weights += [float(w) for w in re.findall(r"'alive' \(proposed weight ([\d.e+-]+)\)", note)]
        if kind == "sparse":
            assert ALIVE_FLOOR == 1.0 and len(weights) == 24 and 1.0 <= min(weights) and max(weights) <= 10.0
        else:
            assert 0 < len(weights) < 12, (kind, weights)


def _children(seed: int = 3):
    """Cartpole children of every move (a donor and the task's fitness available), and a grandchild."""
    task = get_task("Cartpole")
    folder = BUNDLED / "cartpole"
    parents = [Parent(p.stem, p.read_text(), 0.5) for p in sorted(folder.glob("*.py"))]
    good = next(p for p in parents if p.name == "good_upright")
    parents.append(Parent("centred", "import jax.numpy as jnp\n\n\ndef compute_reward(state):\n"
                                     "    centred = -0.1 * jnp.abs(state['dof_pos'][:, 0])\n"
                                     "    return centred, {'centred': centred}\n", 0.4))
    fitness = (fitness_term_source(task.get_fitness()[1].step), True)
    children = {}
    for move in ("reweight", "drop", "add", "cross"):
        children[move], _ = structural_child(random.Random(seed), good, parents, fitness, move=move)
    children["grandchild"], _ = structural_child(random.Random(seed), Parent("c", children["add"], 0.6), parents,
                                                 fitness, move="add")
    return task, children


def test_a_find_is_written_as_one_flat_reward_that_computes_the_same():
    """`flatten`: every child of the offline search written as one `compute_reward` with no helper of the move
    left (`_split`, the parent's renamed copy), the start's names kept, the same components; on the sample states
    the flat file's reward equals the child's bit for bit."""
    import numpy as np

    from envcoder.candidates.load import call_with_params
    from envcoder.search.readable import describe_change, flatten

    task, children = _children()
    simulator = Simulator(task.model_file, task.substeps)
    states = rollout_states(task, simulator)
    start = (BUNDLED / "cartpole" /
             "good_upright.py").read_text()
    for move, child in children.items():
        flat = flatten(child)
        assert "_split" in child and "_split" not in flat and "_p_compute_reward" not in flat, (move, flat)
        assert flat.count("def ") == 1 and "def compute_reward(state):" in flat, (move, flat)
        assert "pole_angle" in flat  # the start's own name, kept
        body = next(n for n in ast.parse(flat).body if isinstance(n, ast.FunctionDef)).body
        for i, statement in enumerate(body):  # nothing computed that nothing reads (once: a donor's own reward sum)
            if isinstance(statement, ast.Assign):
                name = statement.targets[0].id
                assert any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                           for later in body[i + 1:] for n in ast.walk(later)), (move, name, flat)
        outputs = []
        for source in (child, flat):
            candidate = load_candidate(Path(f"{move}.py"), source=source)
            components = validate_candidate(task, simulator, candidate, states).reward_components
            fn = candidate.functions["compute_reward"]
            reward, terms = call_with_params(fn, candidate.function_params.get("compute_reward", {}), states)
            outputs.append((components, np.asarray(reward), {k: np.asarray(v) for k, v in terms.items()}))
        (names_a, reward_a, terms_a), (names_b, reward_b, terms_b) = outputs
        assert names_a == names_b and np.array_equal(reward_a, reward_b), move
        assert all(np.array_equal(terms_a[k], terms_b[k]) for k in terms_a), move
    words, diff = describe_change(start, flatten(children["add"]), reward_terms)
    assert words.startswith("terms added: ") and diff.startswith("--- start\n+++ find\n")
    assert describe_change(start, flatten(children["drop"]), reward_terms)[0].startswith("terms dropped: ")


def test_a_sparse_starts_child_reads_as_the_start_with_its_terms_added():
    """The flat find of a sparse start's child: the start's lines as it wrote them (its quotes too), each added term
    named once, the components in the return as one literal, no import that nothing uses, and the same reward and
    components as the child, bit for bit; the diff against the start shows only what the move changed."""
    from envcoder.search.readable import readable_text

    task = get_task("Cartpole")
    start = ('"""Sparse: the pole upright."""\nimport jax.numpy as jnp\n\n\ndef compute_reward(state):\n'
             '    angle = state["dof_pos"][:, 1]\n    return jnp.where(jnp.abs(angle) < 0.2, 1.0, 0.0)\n')
    child, _ = structural_child(random.Random(1), Parent("init_sparse", start, 0.2), [], None, move="state",
                                library=state_terms(task.state_fields))
    found = readable_text(child, start)
    flat, diff = found["flat"], found["diff"]
    body = flat.split("def compute_reward(state):\n")[1]
    assert "terms" not in body and "_split" not in flat and "import jax\n" not in flat, flat
    assert body.splitlines()[-1].startswith('    return (reward, {"') and "'" not in body, flat
    assert '     angle = state["dof_pos"][:, 1]' in diff and '-    angle' not in diff, diff  # unchanged, as written
    _assert_same_rewards(task, [(child, flat)])


def test_what_changed_says_which_terms_a_population_turned_around():
    """A population's copy may turn a weight's sign (`INITIAL_FLIP`): a cost with a weight below zero rewards what it
    is named for, a bonus with one is a cost; what changed from the start says so, the terms of the start's own
    sign aside."""
    from envcoder.search.readable import describe_change, flatten

    task = get_task("Cartpole")
    start = ('"""Sparse: the pole upright."""\nimport jax.numpy as jnp\n\n\ndef compute_reward(state):\n'
             '    angle = state["dof_pos"][:, 1]\n    return jnp.where(jnp.abs(angle) < 0.2, 1.0, 0.0)\n')
    child, _ = structural_child(random.Random(1), Parent("init_sparse", start, 0.2), [], None, move="state",
                                library=state_terms(task.state_fields))  # alive and action_cost
    flat = flatten(child)
    assert describe_change(start, flat, reward_terms)[0] == "terms added: alive, action_cost"
    constants = dict(re.findall(r"^(W_\w+) = (\S+)$", flat, re.M))
    turned = flat
    for name, value in constants.items():
        turned = turned.replace(f"{name} = {value}", f"{name} = -{value}")
    words = describe_change(start, turned, reward_terms)[0]
    alive, cost = float(constants["W_ALIVE"]), float(constants["W_ACTION_COST"])
    assert words == (f"terms added: alive, action_cost; signs the search turned: 'alive' is a cost (weight "
                     f"{-alive:.3g}), 'action_cost' rewards what it is written to penalize (weight {-cost:.3g})"), words
    assert "signs" not in describe_change(turned, turned, reward_terms)[0]  # turned in the start already


@pytest.mark.slow  # 45 s here: each child's programs from the sandbox
def test_a_child_that_takes_weighs_or_drops_a_term_reads_as_written_and_is_the_same_program():
    """Children of a sparse start's child by `add`, `cross`, `reweight` and `drop`: the flat find keeps nothing that
    nothing reads and one weight per term, and the sandbox hands over the same programs for it as for the child; on
    the sample states both compute the same reward and components, bit for bit."""
    from envcoder.candidates.sandbox import SandboxValidator
    from envcoder.search.readable import readable_text, same_programs

    task = get_task("Cartpole")
    start = ('"""Sparse: the pole upright."""\nimport jax.numpy as jnp\n\n\ndef compute_reward(state):\n'
             '    angle = state["dof_pos"][:, 1]\n    return jnp.where(jnp.abs(angle) < 0.2, 1.0, 0.0)\n')
    child, _ = structural_child(random.Random(1), Parent("init_sparse", start, 0.2), [], None, move="state",
                                library=state_terms(task.state_fields))  # alive and action_cost
    # A child that takes a term of another child: the donor's own sum (and its copy of the start) is read by
    # nothing, and was once left in the flat find as `angle_2 = ...; _ = ...; _ = _ + alive_2; ...`.
    alive, _ = structural_child(random.Random(2), Parent("init_sparse", start, 0.2), [], None, move="state",
                                library=state_terms(task.state_fields))
    taking = [structural_child(random.Random(0), Parent("alive", alive, 0.5), [Parent("child", child, 0.4)], None,
                               move=move)[0] for move in ("add", "cross")]
    for source in taking:
        taken = readable_text(source, start)["flat"]
        assert "_ =" not in taken and "angle_2" not in taken and "action_cost = " in taken, taken
        assert "return (None, {'action_cost': action_cost})" in source  # the donor's other terms are not carried
        # one weight per term, as a person writes it: the move's weight went into the donor's (not `W_ADD0_0 * ...`)
        assert "W_ADD" not in source and "    action_cost = W_ACTION_COST * -jnp.sum(" in taken, taken
        assert ('    reward = reward + action_cost\n'
                '    return (reward, {"alive": alive, "action_cost": action_cost})') in taken
    weights = [float(line.split(" = ")[1]) for t in (child, *taking) for line in t.splitlines()
               if "W_ACTION_COST = " in line]
    assert weights[0] == weights[2] and weights[1] != weights[0], weights  # cross takes it as it is; add draws anew
    # Re-weighting or dropping a term of a flat parent changes the parent's own lines (once: the term added again
    # times `W_REWEIGHT - 1`, or added and then subtracted); the summary still gets the find's diff from the start.
    (scaled, note), (dropped, _) = (structural_child(random.Random(0), Parent("child", child, 0.5), [], None, move=m)
                                    for m in ("reweight", "drop"))
    factor = float(note.split("× ")[1])
    assert "_split" not in scaled + dropped and "W_REWEIGHT" not in scaled, scaled
    assert f"W_ACTION_COST = {float(f'{weights[0] * factor:.3g}')}" in scaled and "- " not in dropped.split("def ")[1]
    assert reward_terms(dropped) == ["alive"] and "W_ACTION_COST" not in dropped and "actions" not in dropped, dropped
    assert "+    action_cost = W_ACTION_COST" in readable_text(scaled, start)["diff"]
    taking += [scaled, dropped]
    # ... and the sandbox's programs for the flat find and the child are the same (once not: the flat find computed
    # a weighted term once per read, lacked the donor's unused constants, and locations on arguments differed).
    with SandboxValidator("Cartpole", ("compute_reward",), timeout_s=60.0) as validator:
        assert all(same_programs(validator, found["as_found"], found["flat"])
                   for found in (readable_text(source, start) for source in (child, *taking)))
    _assert_same_rewards(task, [(source, readable_text(source, start)["flat"]) for source in (child, *taking)])


def _assert_same_rewards(task, pairs: list[tuple[str, str]]) -> None:
    """Each child and its flat find (`pairs`) validate and compute the same reward and components, bit for bit, on
    the task's sample rollout."""
    import numpy as np

    from envcoder.candidates.load import call_with_params

    simulator = Simulator(task.model_file, task.substeps)
    states = rollout_states(task, simulator)
    for pair in pairs:
        outputs = []
        for name, source in zip(("child", "flat"), pair):
            candidate = load_candidate(Path(f"{name}.py"), source=source)
            validate_candidate(task, simulator, candidate, states)
            reward, terms = call_with_params(candidate.functions["compute_reward"],
                                             candidate.function_params.get("compute_reward", {}), states)
            outputs.append((np.asarray(reward), {k: np.asarray(v) for k, v in terms.items()}))
        (reward_a, terms_a), (reward_b, terms_b) = outputs
        assert np.array_equal(reward_a, reward_b) and terms_a.keys() == terms_b.keys() and terms_a, pair
        assert all(np.array_equal(terms_a[k], terms_b[k]) for k in terms_a), pair


def test_every_sparse_starts_children_read_flat_with_every_term_they_add():
    """The four sparse starts (benchmarks/search_starts/sparse), each with children of one to three added state
    terms, every term the task's state offers alone (finite on the sample states), a grandchild, and the grandchild
    with its constants tuned as a population writes them (float32s in
    full): the flat find has no `_split` and no chain of `terms`, names every term that the move added (the Ant's
    start returns `state["root_states"][:, 7]`, an index that only an array takes), writes each tuned constant in
    the few digits of its float32 (and not the drawn weight in its first comment), keeps its code lines within 100
    characters (a joint-limit cost and a returned dictionary of several terms were longer, written flat), and
    computes the child's reward and components bit for bit on the task's sample states."""
    import re

    import jax.numpy as jnp
    import numpy as np

    from envcoder.candidates.constants import with_constants
    from envcoder.candidates.load import call_with_params
    from envcoder.candidates.samples import task_states
    from envcoder.search.readable import flatten, readable_text

    folder = BENCHMARKS / "search_starts" / "sparse"
    wide = 0  # flat files with a code line over 100 characters before it was broken
    for name in ("Ant", "Anymal", "Cartpole", "Humanoid"):
        task = get_task(name)
        start = (folder / f"{name.lower()}.py").read_text()
        states = {k: jnp.asarray(v) for k, v in task_states(task).items()}  # as a run holds them
        library = state_terms(task.state_fields)
        children = []
        for seed in range(4):
            child, note = structural_child(random.Random(seed), Parent("init", start, 0.0), [], None, move="state",
                                           library=library)
            grandchild, _ = structural_child(random.Random(seed + 10), Parent("c", child, 0.0), [], None,
                                             move="state", library=library)
            weights = {line.split(" = ")[0]: float(line.split(" = ")[1]) for line in grandchild.splitlines()
                       if line.startswith(("W_", "_p_W_"))}  # as a population writes what it tuned: float32s in full
            tuned_values = {k: float(np.float32(v * 1.37)) for k, v in weights.items()}
            tuned = with_constants(grandchild, tuned_values)
            children += [(child, note, None), (grandchild, note, None), (tuned, note, tuned_values)]
        for term in library:  # every term the state offers, alone: it computes, finite, and reads flat
            children.append(structural_child(random.Random(0), Parent("init", start, 0.0), [], None, move="state",
                                             library=[term]) + (None,))
        for source, note, tuned_values in children:
            flat = readable_text(source, start)["flat"]
            body = flat.split("def compute_reward(state):\n")[1]
            assert "_split" not in flat and "terms" not in body, (name, flat)
            assert flat.startswith("# offline: from ") and "proposed weight" not in flat, flat  # constants say
            assert all(len(line) <= 100 for line in flat.splitlines() if not line.startswith("#")), flat
            wide += any(len(line) > 100 for line in flatten(source).splitlines() if not line.startswith("#"))
            added = re.findall(r"'(\w+)' \(proposed weight", note)
            outputs = []
            for label, text in (("child", source), ("flat", flat)):
                candidate = load_candidate(Path(f"{label}.py"), source=text)
                reward, terms = call_with_params(candidate.functions["compute_reward"],
                                                 candidate.function_params.get("compute_reward", {}), states)
                outputs.append((np.asarray(reward), {k: np.asarray(v) for k, v in terms.items()}))
            (reward_a, terms_a), (reward_b, terms_b) = outputs
            assert np.array_equal(reward_a, reward_b) and terms_a.keys() == terms_b.keys(), (name, note)
            assert all(np.array_equal(terms_a[k], terms_b[k]) for k in terms_a), (name, note)
            assert np.all(np.isfinite(reward_a)) and reward_a.shape == states["progress_buf"].shape, (name, note)
            assert set(added) <= set(reward_terms(flat)) and reward_terms(flat) == list(terms_a), flat
            if tuned_values:  # each tuned constant in as few digits as give its float32
                assert any(len(repr(v)) > 14 and repr(v) in source for v in tuned_values.values())
                assert all(len(line.split(" = ")[1]) <= 14 for line in flat.splitlines()
                           if line.startswith("W_")), flat
    assert wide >= 4, wide


def test_a_costs_weight_is_drawn_for_its_size_on_the_tasks_sample_states():
    """A cost's range of weights ends where it takes `COST_SIZE` (2) per step on the task's sample states. Ant states
    with a torque of 10 N·m on each of its 8 joints: the effort cost is 8 × 10² = 800, so its range [1e-6, 0.01] ends
    at 2 / 800 = 0.0025 and starts 4 decades below; at 5 N·m (200 × 0.01 = 2) it stays as it is, and a bonus is
    never scaled. On the Humanoid's own sample states no cost that a sparse start's child draws takes more than 2 per
    step; with the ranges alone, its effort cost took up to 319 (docs/benchmarks/archive/search.md § 27)."""
    import numpy as np

    from envcoder.search.state_terms import COST_SIZE, sample_states, term_sizes

    ant = get_task("Ant")
    states = dict(sample_states(ant))
    ranges = {}
    for torque in (10.0, 5.0):
        states["torques"] = np.full_like(states["torques"], torque)
        ranges[torque] = {name: (low, high) for name, _, low, high in state_terms(ant.state_fields, states)}
    assert COST_SIZE == 2.0 and ranges[10.0]["effort_cost"] == (2.5e-7, 0.0025) and ranges[5.0]["effort_cost"] == (
        1e-6, 0.01)
    assert ranges[10.0]["alive"] == ranges[5.0]["alive"] == (0.1, 10.0)
    humanoid = get_task("Humanoid")
    states = sample_states(humanoid)
    library = state_terms(humanoid.state_fields, states)
    sizes = term_sizes(library, states)
    assert sizes["effort_cost"] > 3e4 and dict((n, h) for n, _, _, h in library)["effort_cost"] < 1e-4
    sparse = Parent("sparse", (BENCHMARKS / "search_starts" / "sparse" /
                               "humanoid.py").read_text(), None)
    drawn = []
    for seed in range(40):
        _, note = structural_child(random.Random(seed), sparse, [], None, move="state", library=library)
        drawn += [(name, float(w)) for name, w in re.findall(r"'(\w+)' \(proposed weight ([-\d.e+]+)\)", note)]
    costs = [weight * sizes[name] for name, weight in drawn if name.endswith("_cost")]
    assert len(costs) >= 20 and max(costs) <= COST_SIZE * 1.01, costs  # the weights are written in 3 digits


def test_reward_terms_follow_a_chain_of_terms_in_the_order_it_is_built():
    """`terms = {**terms, "k": v}` three times (a child of a child before it is read flat): every name, in order,
    whether the return writes the last literal out or returns the name."""
    lines = ["def compute_reward(state):", "    reward, terms = _split(state['x'])",
             "    terms = {**terms, 'a': 1.0}", "    terms = {**terms, 'b': 2.0}"]
    assert reward_terms("\n".join(lines + ["    return reward, {**terms, 'c': 3.0}"])) == ["a", "b", "c"]
    assert reward_terms("\n".join(lines + ["    terms = {**terms, 'c': 3.0}", "    return reward, terms"])) == [
        "a", "b", "c"]
    assert reward_terms("\n".join(lines[:2] + ["    return reward, terms"])) == []


def test_the_locomotion_terms_a_state_offers_give_hand_worked_numbers():
    """Which tasks are offered Isaac's locomotion terms, and their values on two hand-made Ant states: env 0 faces the
    target (+x) with every joint mid-range; env 1 is turned 90° to the left (quaternion w = z = √½) with one joint at
    its upper limit and another at 99.5% of its half-range. Torques 2 N·m and joint speeds −3 rad/s on every joint:
    power 8 × |2 × −3| = 48 W."""
    import jax.numpy as jnp
    import numpy as np

    names = {t: [term[0] for term in state_terms(get_task(t).state_fields)] for t in ("Ant", "Anymal", "Humanoid")}
    locomotion = ["heading", "power_cost", "joint_limit_cost"]
    assert names["Ant"][-3:] == locomotion and names["Humanoid"][-3:] == locomotion
    assert "power_cost" in names["Anymal"] and not {"heading", "joint_limit_cost"} & set(names["Anymal"])
    half = float(np.sqrt(0.5))
    root = np.zeros((2, 13), np.float32)
    root[:, 2] = 0.55
    root[0, 3] = 1.0
    root[1, 3], root[1, 6] = half, half
    lower, upper = -np.ones((2, 8), np.float32), np.ones((2, 8), np.float32)
    dof_pos = np.zeros((2, 8), np.float32)
    dof_pos[1, 0], dof_pos[1, 3] = 1.0, -0.995
    state = {"root_states": root, "targets": np.array([[1000.0, 0, 0]] * 2, np.float32), "dof_pos": dof_pos,
             "dof_limits_lower": lower, "dof_limits_upper": upper, "torques": np.full((2, 8), 2.0, np.float32),
             "dof_vel": np.full((2, 8), -3.0, np.float32)}
    state = {k: jnp.asarray(v) for k, v in state.items()}
    expected = {"heading": [1.0, 0.0], "power_cost": [-48.0, -48.0], "joint_limit_cost": [0.0, -1.5]}
    for name, expression, _, _ in state_terms(get_task("Ant").state_fields):
        if name in expected:
            source = f"def compute_reward(state):\n    return {expression}\n"
            candidate = load_candidate(Path(f"{name}.py"), source=source)
            value = np.asarray(candidate.functions["compute_reward"](state))
            np.testing.assert_allclose(value, expected[name], atol=1e-3, err_msg=name)
