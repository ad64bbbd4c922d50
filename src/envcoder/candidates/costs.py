"""What a handed-over program costs and which costs are refused: XLA's own analyses of the program compiled for the
CPU (`program_costs`, run by the verifier, `envcoder.candidates.verifier`, never on a candidate's word), extrapolated
to a run's size (`cost_at`) and held against the task's own function of the same type (`check_program_cost`,
`check_costs`)."""

from __future__ import annotations

import math
import re
from typing import Callable, Mapping, Sequence

from envcoder.shaping.api import CandidateError

COST_FACTOR = 100.0
"""A program may cost this many times what the task's own function of its type costs per environment (each at least
`COST_FLOOR`), in flops and in bytes accessed: one far beyond it would slow every group of the run or stall it (work
XLA cannot be interrupted in), so it is refused."""

COST_FLOOR = {"flops": 1e4, "bytes": 1e5}
"""Per environment: what any function may cost whatever the task's own does (a trivial default is no yardstick)."""

MEMORY_SHARE = 0.5
"""The share of the device's memory that one candidate's program may need for its temporaries at the run's size."""

HEAVY_FACTOR = 10.0
"""A candidate whose programs do this many times the median candidate's operations per environment and step (and this
many times `COST_FLOOR`'s, so that a few dozen operations beside a constant are not "heavy") is named before training
(`heavier_than_neighbours`): the run steps all groups together, so it sets everyone's pace."""

