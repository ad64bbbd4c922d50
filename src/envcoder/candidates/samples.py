"""The sample states that validation checks candidates on (`envcoder.candidates.validate.rollout_states`), shipped
with envcoder for each task, so that a validation worker on a new machine starts without rolling the task out: the
rollout, and the MJX import and model it needs, were 1.4-1.6 s of a worker's 3.5 s start on the GPU machine
(docs/benchmarks/throughput.md § 11), and validation is a cold run's critical path.

A shipped file holds the states and the key of what they were made from (`states_key`: MuJoCo's version, the
task's model file and the source of the code that rolls the task out and builds its states). Where the key does not
match, `shipped_states` gives None and the worker rolls the task out as before. `tests/candidates/test_samples.py`
fails when a shipped file's key is stale; write them again with

    python -m envcoder.candidates.samples
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import mujoco
import numpy as np

SAMPLES_DIR = Path(__file__).resolve().parents[1] / "tasks" / "samples"
"""Where the shipped files are: `<task name, lower case>.npz`."""

KEY = "__key__"
"""The array of a shipped file that holds its `states_key`."""

_SOURCES = ("tasks", "sim", "shaping", "candidates/validate.py")
"""What the states depend on, in envcoder's package: the tasks (their state, defaults, reset and goal
distributions), the simulator (MuJoCo C's state as the task sees it), the shaping API, and the rollout itself."""


def states_key(task) -> str:
    """What `task`'s sample states are made from, as a hash: MuJoCo's version, the model file and the sources."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(f"{mujoco.__version__}\n{task.name}\n".encode())
    digest.update(Path(task.model_file).read_bytes())
    for source in _SOURCES:
        path = root / source
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(file.relative_to(root).as_posix().encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:32]


def shipped_path(task) -> Path:
    return SAMPLES_DIR / f"{task.name.lower()}.npz"


def shipped_states(task, folder: Path | None = None) -> dict[str, np.ndarray] | None:
    """`task`'s shipped sample states (from `folder`, default `SAMPLES_DIR`), or None where there is no file or its
    key is not this code's."""
    path = (folder / shipped_path(task).name) if folder is not None else shipped_path(task)
    try:
        with np.load(path, allow_pickle=False) as data:
            states = {name: data[name] for name in data.files}
    except (OSError, ValueError):
        return None
    key = states.pop(KEY, None)
    return states if key is not None and str(key) == states_key(task) else None


def state_bytes(states: dict[str, np.ndarray], key: str | None = None) -> bytes:
    """`states` as a .npz file's bytes (with `key` where given)."""
    buffer = io.BytesIO()
    np.savez(buffer, **states, **({KEY: np.array(key)} if key is not None else {}))
    return buffer.getvalue()


def write_shipped_states(task) -> Path:
    """Roll `task` out (`rollout_states`) and write its shipped file; its path."""
    import jax

    from envcoder.candidates.validate import rollout_states
    from envcoder.sim import Simulator

    states = jax.tree.map(np.asarray, rollout_states(task, Simulator(task.model_file, task.substeps)))
    path = shipped_path(task)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(state_bytes(states, states_key(task)))
    return path


if __name__ == "__main__":
    import jax

    from envcoder.tasks import TASKS

    jax.config.update("jax_platforms", "cpu")  # as the validation workers run it
    for task in TASKS.values():
        print(write_shipped_states(task))
