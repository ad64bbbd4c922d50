"""Candidates ready for a learner: every file of a run's candidate folder vetted, then read, validated and traced in
the sandbox's jailed workers, handed over as programs (no file's code runs here), refused where they cost too much
at the run's size (`envcoder.candidates.costs`), and expanded into its variants (sweeps, crossing).

`settings` is what of a run's settings these read (`CandidateSettings`: `envcoder.runs.eval_settings.EvalSettings` is
one)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol

from rich.console import Console

from envcoder.candidates.costs import check_costs, heavier_than_neighbours
from envcoder.candidates.files import LoadFailure, candidate_files, check_name, read_source
from envcoder.candidates.load import TASK_DEFAULT, task_default_candidate
from envcoder.candidates.jail import Jail
from envcoder.candidates.pool import default_workers
from envcoder.candidates.sandbox import SandboxValidator
from envcoder.candidates.variants import cross_candidates
from envcoder.shaping.api import CandidateError
from envcoder.text import one_line


class CandidateSettings(Protocol):
    """What the candidates' preparation reads of a run's settings (`envcoder.runs.eval_settings.EvalSettings` has it
    all; `envcoder convert` makes one of its own)."""

    functions: Path | tuple[Path, ...]
    shaper_types: tuple[str, ...]
    task_default: bool
    cross: bool
    seeds: tuple[int, ...]
    envs_per_candidate: int
    validation_timeout_s: float
    validation_memory_gib: float


def sandboxed_candidates(settings: CandidateSettings, task, validator: SandboxValidator | None = None,
                         only: set[str] | None = None, console: Console | None = None,
                         device_memory: Callable[[], int | None] | None = None):
    """`(candidates, failures)` of `settings.functions`: each file vetted here and then read, checked and traced only
    in the sandbox's jailed workers, which hand it over validated, its functions as programs (this process never runs
    a file's code), its sweep expanded there; crossed if asked; with `settings.task_default`, the task's own shaping
    last, as the candidate `task_default`. `only`: the file stems to take (default all). `validator`: one to reuse
    (its workers stay up; default a new one for this call). `device_memory`: asks, once the verdicts are in, for
    the bytes the run's device may use (`envcoder.runs.memory.available_device_bytes`), against which a program's
    temporaries are refused (`check_costs`); None: that share is not checked.

    Files that fail, and sweep variants that fail, are returned as failures with their reasons.
    """
    failures, drafts = [], []
    for path in candidate_files(settings.functions):
        if only is not None and path.stem not in only:
            continue
        try:
            check_name(path.stem, str(path))
            if path.stem == TASK_DEFAULT and settings.task_default:
                raise CandidateError(str(path), f"the name {TASK_DEFAULT} is the task's own shaping's in this run "
                                                "(--task-default): rename the file")
            drafts.append((path.stem, read_source(path), str(path)))
        except CandidateError as err:
            failures.append(LoadFailure(file=str(path), name=path.stem, error=str(err)))
    if settings.task_default:
        default = task_default_candidate(task, settings.shaper_types)
        drafts.append((default.name, default.source, None))
    verdicts = _verdicts(drafts, settings, task, validator, console) if drafts else []
    candidates, defaults = [], []
    for (name, source, file), verdict in zip(drafts, verdicts):
        failures += [LoadFailure(file=file or f"<{task.name} defaults>", name=variant, error=error)
                     for variant, error in verdict.errors.items()]
        for candidate in verdict.candidates:
            if candidate.name == name or candidate.name.startswith(name + "["):  # the file, or its sweep's variants
                (candidates if file is not None else defaults).append(candidate)
            else:  # never trained under a name that is not its file's
                failures.append(LoadFailure(file=str(file), name=name, error=(
                    f"{file}: the sandbox's verdict names the candidate {candidate.name}, not {name} or a variant of "
                    "its sweep; it is left out (an envcoder bug: please report it with this file)")))
    memory = device_memory() if device_memory is not None and candidates else None
    candidates = _affordable(candidates, failures, len(settings.seeds), settings.envs_per_candidate, memory)
    if console is not None:
        for name, ratio in heavier_than_neighbours(candidates, settings.envs_per_candidate):
            console.print(f"{one_line(name)} computes {ratio:,.0f}× the operations per environment and step of the "
                          "median candidate: every group of the run waits for it at every step (compute less per "
                          "environment, or train it in a run of its own)", markup=False, highlight=False)
    if settings.cross and candidates:
        candidates = cross_candidates(candidates, settings.shaper_types)
    return candidates + defaults, failures


def _affordable(candidates, failures: list, groups: int, envs: int, memory: int | None) -> list:
    """The candidates whose programs' costs pass `check_costs` at the run's size (`memory`: the bytes the run's
    device may use; None: unknown, the memory share unchecked); the others become failures."""
    kept = []
    for candidate in candidates:
        try:
            check_costs(candidate, groups, envs, memory)
            kept.append(candidate)
        except CandidateError as err:
            failures.append(LoadFailure(file=str(candidate.path), name=candidate.name, error=str(err)))
    return kept


def _verdicts(drafts, settings: CandidateSettings, task, validator: SandboxValidator | None, console: Console | None):
    """The sandbox's verdicts on `drafts` (`validator`: one to reuse; default a new one for this call)."""
    if console is not None:
        console.print(f"validating {len(drafts)} candidate file(s) in sandboxed processes…", highlight=False)
        weaker = Jail.here().weaker
        if weaker:
            console.print(f"[yellow]the candidates' jail is weaker on this machine:[/yellow] {weaker}", highlight=False)
    own = validator is None
    validator = validator or SandboxValidator(task.key, settings.shaper_types, settings.validation_timeout_s,
                                              settings.validation_memory_gib, workers=default_workers(len(drafts)),
                                              run_envs=settings.envs_per_candidate)
    try:
        return validator.validate(drafts)
    finally:
        if own:
            validator.close()
