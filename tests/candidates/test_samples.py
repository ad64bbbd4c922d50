"""The sample states shipped for each task (`envcoder.candidates.samples`): a validation worker on a new machine uses
them instead of rolling the task out, so they must be this code's rollout."""

import numpy as np
import pytest

from envcoder.candidates.samples import KEY, shipped_states, state_bytes, states_key
from envcoder.candidates.validate import SAMPLE_ENVS, rollout_states
from envcoder.sim import Simulator
from envcoder.tasks import TASKS, get_task

REGENERATE = "python -m envcoder.candidates.samples"


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_ships_sample_states_of_this_code(name):
    """Fails when the tasks, the simulator, the shaping API or the rollout changed since the files were written
    (their key is stale): a worker would then roll the task out on every new machine (1.5 s of a cold start)."""
    assert shipped_states(get_task(name)) is not None, f"{name}'s shipped sample states are stale: run {REGENERATE}"


@pytest.mark.parametrize("name", ["CartpoleDiscrete", "Anymal"])
def test_shipped_sample_states_are_the_tasks_rollout(name):
    """The shipped states are what `rollout_states` gives on this machine: the same fields, shapes and dtypes, and
    the same values to float32 rounding (they were written on another machine's CPU). Anymal's legs hit the ground,
    where a rounding difference can start a contact a step sooner: its starting states (before any physics step)
    are compared, Cartpole's whole rollout."""
    task = get_task(name)
    shipped = shipped_states(task)
    fresh = {k: np.asarray(v) for k, v in rollout_states(task, Simulator(task.model_file, task.substeps)).items()}
    rows = SAMPLE_ENVS if name == "Anymal" else None
    assert sorted(shipped) == sorted(fresh)
    for field, value in fresh.items():
        assert shipped[field].shape == value.shape and shipped[field].dtype == value.dtype, field
        np.testing.assert_allclose(shipped[field][:rows], value[:rows], rtol=1e-4, atol=1e-4,
                                   err_msg=f"{field}: run {REGENERATE}")


def test_states_of_other_code_are_not_used(tmp_path):
    """A shipped file whose key is not this code's (or that is missing or damaged) gives None: the worker rolls the
    task out itself."""
    task = get_task("Cartpole")
    states = {"qpos": np.zeros((3, 2), np.float32)}
    path = tmp_path / "cartpole.npz"
    assert shipped_states(task, tmp_path) is None  # missing
    path.write_bytes(b"not a file of arrays")
    assert shipped_states(task, tmp_path) is None  # damaged
    path.write_bytes(state_bytes(states, key="0" * 32))
    assert shipped_states(task, tmp_path) is None  # other code's
    path.write_bytes(state_bytes(states, key=states_key(task)))
    loaded = shipped_states(task, tmp_path)
    assert list(loaded) == ["qpos"] and KEY not in loaded and np.array_equal(loaded["qpos"], states["qpos"])
