"""Checkpoints: the run's full training state (for `--resume`) and every candidate's policy (best by task
fitness, and last), each written atomically (a temporary file, then a rename).

    <run>/checkpoints/train_state.npz     every array of the `TrainState`, all groups; progress.json beside it
    <run>/checkpoints/<candidate>#<seed>/last.npz, best.npz
                                          that group's policy: actor-critic parameters and observation
                                          normalizer, with `obs_dim`, `action_dim` and the iteration
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import jax
import numpy as np

from envcoder.atomic import write_atomically


def _write_npz(path: Path, arrays: dict) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_atomically(path, buffer.getvalue())


def save_train_state(directory: Path, train_state, progress: dict) -> None:
    """The whole training state and the host-side progress (the iterations done and what the driver keeps
    between iterations), in one file written atomically: a process killed at any moment leaves either the
    previous checkpoint or this one, never a state with another checkpoint's progress. `progress.json` beside
    it is a copy for people and scripts."""
    leaves = jax.tree.leaves(jax.device_get(train_state))
    arrays = {f"leaf_{i:05d}": np.asarray(x) for i, x in enumerate(leaves)}
    _write_npz(directory / "train_state.npz", {**arrays, "progress": np.asarray(json.dumps(progress))})
    write_atomically(directory / "progress.json", json.dumps(progress))


_READ_ERRORS = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)


def _damaged(path: Path, err: Exception) -> ValueError:
    return ValueError(f"{path} is damaged and cannot be resumed from ({type(err).__name__}: {err}); start the run "
                      "again, or restore the file from a backup")


def has_train_state(directory: Path) -> bool:
    return (directory / "train_state.npz").exists()


def read_progress(directory: Path) -> dict:
    """The progress of the last checkpoint, without reading its train state: the copy inside `train_state.npz`
    (`progress.json` may lag it by one checkpoint, or be missing, when a process was killed between the two
    writes). A damaged file is a `ValueError` that says so."""
    path = directory / "train_state.npz"
    try:
        with np.load(path) as data:
            if "progress" in data.files:
                return json.loads(str(data["progress"]))
    except _READ_ERRORS as err:
        raise _damaged(path, err) from None
    return json.loads((directory / "progress.json").read_text())  # older runs: beside it


def load_train_state(directory: Path, template):
    """`(train_state, progress)` saved by `save_train_state`, shaped like `template` (the shapes of a fresh state
    from `learner.host_shapes`); the state as numpy arrays.
    A damaged file (truncated, or not written by envcoder) is a `ValueError` that says so."""
    path = directory / "train_state.npz"
    try:
        with np.load(path) as data:
            progress = json.loads(str(data["progress"]) if "progress" in data.files  # older runs: beside it
                                  else (directory / "progress.json").read_text())
            leaves = [data[f"leaf_{i:05d}"] for i in range(sum(f.startswith("leaf_") for f in data.files))]
    except _READ_ERRORS as err:
        raise _damaged(path, err) from None
    treedef = jax.tree.structure(template)
    if treedef.num_leaves != len(leaves):
        raise ValueError(f"{directory}: the checkpoint has {len(leaves)} arrays, this run's state "
                         f"{treedef.num_leaves}; the candidates, the settings or envcoder changed since it was written")
    for saved, fresh in zip(leaves, jax.tree.leaves(template)):
        if saved.shape != fresh.shape:
            raise ValueError(f"{directory}: a checkpoint array has shape {saved.shape}, this run's {fresh.shape}; "
                             "the candidates, the settings or envcoder changed since it was written")
    return jax.tree.unflatten(treedef, leaves), progress


def save_policy(path: Path, params, obs_rms, obs_dim: int, action_dim: int, iteration: int, fitness: float) -> None:
    """One group's policy (its slice of the stacked parameters and normalizer)."""
    arrays = {f"params/{jax.tree_util.keystr(k)}": np.asarray(v)
              for k, v in jax.tree_util.tree_leaves_with_path(params)}
    arrays.update({f"obs_rms/{jax.tree_util.keystr(k)}": np.asarray(v)
                   for k, v in jax.tree_util.tree_leaves_with_path(obs_rms)})
    arrays.update(obs_dim=np.asarray(obs_dim), action_dim=np.asarray(action_dim), iteration=np.asarray(iteration),
                  task_fitness=np.asarray(fitness))
    _write_npz(path, arrays)


def load_policy(path: Path, params_template, obs_rms_template) -> tuple:
    """`(params, obs_rms, meta)` from `save_policy`, into the shapes of the templates (one group's).

    A saved policy is zero-padded to its run's largest observation and action sizes (padding goes at the
    end of each axis); a smaller template takes the leading part, i.e. the candidate's own network."""
    try:
        return _load_policy(path, params_template, obs_rms_template)
    except _READ_ERRORS as err:
        raise ValueError(f"{path} is damaged and cannot be read ({type(err).__name__}: {err})") from None


def _load_policy(path: Path, params_template, obs_rms_template) -> tuple:
    with np.load(path) as data:
        def take(key, like):
            array = data[key]
            return array[tuple(slice(0, n) for n in np.shape(like))]

        def fill(prefix, template):
            return jax.tree_util.tree_map_with_path(
                lambda k, like: take(f"{prefix}/{jax.tree_util.keystr(k)}", like), template)
        meta = {k: data[k].item() for k in ("obs_dim", "action_dim", "iteration", "task_fitness")}
        return fill("params", params_template), fill("obs_rms", obs_rms_template), meta


def write_checkpoint(directory: Path, state, progress: dict, labels, obs_dims, action_dims, best_written) -> None:
    """A checkpoint after `progress["iteration"]` iterations, from the host's copy of the train state: the whole
    state (`save_train_state`), every group's last policy and the best policies that changed since they were last
    written (`best_written [G]`: the iteration of the best policy last written per group, updated here), each in
    `<directory>/<label>/`."""
    best = state.best
    changed = np.flatnonzero((best.iteration >= 0) & (best.iteration != best_written))
    best_written[changed] = best.iteration[changed]
    changed = set(changed.tolist())
    save_train_state(directory, state, progress)
    for g, label in enumerate(labels):
        def group(tree):
            return jax.tree.map(lambda x: x[g], tree)
        save_policy(directory / label / "last.npz", group(state.params), group(state.obs_rms), int(obs_dims[g]),
                    int(action_dims[g]), progress["iteration"], float(progress["last_fitness"][g]))
        if g in changed:
            save_policy(directory / label / "best.npz", group(best.params), group(best.obs_rms), int(obs_dims[g]),
                        int(action_dims[g]), int(best.iteration[g]), float(best.fitness[g]))


def resume_hint(command: str, run: Path) -> str:
    """`; <the command that continues the interrupted run in run>, and where from` ("" where nothing was written)."""
    if not run.exists():
        return ""
    if command == "auto":
        return (f"; `envcoder auto --resume {run}` continues it (recorded proposer calls and finished evaluations "
                "are kept; an evaluation cut off goes on from its last checkpoint)")
    where = "from iteration 0: it has no checkpoint yet"
    if has_train_state(run / "checkpoints"):
        try:
            where = f"after training iteration {read_progress(run / 'checkpoints')['iteration']}, its last checkpoint"
        except (ValueError, OSError):
            where = "from its last checkpoint"
    return f"; `envcoder eval --resume {run}` continues it {where}"


def checkpoint_due(done: int, config) -> bool:
    """A checkpoint follows the iteration that makes `done` iterations: every `save_frequency`, and the last (of
    the algorithm's settings, `config`)."""
    return done == config.max_epochs or bool(config.save_frequency and done % config.save_frequency == 0)
