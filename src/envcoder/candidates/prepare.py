"""Candidates ready for a learner: every file of a run's candidate folder vetted, then read, validated and traced in
the sandbox's jailed workers, handed over as programs (no file's code runs here), and expanded into its variants
(sweeps, crossing).

`settings` is what of a run's settings these read (`CandidateSettings`: `envcoder.runs.eval_settings.EvalSettings` is
one)."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Protocol

from rich.console import Console

from envcoder.candidates.costs import check_costs, cost_at, heavier_than_neighbours
from envcoder.candidates.files import LoadFailure, candidate_files, check_name, read_source
from envcoder.candidates.load import TASK_DEFAULT, task_default_candidate
from envcoder.candidates.jail import Jail
from envcoder.candidates.pool import default_workers
from envcoder.candidates.sandbox import SandboxValidator
from envcoder.candidates.variants import MAX_VARIANTS, cross_candidates
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
                         only: set[str] | None = None, console: Console | None = None):
    """`(candidates, failures)` of `settings.functions`: each file vetted here and then read, checked and traced only
    in the sandbox's jailed workers, which hand it over validated, its functions as programs (this process never runs
    a file's code), its sweep expanded there; crossed if asked; with `settings.task_default`, the task's own shaping
    last, as the candidate `task_default`. `only`: the file stems to take (default all). `validator`: one to reuse
    (its workers stay up; default a new one for this call).

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
    candidates = _affordable(candidates, failures, len(settings.seeds), settings.envs_per_candidate)
    if console is not None:
        for name, ratio in heavier_than_neighbours(candidates, settings.envs_per_candidate):
            console.print(f"{one_line(name)} computes {ratio:,.0f}× the operations per environment and step of the "
                          "median candidate: every group of the run waits for it at every step (compute less per "
                          "environment, or train it in a run of its own)", markup=False, highlight=False)
    if settings.cross and candidates:
        candidates = cross_candidates(candidates, settings.shaper_types)
    return candidates + defaults, failures


def memory_need(candidate, groups: int, envs: int) -> float:
    """The most working memory (bytes) one of a candidate's programs needs at `groups` groups of `envs` environments,
    from the worker's measurements (`cost_at`); 0 where none was measured (the task's own shaping)."""
    costs = [getattr(f, "cost", None) for f in candidate.functions.values()]
    return max([cost_at(c, "temporary", envs) * groups for c in costs if c] or [0.0])


OOM_SUSPECT_SHARE = 0.05
"""A candidate whose programs need this share of the device's memory at the run's size is a suspect when it runs
out (`memory_suspects`); with none, the run's size is the cause."""


def memory_suspects(candidates, groups: int, envs: int) -> list[str]:
    """The candidates whose programs need at least `OOM_SUSPECT_SHARE` of the device's memory at `groups` groups of
    `envs` environments (`memory_need`): what the device running out in training suspects."""
    memory = device_memory()
    return [c.name for c in candidates if memory and memory_need(c, groups, envs) >= OOM_SUSPECT_SHARE * memory]


def device_memory() -> int | None:
    """The bytes JAX may use of the first device (a CPU's: the host's memory); None where it does not say."""
    import jax

    device = jax.devices()[0]
    if device.platform == "cpu":
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return (device.memory_stats() or {}).get("bytes_limit")


OWN_CONTROL_SHARE = 0.5
"""A candidate's `compute_torque` whose policy decides less than this share of what the task's own mapping lets it
decide (`policy_share`) is flagged in the ranking: the file's own controller earns its fitness, not a policy."""


