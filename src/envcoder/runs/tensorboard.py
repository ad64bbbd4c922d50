"""TensorBoard event files, one run per candidate and seed (`<run>/tensorboard/<candidate>#<seed>/`), so
TensorBoard overlays the candidates' curves: task fitness, shaped return, every reward component, episode
length, losses, KL, learning rate and env-steps/s, against the PPO iteration.

    tensorboard --logdir runs/<run>/tensorboard
"""

from __future__ import annotations

import math
import resource
from pathlib import Path


class TensorBoardLog:
    def __init__(self, directory: Path, labels: list[str], first_iteration: int = 0):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise ImportError("TensorBoard logging needs tensorboardX (pip install tensorboardX); or pass "
                              "--no-tensorboard") from None

        # One open event file per group: make room for a thousand candidates.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = min(hard, max(soft, 4 * len(labels) + 256))
        if wanted > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        # purge_step: a resumed run drops the events it writes again (those after its checkpoint).
        self.writers = [SummaryWriter(str(Path(directory) / label), purge_step=first_iteration or None,
                                      flush_secs=30) for label in labels]

    def write(self, iteration: int, metrics: dict, extra: dict) -> None:
        """`metrics`: `[G]` arrays; `extra`: run-wide scalars. NaN (no episode ended) is left out."""
        for g, writer in enumerate(self.writers):
            for key, values in metrics.items():
                value = float(values[g])
                if math.isfinite(value):
                    writer.add_scalar(key, value, iteration)
            for key, value in extra.items():
                writer.add_scalar(key, float(value), iteration)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
