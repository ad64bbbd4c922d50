"""A run's settings: one record (`EvalSettings`), written to and read from the run's config.json by one pair of
methods, and documented once: the command line's options take their help from the field docs (`field_docs`)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
from pathlib import Path

from envcoder.runs.directory import RunDirectory
from envcoder.runs.pbt import PopulationSettings


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """What `envcoder eval` runs."""

    task: str
    """Task name (see `envcoder tasks`)."""
    functions: Path | tuple[Path, ...]
    """Candidate `.py` files: a folder of them, a file, or several of either."""
    out: Path
    """Run directory to create."""
    shaper_types: tuple[str, ...] = ("compute_reward",)
    """Shaping functions taken from the candidate files; the rest come from the task's defaults."""
    envs_per_candidate: int = 256
    """Parallel environments of each (candidate, seed) group."""
    evaluation_envs: int | None = None
    """Environments of each group in the final evaluation, one deterministic episode each (None: the group's
    training environments, but no more than 262,144 on a device: 8,192 groups on one GPU evaluate 32 each)."""
    iterations: int | None = None
    """Training iterations; None takes the resolved settings' `max_epochs` (e.g. 60 for Cartpole)."""
    seeds: tuple[int, ...] = (0,)
    """Every candidate is trained once per seed, independently."""
    task_default: bool = False
    """Also train the task's own default shaping (of `shaper_types`) as the candidate `task_default`: the baseline
    that the candidates have to beat."""
    rank_by: str = "final"
    """The primary ranking key: "final" ranks by the final evaluation's task fitness, candidates tied on it (a
    saturated ceiling) by learning speed, the area under their training curve of the task fitness; "auc" ranks by
    learning speed first."""
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
    algo: str = "ppo"
    """The training algorithm (`envcoder.rl.config.ALGORITHMS`): every candidate is trained with it."""
    schedule: str = "flat"
    """How the iterations are spent (`envcoder.runs.schedule`): "flat" trains every candidate to the end;
    "halving" drops the worse half of the candidates at the end of each rung and gives their environments to
    the survivors."""
    rungs: int | None = None
    """Rungs of the halving schedule (None: 4); fewer where the candidates halve to one sooner, or where there
    are fewer iterations."""
    overrides: dict = dataclasses.field(default_factory=dict)
    """The algorithm's settings that override the task's and the --config file's (`ALGO.NAME=VALUE` arguments)."""
    config_file: Path | None = None
    """A YAML file of the algorithm's settings applied over the task's `tasks/configs/<task>.yaml`."""
    fitness: str | None = None
    """Which of the task's fitness definitions ranks the candidates (None: the task's default)."""
    tensorboard: bool = True
    """Write TensorBoard event files per candidate and seed (`<out>/tensorboard/`)."""
    wandb_project: str | None = None
    """Log to Weights & Biases under this project, one W&B run per candidate and seed (None: off)."""
    physics: str | None = None
    """Physics engine for training and evaluation: "jax" or "warp" (None: "jax"; docs/benchmarks/throughput.md § 2
    and § 3 compare them). Candidates are validated on the JAX engine either way."""
    validation_timeout_s: float = 120.0
    """Wall-clock seconds each step of a candidate's sandboxed validation (loading the file; tracing, compiling or
    running one function) may take."""
    validation_memory_gib: float = 4.0
    """Memory limit of a validation process."""
    compile_timeout_s: float = 1800.0
    """Seconds that tracing and compiling the training iteration (or the initialization, or the evaluation) may
    take before the watchdog ends the run, naming the candidates it suspects."""
    iteration_timeout_s: float = 600.0
    """Seconds one training iteration (and the final evaluation) may run on the device before the watchdog ends
    the run."""
    devices: int | None = None
    """How many devices to shard the groups over (None: every device JAX sees; more than one needs JAX physics).
    Not a setting of the run: a run may be resumed on another number of devices."""

    def to_config(self) -> dict:
        """What config.json records of these settings (`devices` is not a setting of the run)."""
        config = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name in ("out", "devices"):
                continue
            if dataclasses.is_dataclass(value):
                config[field.name] = dataclasses.asdict(value)
                continue
            config[field.name] = (str(value) if isinstance(value, Path) else
                                  [str(v) if isinstance(v, Path) else v for v in value] if isinstance(value, tuple)
                                  else value)
        return config

    @classmethod
    def from_config(cls, config: dict, out: Path) -> "EvalSettings":
        """The settings that `to_config` recorded (a run of an older envcoder lacks later fields: their defaults)."""
        values = {}
        for field in dataclasses.fields(cls):
            if field.name not in config:
                continue
            value = config[field.name]
            if field.name == "functions" and isinstance(value, list):
                value = tuple(Path(v) for v in value)
            elif field.name in ("functions", "config_file"):
                value = Path(value) if value else None
            elif field.name in ("shaper_types", "seeds"):
                value = tuple(value)
            elif field.name == "population" and value is not None:
                value = PopulationSettings(**value)
            values[field.name] = value
        return cls(**{**values, "out": Path(out)})


def settings_from_run(run: str | Path) -> EvalSettings:
    """The settings an existing run directory was started with (for `--resume`)."""
    return EvalSettings.from_config(RunDirectory(run, resume=True).read_config(), Path(run))


@functools.cache
def field_docs(settings_class: type) -> dict[str, str]:
    """`{field: its docstring}` of a settings dataclass (the string under each field), whitespace folded."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(settings_class)))
    body = tree.body[0].body
    docs = {}
    for field, doc in zip(body, body[1:]):
        if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) and isinstance(doc, ast.Expr)
                and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
            docs[field.target.id] = " ".join(doc.value.value.split())
    return docs
