"""`envcoder eval`'s settings: one record (`EvalSettings`, the settings every run shares, `envcoder.settings`, and
its own), written to and read from the run's config.json by one pair of methods, and documented once: the command
line's options take their help from the field docs (`envcoder.settings.field_docs`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from envcoder.runs.directory import RunDirectory
from envcoder.runs.pbt import PopulationSettings
from envcoder.settings import RunSettings, from_record, to_record


@dataclasses.dataclass(frozen=True, kw_only=True)
class EvalSettings(RunSettings):
    """What `envcoder eval` runs: the settings every run shares (`RunSettings`) and these."""

    functions: Path | tuple[Path, ...]
    """Candidate `.py` files: a folder of them, a file, or several of either."""
    envs_per_candidate: int = 256
    """Parallel environments of each (candidate, seed) group."""
    evaluation_envs: int | None = None
    """Environments of each group in the final evaluation, one deterministic episode each (None: the group's
    training environments, but no more than 262,144 on a device: 8,192 groups on one GPU evaluate 32 each)."""
    train_iterations: int | None = None
    """Training iterations (`auto`'s --train-iterations too); None takes the resolved settings' `max_epochs`, rl_games'
    name for them in a YAML file (e.g. 60 for Cartpole)."""
    seeds: tuple[int, ...] = (0,)
    """Every candidate is trained once per seed, independently."""
    task_default: bool = False
    """Also train the task's own default shaping (of `shaper_types`) as the candidate `task_default`: the baseline
    that the candidates have to beat."""
    seeds_until_separable: int | None = None
    """Add rounds of `seeds` seeds (the best and the candidates not yet separated from it, in one process each
    round) until the best is separable from the runner-up at 95% or a candidate has this many seeds (None: one
    round)."""
    population: PopulationSettings | None = None
    """Population-based training over the candidates' constants (`envcoder.runs.pbt`): every `interval`
    iterations the worst copies of a file take over the state of its best and perturb their constants (None: off;
    `envcoder auto --proposer population` sets it)."""
    cross: bool = False
    """Form the product of candidate files across `shaper_types` instead of one candidate per file."""
    schedule: str = "flat"
    """How the iterations are spent (`envcoder.runs.schedule`): "flat" trains every candidate to the end;
    "halving" drops the worse half of the candidates at the end of each rung and gives their environments to
    the survivors."""
    rungs: int | None = None
    """Rungs of the halving schedule (None: 4); fewer where the candidates halve to one sooner, or where there
    are fewer iterations."""
    tensorboard: bool = True
    """Write TensorBoard event files per candidate and seed (`<out>/tensorboard/`)."""
    wandb_project: str | None = None
    """Log to Weights & Biases under this project, one W&B run per candidate and seed (None: off)."""

    def to_config(self) -> dict:
        """What config.json records of these settings (`devices` is not a setting of the run)."""
        return to_record(self, leave_out=("out", "devices"))

    @classmethod
    def from_config(cls, config: dict, out: Path) -> "EvalSettings":
        """The settings that `to_config` recorded (a run of an older envcoder lacks later fields: their defaults)."""
        config = dict(config)
        if "iterations" in config:  # runs before the name was `auto`'s too
            config.setdefault("train_iterations", config.pop("iterations"))
        return from_record(cls, {**config, "out": str(out)})


def settings_from_run(run: str | Path) -> EvalSettings:
    """The settings an existing run directory was started with (for `--resume`)."""
    return EvalSettings.from_config(RunDirectory(run, resume=True, writes=False).read_config(), Path(run))
