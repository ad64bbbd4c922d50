"""The sample states a candidate is checked on (`envcoder.candidates.samples`): the task's rollout, shipped for
envcoder's own tasks where the shipped file is this code's, else made from the task and cached."""

import numpy as np
import pytest

from envcoder.candidates.samples import KEY, shipped_states, state_bytes, states_key
from envcoder.candidates.validate import SAMPLE_ENVS, rollout_states
from envcoder.sim import Simulator
from envcoder.tasks import get_task

REGENERATE = "python -m envcoder.candidates.samples"


def test_a_stale_shipped_file_is_never_used_the_task_makes_its_states(tmp_path, monkeypatch):
    """Shipped states whose key is not this code's (the tasks, the simulator, the shaping API or the rollout changed
    since they were written) are passed over: `task_states` rolls the task out and caches that, so nothing needs
    writing again by hand for validation to be right (writing them again only spares a first run the rollout)."""
    from envcoder import compile_cache
    from envcoder.candidates import samples

    task = get_task("Cartpole")
    monkeypatch.setattr(samples, "SAMPLES_DIR", tmp_path / "shipped")
    monkeypatch.setattr(compile_cache, "_CACHE_DIR", tmp_path / "cache")
    (tmp_path / "shipped").mkdir()
    (tmp_path / "shipped" / "cartpole.npz").write_bytes(state_bytes({"dof_pos": np.ones((3, 2), np.float32)},
                                                                     key="0" * 32))
    states = samples.task_states(task)
    fresh = rollout_states(task, Simulator(task.model_file, task.substeps))
    assert states["dof_pos"].shape == fresh["dof_pos"].shape and np.allclose(states["dof_pos"], fresh["dof_pos"])
    assert samples.states_file(task).exists()


@pytest.mark.parametrize("name", ["CartpoleDiscrete", "Anymal"])
def test_shipped_sample_states_are_the_tasks_rollout(name):
    """The shipped states are what `rollout_states` gives on this machine: the same fields, shapes and dtypes, and
    the same values to float32 rounding (they were written on another machine's CPU). Anymal's legs hit the ground,
    where a rounding difference can start a contact a step sooner: its starting states (before any physics step)
    are compared, Cartpole's whole rollout."""
    from envcoder.candidates.samples import task_states

    task = get_task(name)
    shipped = task_states(task)  # the shipped file where it is this code's, else made (and cached)
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
