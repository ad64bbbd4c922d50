"""Candidates made from candidates: the variants of a file's `PARAMS` sweep, and the product of files across
shaping types (`--cross`); and how many a folder of files likely gives, read without running one (`likely_count`)."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import itertools
import math
import re
from typing import Sequence

from envcoder.candidates.files import candidate_files, read_source
from envcoder.candidates.load import MAX_VARIANTS, Candidate
from envcoder.shaping.api import CRITIC_OBSERVATION, OBSERVATION, CandidateError
from envcoder.text import parse as parse_source


def expand_sweeps(candidates: Sequence[Candidate]) -> list[Candidate]:
    """Each candidate with a `PARAMS` table becomes one variant per combination of its values.

    Variants share the code (and so one trace, vmapped over their constants); a variant is named
    `stem[NAME=value,...]` (each value as it reads back exactly: `_label`), so its PRNG key, like any candidate's,
    follows from its name.
    """
    expanded = []
    for candidate in candidates:
        if not candidate.sweep:
            expanded.append(candidate)
            continue
        names = list(candidate.sweep)
        for values in itertools.product(*(candidate.sweep[n] for n in names)):
            params = dict(zip(names, values))
            label = ",".join(f"{n}={_label(v)}" for n, v in params.items())
            expanded.append(dataclasses.replace(candidate, name=f"{candidate.name}[{label}]", params=params,
                                                function_params={api: {**candidate.function_params.get(api, {}),
                                                                       **params} for api in candidate.functions
                                                                 if not candidate.function_keys[api].endswith(
                                                                     ":CURRICULUM")}))
    return expanded


def _label(value) -> str:
    """A swept value in a variant's name: short (`:g`) where that reads back as the same number, else its exact
    repr, so that two values never share a name (0.5 and 0.5000001 were both `[K=0.5]`, one candidate of 2 seeds)."""
    short = f"{value:g}"
    return short if float(short) == float(value) else repr(float(value))


def cross_candidates(candidates: Sequence[Candidate], shaper_types: Sequence[str]) -> list[Candidate]:
    """The product across shaper types: every combination of one file per selected type.

    With `--shaper-types compute_reward compute_observation`, 5 files that define a reward and 3 that
    define an observation give 15 candidates named `reward_file+observation_file`. A file that defines
    several selected types contributes to each of them.
    """
    per_type = []
    for api in shaper_types:
        providers = [c for c in candidates if api in c.functions]
        if not providers:
            raise ValueError(f"--cross: no candidate file defines {api}; drop it from --shaper-types or add files")
        per_type.append((api, providers))
    combined = []
    for choice in itertools.product(*(providers for _, providers in per_type)):
        distinct = list({c.name: c for c in choice}.values())  # a file may provide several types
        parts = [c.name for c in distinct]
        functions = {api: c.functions[api] for (api, _), c in zip(per_type, choice)}
        function_keys = {api: c.function_keys[api] for (api, _), c in zip(per_type, choice)}
        function_params = {api: c.function_params.get(api, {}) for (api, _), c in zip(per_type, choice)}
        key_source = "|".join(f"{api}:{key}" for api, key in function_keys.items())
        sources = "\n".join(f"# ---- {c.name}: {c.path} ----\n{c.source}" for c in distinct)
        params = {k: v for c in distinct for k, v in c.params.items()}
        combined.append(Candidate(name="+".join(parts), path=choice[0].path, source=sources, functions=functions,
                                  code_key=hashlib.sha256(key_source.encode()).hexdigest()[:16],
                                  function_keys=function_keys, params=params, function_params=function_params,
                                  providers={api: c.name for (api, _), c in zip(per_type, choice)},
                                  **_crossed_sizes(dict(zip([api for api, _ in per_type], choice)), functions)))
    return combined


def _crossed_sizes(providers: dict[str, Candidate], functions) -> dict:
    """A crossed candidate's sizes (validated ones where its files are), from the files that provide its functions:
    each was validated on its own, and the shaping functions depend on the task's state only, never on each other.
    A size whose function no file provides is the first file's (the task's own function's)."""
    def of(api):
        return providers.get(api, next(iter(providers.values())))
    critic = CRITIC_OBSERVATION
    return {"obs_dim": of(OBSERVATION).obs_dim, "action_dim": of("compute_torque").action_dim,
            "reward_components": of("compute_reward").reward_components,
            "critic_obs_dim": of(critic).critic_obs_dim if critic in functions else None}


def freeze_sweep(source: str) -> list[tuple[str, str]]:
    """A source with a `PARAMS` sweep table -> one `(suffix, source)` per combination, each with its constants
    written in and the table removed, so every variant is a file of its own that the loop can rank, mutate
    and re-evaluate (its suffix `__NAME-VALUE` per constant: a candidate file's name); a source without a table is
    returned as it is, with suffix ''."""
    try:
        tree = parse_source(source)
    except (SyntaxError, ValueError):  # the sandbox refuses it with its reason
        return [("", source)]
    tables = [node for node in tree.body if isinstance(node, ast.Assign) and len(node.targets) == 1
              and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "PARAMS"]
    if not tables:
        return [("", source)]
    table = tables[-1]  # the one that holds when the module has run (a file that assigns it twice)
    try:
        sweep = ast.literal_eval(table.value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # not a literal table
        return [("", source)]
    constants = {}
    for node in tree.body:  # `K = 1.0` or `K: float = 1.0`
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) and node.value is not None else None)
        if isinstance(target, ast.Name) and isinstance(sweep, dict) and target.id in sweep:
            constants[target.id] = node
    if (not isinstance(sweep, dict) or set(constants) != set(sweep) or not all(
            isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                       for x in v) for v in sweep.values())
            or math.prod(len(v) for v in sweep.values()) > MAX_VARIANTS):
        return [("", source)]  # not a table of module constants to values: the sandbox says what is wrong
    lines = source.splitlines(keepends=True)
    variants = []
    for values in itertools.product(*sweep.values()):
        edited = list(lines)
        for name, value in zip(sweep, values):
            node = constants[name]
            edited[node.lineno - 1:node.end_lineno] = [f"{name} = {value!r}\n"] + [""] * (node.end_lineno - node.lineno)
        for each in tables:
            edited[each.lineno - 1:each.end_lineno] = [""] * (each.end_lineno - each.lineno + 1)
        variants.append(("".join(f"__{n}-{_value_name(v)}" for n, v in zip(sweep, values)), "".join(edited)))
    return variants


def _value_name(value) -> str:
    """A swept value as a file name can hold it: its exact shortest repr, so that no two values share a name (0.5
    and 0.5000001 stay apart)."""
    return repr(float(value)).replace("+", "")


def likely_count(settings) -> int | None:
    """How many candidates `envcoder.candidates.prepare.sandboxed_candidates(settings)` gives if every file is
    valid, read without running a file: one per file, a sweep's variants for a `PARAMS` table written as literals
    (one for any other), the task's default; None for a crossed run or a folder that cannot be listed. A guess for work that is worth starting
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