def policy_share(torque, task, action_dim: int, params=None) -> float | None:
    """How much of the motor command the policy's action decides under `torque` (a `compute_torque`: a program of
    the worker's, or the task's own function), on the task's sample states: half the command's change from action
    -1 to +1 over that and the command at action 0 (1: all of it, as a torque that scales the action; near 0: a file
    that balances the pole itself with 0.01 N per unit of action). None where the task has no sample states here."""
    import jax.numpy as jnp
    import numpy as np

    from envcoder.candidates.load import api_callable
    from envcoder.candidates.samples import task_states

    states = task_states(task, make=False)  # the validation's workers made them
    if states is None or task.discrete:
        return None
    envs = len(next(iter(states.values())))
    batched = getattr(torque, "group_batched", False)
    fields = {k: jnp.asarray(v)[None] if batched else jnp.asarray(v) for k, v in states.items()}
    if "actions" in fields:
        fields["actions"] = jnp.zeros(fields["actions"].shape[:-1] + (action_dim,), jnp.float32)

    def command(value: float):
        action = jnp.full(((1,) if batched else ()) + (envs, action_dim), value, jnp.float32)
        if batched:
            return np.asarray(torque({k: jnp.full((1,), v, jnp.float32) for k, v in (params or {}).items()},
                                     action, fields))
        return np.asarray(api_callable("compute_torque", torque)(action, fields))
    swing = np.abs(command(1.0) - command(-1.0)).mean() / 2
    rest = np.abs(command(0.0)).mean()
    return float(swing / (swing + rest)) if swing + rest > 0 else None


def _sample_action_dim(task) -> int:
    """The width of the task's own action: its sample states' `actions` (rolled out under its own shaping)."""
    from envcoder.candidates.samples import task_states

    states = task_states(task, make=False) or {}
    return int(states["actions"].shape[-1]) if "actions" in states else 1


def own_control(candidates, task) -> dict[str, dict]:
    """`{name: {"policy_share", "task_share"}}` of each candidate whose own `compute_torque` leaves the policy less
    than `OWN_CONTROL_SHARE` of the task's own mapping's share (`policy_share`)."""
    mine = [c for c in candidates if "compute_torque" in c.functions and c.action_dim]
    own = task.defaults.get("compute_torque")
    if not mine or own is None:
        return {}
    task_share = policy_share(own, task, _sample_action_dim(task))
    if not task_share:
        return {}
    flagged = {}
    for candidate in mine:
        share = policy_share(candidate.functions["compute_torque"], task, candidate.action_dim,
                             candidate.function_params.get("compute_torque"))
        if share is not None and share < OWN_CONTROL_SHARE * task_share:
            flagged[candidate.name] = {"policy_share": share, "task_share": task_share}
    return flagged


def _affordable(candidates, failures: list, groups: int, envs: int) -> list:
    """The candidates whose programs' costs pass `check_costs` at the run's size; the others become failures."""
    memory = device_memory() if candidates else None
    kept = []
    for candidate in candidates:
        try:
            check_costs(candidate, groups, envs, memory)
            kept.append(candidate)
        except CandidateError as err:
            failures.append(LoadFailure(file=str(candidate.path), name=candidate.name, error=str(err)))
    return kept


def likely_count(settings: CandidateSettings) -> int | None:
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
    count = 1 if settings.task_default else 0
    for path in paths:
        try:
            count += _sweep_size(read_source(path))
        except (OSError, CandidateError):  # counts once; the sandbox says why
            count += 1
    return count


_TABLE = re.compile(r"^PARAMS\s*=\s*\{([^{}]*)\}", re.M)
_NUMBER = r"[-+]?(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][-+]?\d+)?"
_ENTRY = re.compile(rf"\s*(['\"])\w+\1\s*:\s*[\[(]\s*{_NUMBER}(?:\s*,\s*{_NUMBER})*\s*,?\s*[\])]\s*(?:,|$)")


def _sweep_size(source: str) -> int:
    """The variants of a file's `PARAMS` table where it is a plain `{"NAME": [numbers], ...}` literal, read as text
    (the training process parses no candidate's text: the sandbox expands sweeps); 1 for a file without one, or any
    other."""
    table = _TABLE.search(source)
    if table is None:
        return 1
    body, sizes, at = table.group(1).strip(), [], 0
    while at < len(body):
        entry = _ENTRY.match(body, at)
        if entry is None or entry.end() == at:
            return 1
        sizes.append(len(re.findall(_NUMBER, entry.group(0).split(":", 1)[1])))
        at = entry.end()
    size = math.prod(sizes)
    return size if 0 < size <= MAX_VARIANTS else 1  # a larger one is refused by the sandbox


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
