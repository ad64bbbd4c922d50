"""The registry of shaping types is what every reader of the API reads: the loader's signatures, validation's order
and checks, the grouped environment's group order, the proposer's prompt and `envcoder tasks`."""

import dataclasses
import inspect
import textwrap

import pytest

from envcoder.env.grouping import GroupPlan
from envcoder.search.prompts import system_prompt
from envcoder.shaping import api
from envcoder.candidates import Candidate, CandidateError, load_candidate
from envcoder.candidates.describe import describe_task
from envcoder.tasks import get_task


def test_every_shaping_type_is_complete_and_checked_once():
    assert api.SHAPER_TYPES == tuple(api.SHAPING_TYPES) and sorted(api.CHECK_ORDER) == sorted(api.SHAPER_TYPES)
    for name, shaping_type in api.SHAPING_TYPES.items():
        assert shaping_type.name == name and shaping_type.arguments and shaping_type.returns
        assert callable(shaping_type.check) and len(inspect.signature(shaping_type.check).parameters) == 2
        assert shaping_type.fallback is None or shaping_type.fallback in api.SHAPING_TYPES
    assert api.signature("compute_torque") == "compute_torque(action, state)"
    assert api.FALLBACKS == {"compute_critic_observation": "compute_observation"}
    assert api.OPTIONAL_ARGUMENTS == {"curriculum": ("params",)}
    assert api.PER_STEP == ("compute_reward", "compute_observation", "compute_torque", "compute_terminal")


def test_the_prompt_and_the_task_description_show_every_type_from_the_registry():
    task = get_task("Cartpole")
    prompt = system_prompt(task, api.SHAPER_TYPES, "upright")
    described = describe_task(task)
    for name, shaping_type in api.SHAPING_TYPES.items():
        assert f"`{api.signature(name)}` -> {shaping_type.returns}" in prompt
        assert api.signature(name) in described, name


def test_the_loader_takes_the_registrys_signatures_and_aliases():
    source = textwrap.dedent("""
        def compute_action(action, state):
            return 30.0 * action
        def curriculum(iteration, metrics, params):
            return {}
    """)
    candidate = load_candidate("aliased.py", api.SHAPER_TYPES, name="aliased", source=source)
    assert set(candidate.functions) == {"compute_torque", "curriculum"}  # the alias, and an optional argument
    with pytest.raises(CandidateError, match=r"takes \(state, extra\), the API calls it as compute_reward\(state\)"):
        load_candidate("wrong.py", ("compute_reward",), name="wrong", source="def compute_reward(state, extra):\n"
                                                                              "    return state['dof_pos'][:, 0]\n")


def test_groups_are_ordered_by_the_per_step_functions_code():
    task = get_task("Cartpole")
    reward = load_candidate("r.py", ("compute_reward",), name="r",
                            source="def compute_reward(state):\n    return state['dof_pos'][:, 1]\n")
    default = Candidate("default", None, "", {}, "default")
    plan = GroupPlan(task, [reward, default, reward.__class__(**{**reward.__dict__, "name": "r2"})], (0,))
    classes = plan.classes["compute_reward"]
    assert len(classes) == 2 and sorted(len(c.indices) for c in classes) == [1, 2]
    for c in classes:  # each code's groups are contiguous
        assert list(c.indices) == list(range(c.indices[0], c.indices[0] + len(c.indices)))


def test_a_plan_reading_constants_takes_them_from_its_input_and_names_what_it_traces():
    """Two files of one code with other constants form one class; the plan computes with its own values, and a view
    of it `reading` an input (a learner's program's) with that input's: no module state in between. While a class is
    traced, the plan and its views say which (the watchdog's message for a trace that hangs)."""
    import jax.numpy as jnp
    import numpy as np

    from envcoder.env.grouping import constant_key

    task = get_task("Cartpole")
    source = "K = 2.0\n\ndef compute_reward(state):\n    return K * state['dof_pos'][:, 1]\n"
    a = load_candidate("a.py", ("compute_reward",), name="a", source=source)
    b = load_candidate("b.py", ("compute_reward",), name="b", source=source.replace("2.0", "3.0"))
    plan = GroupPlan(task, [a, b], (0,))
    assert len(plan.classes["compute_reward"]) == 1 and plan.now_tracing() is None
    seen = []

    def compute_reward(state):  # the class's function, watched
        seen.append(plan.now_tracing())
        return state["dof_pos"][..., 1] * 0.0
    state = {"dof_pos": jnp.ones((2, 3, 2))}  # [G, E, 2]
    own = plan.dispatch("compute_reward", (state,))
    constants = {constant_key("compute_reward", "K"): jnp.array([5.0, 7.0])}
    given = plan.reading(constants).dispatch("compute_reward", (state,))
    np.testing.assert_array_equal(own, [[2.0] * 3, [3.0] * 3])
    np.testing.assert_array_equal(given, [[5.0] * 3, [7.0] * 3])
    watched = plan.reading(constants)
    watched.classes["compute_reward"][0] = dataclasses.replace(watched.classes["compute_reward"][0],
                                                               function=compute_reward, params={})
    watched.dispatch("compute_reward", (state,))
    assert seen == [("compute_reward", ("a", "b"))] and plan.now_tracing() is None
