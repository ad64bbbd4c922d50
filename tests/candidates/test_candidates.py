"""Loading and validating candidate files: each kind of bad input gets its own clear error."""

import textwrap

import pytest

from envcoder.candidates import CandidateError, load_candidate, load_candidates
from envcoder.candidates.validate import sample_state, validate_candidate
from envcoder.sim import Simulator
from envcoder.tasks import get_task


def write(tmp_path, name, text):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


GOOD = textwrap.dedent("""
    import jax.numpy as jnp

    def compute_reward(state):
        return 1.0 - state["dof_pos"][:, 1] ** 2
""")


@pytest.mark.parametrize("source, message", [
    ("def compute_reward(state)\n    return 1.0\n", "syntax error"),
    ("import os\ndef compute_reward(state):\n    return 1.0\n", "import of 'os' is not allowed"),
    ("from subprocess import run\ndef compute_reward(state):\n    return 1.0\n", "import from 'subprocess'"),
    ("def compute_reward(state):\n    return open('/etc/passwd').read()\n", "use of 'open' is not allowed"),
    ("def compute_reward(state):\n    return eval('1')\n", "use of 'eval' is not allowed"),
    ("def compute_reward(state):\n    return state.__class__\n", "private attribute '__class__'"),
    ("def compute_rewrd(state):\n    return 1.0\n", "misspelled?"),
    ("def helper(state):\n    return 1.0\n", "defines none of the selected shaping functions"),
    ("def compute_reward(state, extra):\n    return 1.0\n", "wrong signature"),
    ("while True:\n    pass\ndef compute_reward(state):\n    return 1.0\n", "longer than"),
    ("x = 1 / 0\ndef compute_reward(state):\n    return 1.0\n", "ZeroDivisionError"),
])
def test_static_and_load_errors_name_file_and_reason(tmp_path, source, message, monkeypatch):
    monkeypatch.setattr("envcoder.candidates.load.LOAD_TIME_LIMIT_S", 1.0)
    path = write(tmp_path, "bad", source)
    with pytest.raises(CandidateError) as err:
        load_candidate(path, ("compute_reward",))
    assert message in str(err.value)
    assert str(path) in str(err.value)


def test_good_candidate_loads_with_alias_and_selected_types_only(tmp_path):
    path = write(tmp_path, "both", GOOD + "\ndef compute_action(action, state):\n    return 30.0 * action\n")
    only_reward = load_candidate(path, ("compute_reward",))
    assert set(only_reward.functions) == {"compute_reward"}
    both = load_candidate(path, ("compute_reward", "compute_torque"))
    assert set(both.functions) == {"compute_reward", "compute_torque"}


def test_identical_code_shares_a_key_and_different_code_does_not(tmp_path):
    a = load_candidate(write(tmp_path, "a", GOOD), ("compute_reward",))
    b = load_candidate(write(tmp_path, "b", GOOD + "\n# a comment does not change the code\n"), ("compute_reward",))
    c = load_candidate(write(tmp_path, "c", GOOD.replace("** 2", "** 3")), ("compute_reward",))
    assert a.code_key == b.code_key != c.code_key
    # Other float constants are other data of the same code (envcoder.candidates.constants), unless kept literal.
    d = write(tmp_path, "d", GOOD.replace("1.0", "2.0"))
    assert load_candidate(d, ("compute_reward",)).code_key == a.code_key
    assert load_candidate(d, ("compute_reward",), lift=False).code_key != load_candidate(
        write(tmp_path, "a", GOOD), ("compute_reward",), lift=False).code_key


def test_directory_loading_reports_failures_and_keeps_the_rest(tmp_path):
    write(tmp_path, "good", GOOD)
    write(tmp_path, "bad", "import socket\n")
    candidates, failures = load_candidates(tmp_path, ("compute_reward",))
    assert [c.name for c in candidates] == ["good"]
    assert [f.name for f in failures] == ["bad"] and "socket" in failures[0].error


def test_empty_or_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no .py or .txt candidate files"):
        load_candidates(tmp_path, ("compute_reward",))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_candidates(tmp_path / "nope", ("compute_reward",))
    (tmp_path / "notes.md").write_text("# not a candidate\n")  # a file that exists, of another kind
    with pytest.raises(FileNotFoundError, match="is neither a folder of candidate files nor a .py or .txt file"):
        load_candidates(tmp_path / "notes.md", ("compute_reward",))


@pytest.fixture(scope="module")
def cartpole():
    task = get_task("Cartpole")
    simulator = Simulator(task.model_file, task.substeps)
    return task, simulator, sample_state(task, simulator)


