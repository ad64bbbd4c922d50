"""Training curves for TensorBoard and Weights & Biases: one run per candidate and seed, so both overlay
the candidates' curves of task fitness, shaped return, every reward component, episode length, losses, KL,
learning rate, "solved" and env-steps/s, against the PPO iteration. Both take the `[G]` metrics of
`GroupedLearner.iteration`; NaN (no episode ended, or no update applied) is left out.

    tensorboard --logdir runs/<run>/tensorboard
"""

from __future__ import annotations

import json
import math
import resource
import secrets
import sys
from pathlib import Path


def _raise_file_limit(groups: int) -> None:
    """One open file per group: make room for a thousand candidates."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard, max(soft, 4 * groups + 256))
    if wanted > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def _finite(metrics: dict, g: int) -> dict:
    return {key: float(values[g]) for key, values in metrics.items() if math.isfinite(float(values[g]))}


def summary_writer_class():
    """tensorboardX's `SummaryWriter`, imported without PyTorch.

    tensorboardX imports PyTorch wherever it is installed (to accept torch tensors, which envcoder never passes):
    3-5 s of a run's start on the GPU machine, a second set of CUDA libraries in a JAX process, and on a warm rerun
    most of its time to the first iteration (`init_s` 4.5 s, of which 3.1 s was this import). While
    tensorboardX is imported, `import torch` fails as it does where torch is not installed; a PyTorch that the
    process imported already is used as it is.
    """
    hide = "torch" not in sys.modules
    if hide:
        sys.modules["torch"] = None  # Python's marker for a module that cannot be imported
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        raise ImportError("TensorBoard logging needs tensorboardX (pip install tensorboardX); or pass "
                          "--no-tensorboard") from None
    finally:
        if hide:
            del sys.modules["torch"]
    return SummaryWriter


class TensorBoardLog:
    """Event files in `<run>/tensorboard/<candidate>#<seed>/`."""

    def __init__(self, directory: Path, labels: list[str], first_iteration: int = 0):
        SummaryWriter = summary_writer_class()
        _raise_file_limit(len(labels))
        # purge_step: a resumed run drops the events it writes again (those after its checkpoint).
        self.writers = [SummaryWriter(str(Path(directory) / label), purge_step=first_iteration or None,
                                      flush_secs=30) for label in labels]

    def write(self, iteration: int, metrics: dict, extra: dict, rows: list[int] | None = None) -> None:
        """`metrics`: `[G]` arrays, of the groups at `rows` of the labels (default all); `extra`: run-wide
        scalars. One event per group holds all its scalars of the iteration (TensorBoard reads it as one value
        per tag): 15× cheaper than one `add_scalar` each, which matters at a thousand groups."""
        from tensorboardX.proto.summary_pb2 import Summary

        for g, row in enumerate(range(len(self.writers)) if rows is None else rows):
            writer = self.writers[row]
            values = {**_finite(metrics, g), **{key: float(value) for key, value in extra.items()}}
            summary = Summary(value=[Summary.Value(tag=key, simple_value=value) for key, value in values.items()])
            writer.file_writer.add_summary(summary, iteration)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


class WandbLog:
    """Weights & Biases: one W&B run per candidate and seed, named `<candidate>#<seed>` and grouped under the
    run directory's name, with the resolved settings as its config; the final deterministic evaluation goes
    to each run's summary. The W&B run ids are kept in `<run>/wandb.json`, so `--resume` continues the same
    W&B runs (W&B keeps the values it already has for the iterations repeated after the checkpoint).
    Files go to `<run>/wandb/`; `WANDB_MODE=offline` logs without an account (`wandb sync` uploads later)."""

    def __init__(self, directory: Path, labels: list[str], config: dict, project: str):
        try:
            import wandb
        except ImportError:
            raise ImportError("--wandb needs the wandb package: pip install wandb (or envcoder[wandb])") from None

        _raise_file_limit(len(labels))
        ids_file = Path(directory) / "wandb.json"
        ids = json.loads(ids_file.read_text()) if ids_file.exists() else {}
        self.runs = []
        for label in labels:
            candidate, seed = label.rsplit("#", 1)
            ids.setdefault(label, secrets.token_hex(4))
            try:
                self.runs.append(wandb.init(
                    project=project, group=Path(directory).name, name=label, job_type="candidate", id=ids[label],
                    resume="allow", reinit="create_new", dir=str(directory),
                    config={**config, "candidate": candidate, "seed": int(seed)}))
            except wandb.errors.Error as err:
                self.close()
                raise ValueError(f"Weights & Biases could not start a run: {err}. Run `wandb login` or set "
                                 "WANDB_API_KEY; WANDB_MODE=offline logs without an account") from None
            ids_file.write_text(json.dumps(ids, indent=1))

    def write(self, iteration: int, metrics: dict, extra: dict, rows: list[int] | None = None) -> None:
        """`metrics`: `[G]` arrays, of the groups at `rows` of the labels (default all); `extra`: run-wide
        scalars."""
        for g, row in enumerate(range(len(self.runs)) if rows is None else rows):
            run = self.runs[row]
            run.log({**_finite(metrics, g), **extra}, step=iteration)

    def summarize(self, rows: list[dict]) -> None:
        """Each group's final evaluation (`results.json`'s `groups` rows, in group order)."""
        for run, row in zip(self.runs, rows):
            run.summary.update({f"final/{k}": v for k, v in row.items() if isinstance(v, (int, float))})

    def close(self) -> None:
        for run in self.runs:
            run.finish()
