"""The settings both commands that train share (`RunSettings`): `envcoder eval`'s record
(`envcoder.runs.eval_settings.EvalSettings`) and `envcoder auto`'s (`envcoder.search.auto_settings.AutoSettings`) are
this core and their own fields. One serializer for both (`to_record`, `from_record`: what config.json and auto.json
hold), and the field docs that the command line's help is made of (`field_docs`)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
import types
import typing
from pathlib import Path


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What every run that trains candidates is given: the task, where it writes, how it trains, and within which
    limits."""

    task: str
    """Task name (see `envcoder tasks`), or the path of a task file (a Python file that defines a Task)."""
    out: Path
    """Run directory to create."""
    shaper_types: tuple[str, ...] = ("compute_reward",)
    """Shaping functions the candidates define (the files', or those auto's proposer writes); the rest come from the
    task's defaults."""
    algo: str = "ppo"
    """The training algorithm (`envcoder.rl.config.ALGORITHMS`): every candidate is trained with it."""
    overrides: dict = dataclasses.field(default_factory=dict)
    """The algorithm's settings that override the task's and the --config file's (`ALGO.NAME=VALUE` arguments)."""
    preset: str | None = None
    """A named training budget of the task (`envcoder tasks --task T` lists them; `isaac`: IsaacGymEnvs' own
    training of the task, the budget at which Eureka and the papers after it train each reward): its environments per
    candidate and iterations where the command line gives none, its algorithm settings over the task's (None: the
    task's defaults)."""
    config_file: Path | None = None
    """A YAML file of the algorithm's settings applied over the task's `tasks/configs/<task>.yaml` (and a preset's)."""
    fitness: str | None = None
    """Which of the task's fitness definitions ranks the candidates (None: the task's default)."""
    rank_by: str = "final"
    """The primary ranking key: "final" ranks by the final evaluation's task fitness, candidates tied on it (a
    saturated ceiling) by learning speed, the area under their training curve of the task fitness; "auc" ranks by
    learning speed first."""
    physics: str | None = None
    """Physics engine for training and evaluation: "jax" or "warp" (None: "jax"; docs/benchmarks/throughput.md
    compares them). Candidates are validated on the JAX engine either way."""
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


def to_record(settings, leave_out: tuple[str, ...] = ()) -> dict:
    """A settings record as JSON data (paths as strings, tuples as lists, a record inside as a dict), without the
    fields `leave_out`."""
    def plain(value):
        if isinstance(value, Path):
            return str(value)
        if dataclasses.is_dataclass(value):
            return dataclasses.asdict(value)
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        return value
    return {f.name: plain(getattr(settings, f.name)) for f in dataclasses.fields(settings) if f.name not in leave_out}


def from_record(settings_class: type, data: dict):
    """The settings record of `to_record`'s data, each value of its field's type; a field the data lacks (a run of
    an older envcoder) takes its default, a key no field has is ignored."""
    hints = typing.get_type_hints(settings_class)
    return settings_class(**{f.name: _typed(hints[f.name], data[f.name]) for f in dataclasses.fields(settings_class)
                             if f.name in data})


def _typed(hint, value):
    """`value` (JSON data) as the type `hint` says: a path, a tuple, a settings record; an empty path is None."""
    if value is None:
        return None
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    for option in typing.get_args(hint) if union else (hint,):
        if option is Path and isinstance(value, str):
            return Path(value) if value else None
        if typing.get_origin(option) is tuple and isinstance(value, (list, tuple)):
            inner = typing.get_args(option)
            each = [inner[0]] * len(value) if inner[1:] == (Ellipsis,) else inner
            return tuple(_typed(t, v) for t, v in zip(each, value))
        if dataclasses.is_dataclass(option) and isinstance(value, dict):
            return option(**value)
    return value


@functools.cache
def field_docs(settings_class: type) -> dict[str, str]:
    """`{field: its docstring}` of a settings dataclass and the records it extends (the string under each field),
    whitespace folded."""
    docs = {}
    for klass in reversed(settings_class.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for field, doc in zip(body, body[1:]):
            if (isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name) and isinstance(doc, ast.Expr)
                    and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
                docs[field.target.id] = " ".join(doc.value.value.split())
    return docs