@pytest.mark.parametrize("body, function, message", [
    ("def compute_reward(state):\n    return jnp.ones((4, 2))\n", "compute_reward", "returned shape (4, 2)"),
    ("def compute_reward(state):\n    return jnp.ones(4, dtype=jnp.int32)\n", "compute_reward", "dtype int32"),
    ("def compute_reward(state):\n    return jnp.full(4, jnp.nan)\n", "compute_reward", "NaN or inf"),
    ("def compute_reward(state):\n    return state['no_such_field'][:, 0]\n", "compute_reward", "KeyError"),
    ("def compute_observation(state):\n    return state['dof_pos'][:, 0]\n", "compute_observation", "expected [E, D]"),
    ("def compute_terminal(state):\n    return state['dof_pos'][:, 0]\n", "compute_terminal", "expected a bool"),
])
def test_validation_errors_name_function_and_reason(tmp_path, cartpole, body, function, message):
    task, simulator, state = cartpole
    source = "import jax.numpy as jnp\n" + body
    fn_type = function
    path = write(tmp_path, "cand", source)
    candidate = load_candidate(path, (fn_type,))
    with pytest.raises(CandidateError) as err:
        validate_candidate(task, simulator, candidate, state)
    assert f"in {function}()" in str(err.value) and message in str(err.value)


def test_validation_infers_observation_size(tmp_path, cartpole):
    task, simulator, state = cartpole
    path = write(tmp_path, "obs", "import jax.numpy as jnp\ndef compute_observation(state):\n"
                                  "    return jnp.concatenate([state['dof_pos'], state['dof_vel'], state['dof_pos']], -1)\n")
    loaded = load_candidate(path, ("compute_observation",))
    candidate = validate_candidate(task, simulator, loaded, state)
    assert candidate.obs_dim == 6 and candidate.action_dim == 1 and candidate.validated and not loaded.validated
    # The record travels as data beside its functions (the worker's reply) and comes back the same.
    from envcoder.candidates import Candidate

    assert Candidate.from_wire(candidate.to_wire(), candidate.path, candidate.source, candidate.functions) == candidate
    # Only a validated candidate trains: one without sizes is refused, saying where validated ones come from.
    from envcoder.env import GroupedEnv

    with pytest.raises(ValueError, match="obs not validated .*sandboxed_candidates.*validate_candidate"):
        GroupedEnv(task, [loaded], 4, simulator=simulator)
    # ACTION_DIM needs a compute_torque to size: said when the file is loaded.
    torqueless = write(tmp_path, "dim", "ACTION_DIM = 2\ndef compute_reward(state):\n    return state['dof_pos'][:, 1]\n")
    with pytest.raises(CandidateError, match="ACTION_DIM is set but the file defines no compute_torque"):
        load_candidate(torqueless, ("compute_reward", "compute_torque"))


def test_the_likely_number_of_candidates_is_read_without_running_a_file(tmp_path):
    """`likely_count` (the environments a run traces MJX's step for while its files are validated): one per file, a
    sweep's variants where its `PARAMS` table is written as literals, one for a file that does not parse or whose
    table is computed, the task's default; no guess for a crossed run. Nothing in the files runs."""
    import dataclasses
    from pathlib import Path

    from envcoder.candidates.variants import likely_count
    from envcoder.runs.eval_settings import EvalSettings

    reward = "def compute_reward(state, action):\n    return state.obs[..., 0]\n"
    (tmp_path / "plain.py").write_text(reward)
    (tmp_path / "swept.py").write_text('PARAMS = {"A": [1.0, 2.0, 3.0], "B": [0, 1]}\nA = 1.0\nB = 0\n' + reward)
    (tmp_path / "computed.py").write_text('PARAMS = {"A": [float(i) for i in range(5)]}\nA = 1.0\n' + reward)
    (tmp_path / "broken.py").write_text("def compute_reward(:\n")
    (tmp_path / "loud.py").write_text('PARAMS = {"A": [__import__("os").system("touch ran")]}\n' + reward)
    settings = EvalSettings(task="Cartpole", functions=tmp_path, out=Path("unused"))
    assert likely_count(settings) == 1 + 6 + 1 + 1 + 1
    assert likely_count(dataclasses.replace(settings, task_default=True)) == 11
    assert likely_count(dataclasses.replace(settings, cross=True)) is None
    assert not (Path.cwd() / "ran").exists() and not (tmp_path / "ran").exists()