_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def measured(compiled) -> dict:
    """`flops` (transcendentals counted in), `bytes` accessed and `temporary` bytes of a compiled program, as XLA's
    analyses count them. XLA counts a loop's body once: where it knows a loop's trip count (a `fori_loop`), the flops
    and bytes are multiplied by the largest such count, so that a loop of 2^31 steps costs what it will."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    trips = max([int(n) for n in _TRIP_COUNT.findall(compiled.as_text() or "")] or [1])
    return {"flops": (float(cost.get("flops", 0.0)) + float(cost.get("transcendentals", 0.0))) * trips,
            "bytes": float(cost.get("bytes accessed", 0.0)) * trips,
            "temporary": float(getattr(compiled.memory_analysis(), "temp_size_in_bytes", 0))}


def program_costs(fn: Callable | None, params: Mapping[str, float], programs: Sequence, arguments: list[tuple],
                  sizes: Sequence[int], compiled: list | None = None) -> dict:
    """What `programs` (deserialized `jax.export` programs of one function) cost at one group of each of `sizes`
    environments (`arguments`: `abstract_arguments`' shapes), as `measured` counts them compiled for the CPU: `flops`,
    `bytes`, `temporary`, one value per size, the largest over its programs; and `own`: the same of `fn`, the task's
    own function of its type as the learner calls it, per environment at the first size (None where it has none, or
    it does not take these arguments). `cost_at` extrapolates them to a run's size: two sizes show a cost that grows
    faster than the number of environments. `compiled`: where given, each program's executable at the first size is
    appended to it (to run it without compiling it again)."""
    import jax
    import jax.numpy as jnp

    from envcoder.candidates.handover import shapes_at

    values = {n: jax.ShapeDtypeStruct((1,), jnp.float32) for n in params}
    found = {k: [0.0] * len(sizes) for k in ("flops", "bytes", "temporary")}
    own = None
    for exported, abstract in zip(programs, arguments):
        for i, envs in enumerate(sizes):
            executable = jax.jit(exported.call).lower(values, *shapes_at(abstract, 1, envs)).compile()
            for k, v in measured(executable).items():
                found[k][i] = max(found[k][i], v)
            if i == 0 and compiled is not None:
                compiled.append(executable)
        if fn is not None:
            try:
                mine = measured(jax.jit(jax.vmap(fn)).lower(*shapes_at(abstract, 1, sizes[0])).compile())
                own = {k: max(v / sizes[0], (own or {}).get(k, 0.0)) for k, v in mine.items()}
            except Exception:  # noqa: BLE001 - the task's function takes other arguments (another action size)
                fn = own = None
    return {"envs": list(sizes), **found, "own": own}


def cost_at(cost: dict, what: str, envs: int) -> float:
    """A program's `what` (`flops`, `bytes`, `temporary`) at one group of `envs` environments, from `program_costs`'
    measurements: the one at that size where it was measured there (the run's own: a branch on the number of
    environments shows only there), else a power of the number of environments through the two nearest, at least
    linear (a cost that grows as its square, an `[e, e]` array, is seen as one)."""
    sizes, values = list(cost["envs"]), list(cost[what])
    if envs in sizes:
        return values[sizes.index(envs)]
    above = next((i for i, n in enumerate(sizes) if n > envs), len(sizes))
    pair = min(max(above - 1, 0), len(sizes) - 2)
    (small, large), (a, b) = sizes[pair:pair + 2], values[pair:pair + 2]
    if a <= 0.0 or b <= 0.0:
        return b * envs / large
    power = max(1.0, math.log(b / a) / math.log(large / small))
    return b * (envs / large) ** power


def check_program_cost(cost: dict, api: str, file: str, envs: int) -> None:
    """Refuse (`CandidateError`) a program whose `cost` (`program_costs`) at `envs` environments per group is more
    per environment than `COST_FACTOR` × the task's own function's (at least `COST_FLOOR`)."""
    units = {"flops": "operations", "bytes": "bytes of memory traffic"}
    own = cost.get("own") or {}
    for what, floor in COST_FLOOR.items():
        each, yardstick = cost_at(cost, what, envs) / envs, max(own.get(what, 0.0), floor)
        if each > COST_FACTOR * yardstick:
            raise CandidateError(file, (
                f"its program does {each:.3g} {units[what]} per environment and step at {envs} environments, "
                f"{each / yardstick:,.0f}× the task's own {api}() ({own.get(what, 0.0):.3g}; counted as at least "
                f"{floor:g}), more than the {COST_FACTOR:g}× a candidate may: it would slow or stall every group "
                "of the run; compute less per environment"), function=api)


def check_costs(candidate, groups: int, envs: int, memory_bytes: int | None) -> None:
    """Refuse (`CandidateError`) a candidate whose programs, at the run's `envs` environments per group, cost far
    more per environment than the task's own functions (`check_program_cost`), or whose temporaries at `groups`
    groups would need more than `MEMORY_SHARE` of the device's memory (`memory_bytes`; None: not known)."""
    for api, program in candidate.functions.items():
        cost = getattr(program, "cost", None)
        if not cost:
            continue
        check_program_cost(cost, api, str(candidate.path), envs)
        need = cost_at(cost, "temporary", envs) * groups
        if memory_bytes and need > MEMORY_SHARE * memory_bytes:
            raise CandidateError(str(candidate.path), (
                f"its program needs {need / 2**30:,.1f} GiB of working memory at {groups} group(s) of {envs} "
                f"environments, more than {MEMORY_SHARE:.0%} of the device's {memory_bytes / 2**30:,.0f} GiB: "
                "compute less per environment, or run fewer environments"), function=api)


def memory_need(candidate, groups: int, envs: int) -> float:
    """The most working memory (bytes) one of a candidate's programs needs at `groups` groups of `envs` environments,
    from the worker's measurements (`cost_at`); 0 where none was measured (the task's own shaping)."""
    costs = [getattr(f, "cost", None) for f in candidate.functions.values()]
    return max([cost_at(c, "temporary", envs) * groups for c in costs if c] or [0.0])


def heavier_than_neighbours(candidates, envs: int) -> list[tuple[str, float]]:
    """`(name, ratio)` of each candidate whose programs' operations per environment and step at `envs` environments
    (`cost_at`) are over `HEAVY_FACTOR` × the median candidate's and over `HEAVY_FACTOR` × `COST_FLOOR`'s; needs
    three."""
    work = {c.name: sum(cost_at(f.cost, "flops", envs) for f in c.functions.values() if getattr(f, "cost", None))
            for c in candidates}
    measured_work = sorted(v for v in work.values() if v > 0)
    if len(measured_work) < 3:
        return []
    median = measured_work[len(measured_work) // 2]
    floor = COST_FLOOR["flops"] * envs
    return [(name, v / median) for name, v in work.items() if v > HEAVY_FACTOR * max(median, floor)]
