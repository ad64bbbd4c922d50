"""Candidates ready for a trainer: every file of a run's candidate folder vetted, then read, validated and traced in
the sandbox's jailed workers, handed over as programs (no file's code runs here), and expanded into its variants
(sweeps, crossing).

`settings` is a run's settings (`envcoder.runs.evaluation.EvalSettings`): its `functions`, `shaper_types`, `cross`,
`validation_timeout_s` and `validation_memory_gib` are read."""

from __future__ import annotations

import ast
import math

from rich.console import Console

from envcoder.candidates.files import LoadFailure, candidate_files, check_name, read_source
from envcoder.candidates.load import TASK_DEFAULT, load_candidates, task_default_candidate
from envcoder.candidates.jail import Jail
from envcoder.candidates.pool import default_workers
from envcoder.candidates.sandbox import SandboxValidator
from envcoder.candidates.validate import CandidateSpec
from envcoder.candidates.variants import MAX_VARIANTS, cross_candidates, expand_sweeps
from envcoder.shaping.api import CandidateError
from envcoder.text import parse as parse_source


def build_candidates(settings):
    """`(candidates, load failures)`: the files of `settings.functions`, sweeps expanded, crossed if asked,
    loaded in this process without the sandbox (for trusted files, e.g. the benchmarks' bundled ones)."""
    candidates, failures = load_candidates(settings.functions, settings.shaper_types)
    candidates = expand_sweeps(candidates)
    if settings.cross:
        candidates = cross_candidates(candidates, settings.shaper_types)
    return candidates, failures


def sandboxed_candidates(settings, task, validator: SandboxValidator | None = None,
                         only: set[str] | None = None, console: Console | None = None):
    """`(candidates, specs, failures)` of `settings.functions`, each file vetted here and then read, checked and
    traced only in the sandbox's jailed workers, which hand it over as programs (this process never runs a file's
    code); sweeps expanded, crossed if asked; with `settings.task_default`, the task's own shaping last, as the
    candidate `task_default`. `only`: the file stems to take (default all). `validator`: one to reuse (its
    workers stay up; default a new one for this call).

    Files that fail, and sweep variants that fail, are returned as failures with their reasons.
    """
    failures, drafts = [], []
    for path in candidate_files(settings.functions):
        if only is not None and path.stem not in only:
            continue
        try:
            check_name(path.stem, str(path))
            if path.stem == TASK_DEFAULT and getattr(settings, "task_default", False):
                raise CandidateError(str(path), f"the name {TASK_DEFAULT} is the task's own shaping's in this run "
                                                "(--task-default): rename the file")
            drafts.append((path.stem, read_source(path), str(path)))
        except CandidateError as err:
            failures.append(LoadFailure(file=str(path), name=path.stem, error=str(err)))
    default = task_default_candidate(task, settings.shaper_types) if getattr(settings, "task_default", False) else None
    if default is not None:
        drafts.append((default.name, default.source, None))
    verdicts = _verdicts(drafts, settings, task, validator, console) if drafts else []
    specs: dict[str, CandidateSpec] = {}
    handed = []
    for (name, source, file), verdict in zip(drafts, verdicts):
        failures += [LoadFailure(file=file or f"<{task.name} defaults>", name=variant, error=error)
                     for variant, error in verdict.errors.items()]
        if verdict.specs and (file is None or verdict.candidate is not None):
            specs.update(verdict.specs)
            if verdict.candidate is not None:
                handed.append(verdict.candidate)
    reported = {f.name for f in failures}
    candidates = []
    for candidate in expand_sweeps(handed):
        if candidate.name in specs:
            candidates.append(candidate)
        elif candidate.name not in reported:  # a verdict that names neither sizes nor a reason: never dropped unsaid
            failures.append(LoadFailure(file=str(candidate.path), name=candidate.name, error=(
                f"{candidate.path}: the sandbox's verdict holds no sizes for {candidate.name}, nor why; it is left "
                "out (an envcoder bug: please report it with this file)")))
    if settings.cross and candidates:
        candidates = cross_candidates(candidates, settings.shaper_types)
        specs = {**specs, **{c.name: _crossed_spec(c, specs) for c in candidates}}
    if default is not None and default.name in specs:
        candidates.append(default)
    return candidates, {c.name: specs[c.name] for c in candidates}, failures


def likely_count(settings) -> int | None:
    """How many candidates `sandboxed_candidates(settings)` gives if every file is valid, read without running a
    file: one per file, a sweep's variants for a `PARAMS` table written as literals (one for any other), the task's
    default; None for a crossed run or a folder that cannot be listed. A guess for work that is worth starting
    before the verdicts (`Simulator.trace_ahead`); nothing depends on it being right."""
    if settings.cross:
        return None
    try:
        paths = candidate_files(settings.functions)
    except (OSError, ValueError):
        return None
    count = 1 if getattr(settings, "task_default", False) else 0
    for path in paths:
        variants = 1
        try:
            for node in parse_source(read_source(path)).body:
                if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["PARAMS"]:
                    table = ast.literal_eval(node.value)
                    variants = math.prod(len(values) for values in table.values())
                    variants = variants if variants <= MAX_VARIANTS else 1  # refused by the sandbox
        except Exception:  # noqa: BLE001 - a file that does not parse counts once; the sandbox says why
            variants = 1
        count += max(variants, 1)
    return count


def _verdicts(drafts, settings, task, validator: SandboxValidator | None, console: Console | None):
    """The sandbox's verdicts on `drafts` (`validator`: one to reuse; default a new one for this call)."""
    if console is not None:
        console.print(f"validating {len(drafts)} candidate file(s) in sandboxed processes…", highlight=False)
        weaker = Jail.here().weaker
        if weaker:
            console.print(f"[yellow]the candidates' jail is weaker on this machine:[/yellow] {weaker}", highlight=False)
    own = validator is None
    validator = validator or SandboxValidator(task.name, settings.shaper_types, settings.validation_timeout_s,
                                              settings.validation_memory_gib, workers=default_workers(len(drafts)))
    try:
        return validator.validate(drafts)
    finally:
        if own:
            validator.close()


def _crossed_spec(candidate, specs: dict[str, CandidateSpec]) -> CandidateSpec:
    """A crossed candidate's sizes, from the files that provide its functions (each validated on its own: the
    shaping functions depend on the task's state only, never on each other)."""
    def of(api):
        return specs[candidate.providers.get(api, next(iter(candidate.providers.values())))]
    critic = "compute_critic_observation"
    return CandidateSpec(obs_dim=of("compute_observation").obs_dim, action_dim=of("compute_torque").action_dim,
                         reward_components=of("compute_reward").reward_components,
                         critic_obs_dim=of(critic).critic_obs_dim if critic in candidate.functions else None)
