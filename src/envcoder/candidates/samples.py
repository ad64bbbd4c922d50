"""The sample states that validation checks candidates on: a short rollout of the task's own shaping from its reset
distribution (`envcoder.candidates.validate.rollout_states`), made from the task itself and kept by the key of what
they were made from (`states_key`: MuJoCo's version, the task's model file, the code that rolls the task out and
builds its states, and for a task file the file and its model folder). `task_states` gives them: shipped with
envcoder where the shipped file's key is this code's (a first run on a new machine then starts without a rollout:
the rollout, and the MJX import and model it needs, were 1.4-1.6 s of a worker's 3.5 s start on the GPU machine,
docs/benchmarks/throughput.md), else from the cache (`states_file`), else rolled out now and cached. A stale
file is never used: a changed task, model or framework makes them again. The shipped files are written with

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
    """What `task`'s sample states are made from, as a hash: MuJoCo's version, the model file, the sources and, for a
    task read from a file, that file and its model folder (`envcoder.tasks.fingerprint`)."""
    from envcoder.tasks import fingerprint

    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256(f"{mujoco.__version__}\n{task.name}\n{fingerprint(task)}\n".encode())
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


def states_file(task) -> Path | None:
    """Where `task`'s sample states are cached, by their key (`states_key`); None while the caches are off."""
    from envcoder.compile_cache import verdict_cache_dir

    cache = verdict_cache_dir()
    return cache / f"states-{task.name.lower()}-{states_key(task)}.npz" if cache is not None else None


def task_states(task, make: bool = True) -> dict[str, np.ndarray] | None:
    """`task`'s sample states: shipped where the shipped file is this code's, else cached (`states_file`), else, with
    `make`, rolled out now (and cached); None where there are none yet and `make` is off."""
    states = shipped_states(task) if task.source is None else None
    if states is not None:
        return states
    path = states_file(task)
    if path is not None:
        try:
            with np.load(path, allow_pickle=False) as data:
                return {name: data[name] for name in data.files}
        except (OSError, ValueError):
            pass
    if not make:
        return None
    import jax

    from envcoder.candidates.validate import rollout_states
    from envcoder.compile_cache import store_entry
    from envcoder.sim import Simulator

    states = jax.tree.map(np.asarray, rollout_states(task, Simulator(task.model_file, task.substeps)))
    if path is not None:
        store_entry(path, state_bytes(states))
    return states


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

    from envcoder.tasks import all_tasks

    jax.config.update("jax_platforms", "cpu")  # as the validation workers run it
    for task in all_tasks().values():
        print(write_shipped_states(task))
