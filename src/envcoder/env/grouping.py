"""Groups (candidate × seed) and dispatch of shaping functions over the group axis.

All state arrays inside the learner are `[G, E, ...]`. Candidates whose code is identical form a
*class*: their function is traced once and vmapped over the class's groups. A candidate handed over by the sandbox
brings its functions as programs already batched over groups (`envcoder.candidates.programs.Program`,
`group_batched`): they are called with the class's rows as they are, never traced from Python here. Distinct codes are
unrolled one class at a time inside the same jitted function, so compile time grows with the number
of distinct codes, not with the number of groups.

A class's constants (its files' float constants, `envcoder.candidates.constants`, a sweep's values among them)
are per-group values: a learner's programs take them as an input (`GroupPlan.constants`; the traced program reads
them through a view of the plan bound to that input, `GroupPlan.reading`), so candidates that differ only in them
share one compiled program. Traced without that input (a `GroupedEnv` used on its own), they are the plan's own
values.

Over several devices (`GroupPlan.layout`), every device holds a block of the group axis and runs the same
program on it; a class's rows on a device are then data (per-device row indices), not static slices.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from envcoder.shaping.api import PER_STEP, SHAPER_TYPES
from envcoder.candidates import (Candidate, api_callable, call_with_params, function_key,
                                       source_api)
from envcoder.tasks.base import Task


@dataclasses.dataclass(frozen=True)
class Group:
    """One independently trained policy: a candidate and a seed."""

    candidate: Candidate
    seed: int

    @property
    def label(self) -> str:
        return f"{self.candidate.name}#{self.seed}"


def group_key(candidate_name: str, seed: int) -> jax.Array:
    """PRNG key of a group, from the candidate's name and the seed only (never from a position)."""
    digest = int.from_bytes(hashlib.sha256(candidate_name.encode()).digest()[:4], "little") & 0x7FFFFFFF
    return jax.random.fold_in(jax.random.PRNGKey(seed), digest)


@dataclasses.dataclass(frozen=True)
class FunctionClass:
    """Groups that share the code of one shaping function."""

    function: Callable
    indices: np.ndarray
    """Positions in the plan's group order (sorted)."""
    params: dict = dataclasses.field(default_factory=dict)
    """Swept constants: name -> `[G_c]` values, one per group of the class (empty when none)."""
    api: str = ""
    """The shaping function's API name."""
    names: tuple[str, ...] = ()
    """The candidates of the class (for messages about it)."""
    rows: object = None
    """On a device of a sharded run: the class's local rows `[K]` (traced; a device with fewer members than
    K repeats one, and the copies' outputs are dropped), or None where the class has every local row."""
    local_params: dict | None = None
    """On a device of a sharded run: the swept constants of those rows, name -> `[K]` (traced)."""
    key: str = ""
    """The identity of the class's code (`{source api}:{function key}`)."""
    constants: dict | None = None
    """Where the constants come from while traced in a learner's program: its input, `[G]` arrays by
    `constant_key` (`GroupPlan.reading`); None: `params` (`local_params` on a device of a sharded run)."""
    tracing: list = dataclasses.field(default_factory=lambda: [None], compare=False, repr=False)
    """`[(api, candidate names)]` of the class being traced now, or `[None]`: one list for a plan's classes and its
    views (`GroupPlan.now_tracing`)."""

    def apply(self, *args):
        """The function vmapped over the class's groups (a program: called over them); `args` are already the
        class's rows. While it is traced, its plan's `now_tracing()` names the class (the watchdog reports it when a
        trace hangs)."""
        previous = self.tracing[0]
        self.tracing[0] = (self.api, self.names)
        try:
            batched = getattr(self.function, "group_batched", False)  # a candidate's program (over the groups)
            if not self.params:
                return self.function({}, *args) if batched else jax.vmap(self.function)(*args)
            if self.constants is not None:  # the program's input: the class's rows of each constant
                params = {name: self.take(self.constants[constant_key(self.api, name)]) for name in self.params}
            else:
                params = self.local_params if self.local_params is not None else {
                    name: jnp.asarray(values, jnp.float32) for name, values in self.params.items()}
            if batched:
                return self.function(params, *args)
            return jax.vmap(lambda p, *a: call_with_params(self.function, p, *a))(params, *args)
        finally:
            self.tracing[0] = previous

    def take(self, x):
        """The class's rows of a `[G, ...]` array (a static slice when the rows are contiguous).

        The row indices pass an optimization barrier: without it XLA constant-folds the gather of a constant
        field (a task constant broadcast to `[G, E, ...]`, e.g. Anymal's `default_dof_pos`) into a literal
        of `G_c × E` rows, which made compile time and the executable grow with the number of candidates.
        """
        if self.local_params is not None:  # on a device of a sharded run
            return x if self.rows is None else jnp.take(x, self.rows, axis=0)
        start, stop = int(self.indices[0]), int(self.indices[-1]) + 1
        if stop - start == len(self.indices):
            return x[start:stop]
        return jnp.take(x, jax.lax.optimization_barrier(jnp.asarray(self.indices)), axis=0)


@dataclasses.dataclass(frozen=True)
class DeviceLayout:
    """The group axis of a run sharded over `devices` devices, each holding `per_device` consecutive rows.

    Groups are dealt round-robin in plan order (classes are contiguous there, so every device gets a near-equal
    share of every class) and padded with inert rows to `devices × per_device`. `local` holds, per device, the
    row indices and swept constants of every function class there (arrays `[devices, ...]`; each device picks
    its own row with `lax.axis_index`); see `GroupPlan.localized`.
    """

    devices: int
    per_device: int
    order: np.ndarray
    """`[devices × per_device]`: the plan index of the group in each row, -1 for an inert row."""
    position: np.ndarray
    """`[G]`: the row of each group of the plan."""
    local: dict

    @property
    def inert(self) -> np.ndarray:
        return self.order < 0


def constant_key(api: str, name: str) -> str:
    """The key of a function's constant in `GroupPlan.constants`, e.g. `compute_reward:SIGMA`."""
    return f"{api}:{name}"


class GroupPlan:
    """The run's groups in internal order, with the function classes of every shaping type."""

    def __init__(self, task: Task, candidates: Sequence[Candidate], seeds: Sequence[int]):
        groups = [Group(c, s) for c in candidates for s in seeds]
        # Order groups so that classes are contiguous (static slices) for the per-step functions.
        groups.sort(key=lambda g: tuple(function_key(g.candidate, api) for api in PER_STEP) + (g.candidate.name,
                                                                                                 g.seed))
        self.task = task
        self.groups = groups
        self._tracing = [None]  # `now_tracing`, shared with the plan's views and classes
        self.classes: dict[str, list[FunctionClass]] = {}
        for api in SHAPER_TYPES:
            members: dict[str, list[int]] = {}
            functions: dict[str, Callable] = {}
            sources = []  # the API whose function serves as each group's (see FALLBACKS)
            for i, group in enumerate(groups):
                source = source_api(group.candidate, api, task.defaults)
                key = f"{source}:{function_key(group.candidate, source)}"
                sources.append(source)
                members.setdefault(key, []).append(i)
                own = group.candidate.functions
                functions.setdefault(key, api_callable(api, own[source] if source in own else task.defaults[source]))
            self.classes[api] = []
            for key, indices in members.items():
                source = sources[indices[0]]
                names = list(groups[indices[0]].candidate.function_params.get(source, {}))
                params = {n: np.array([groups[i].candidate.function_params[source][n] for i in indices])
                          for n in names}
                names = tuple(dict.fromkeys(groups[i].candidate.name for i in indices))
                self.classes[api].append(FunctionClass(functions[key], np.asarray(indices), params, api, names,
                                                       key=key, tracing=self._tracing))

    @property
    def num_groups(self) -> int:
        return len(self.groups)

    def constants(self) -> dict[str, np.ndarray]:
        """Every group's constants as data, `{constant_key(api, name): [G] float32}` (0 for a group whose function
        has no such constant): the input of a learner's programs (`reading`)."""
        table = {}
        for api, classes in self.classes.items():
            for c in classes:
                for name, values in c.params.items():
                    column = table.setdefault(constant_key(api, name), np.zeros(self.num_groups, np.float32))
                    column[c.indices] = values
        return table

    def signature(self) -> tuple:
        """What a trace of the plan depends on besides the functions' code: per shaping type, each class's function
        key, groups and constants' names (not their values, which are inputs)."""
        return tuple((api, tuple((c.key, tuple(c.indices.tolist()), tuple(c.params)) for c in classes))
                     for api, classes in self.classes.items())

    def num_distinct_codes(self) -> int:
        """Distinct function codes traced per iteration, over all shaping types (defaults included)."""
        return sum(len(classes) for classes in self.classes.values())

    def dispatch(self, api: str, args: tuple, combine: Callable[[list, list[FunctionClass]], object] | None = None):
        """Apply the `api` function of every group to its slice of `args` (pytrees of `[G, ...]`).

        Returns the per-class outputs merged back into group order by `combine(outputs, classes)`
        (default: arrays concatenated along the group axis).
        """
        classes = self.classes[api]
        outputs = [c.apply(*jax.tree.map(c.take, args)) for c in classes]
        return (combine or self.concat)(outputs, classes)

    def layout(self, devices: int) -> DeviceLayout:
        """Where every group lives when the group axis is sharded over `devices` devices."""
        G = self.num_groups
        per_device = -(-G // devices)
        order = np.full((devices, per_device), -1)
        for d in range(devices):
            members = np.arange(d, G, devices)
            order[d, :len(members)] = members
        flat = order.reshape(-1)
        position = np.empty(G, np.int64)
        position[flat[flat >= 0]] = np.flatnonzero(flat >= 0)
        local = {}
        for api, classes in self.classes.items():
            class_of = np.full(G, -1)
            for ci, c in enumerate(classes):
                class_of[c.indices] = ci
            where = class_of[np.maximum(order, 0)]  # the class of every row (inert rows: group 0's)
            rows, params, inverse = [], [], np.zeros(order.shape, np.int32)
            for ci, c in enumerate(classes):
                members = [np.flatnonzero((where[d] == ci) & (order[d] >= 0)) for d in range(devices)]
                width = max(len(m) for m in members)
                index = np.zeros((devices, width), np.int32)
                for d, m in enumerate(members):
                    index[d] = np.concatenate([m, np.full(width - len(m), m[0] if len(m) else 0)])
                    inverse[d, m] = sum(r.shape[1] for r in rows) + np.arange(len(m))
                # A member's constants: its position within the class; a repeated or foreign row takes the first's.
                within = np.searchsorted(c.indices, np.maximum(order[np.arange(devices)[:, None], index], 0))
                within = np.where(np.isin(order[np.arange(devices)[:, None], index], c.indices), within, 0)
                params.append({n: np.asarray(v, np.float32)[within] for n, v in c.params.items()})
                rows.append(index)
            everything = len(classes) == 1
            local[api] = {"rows": [None if everything else r for r in rows], "params": params,
                          "inverse": None if everything else inverse}
        return DeviceLayout(devices, per_device, flat, position, local)

    def localized(self, local: dict) -> "GroupPlan":
        """The plan as one device of a sharded run sees it, from its own slice of `DeviceLayout.local`."""
        plan = copy.copy(self)
        plan.classes = {api: [dataclasses.replace(c, rows=rows, local_params=params) for c, rows, params in zip(
            classes, local[api]["rows"], local[api]["params"])] for api, classes in self.classes.items()}
        plan._inverse = {api: local[api]["inverse"] for api in self.classes}
        return plan

    def reading(self, constants: dict) -> "GroupPlan":
        """The plan whose functions, traced, read their constants from `constants` (`[G]` arrays by `constant_key`,
        traced: a learner's program's input; a device's block of them in a sharded run) instead of its own values."""
        plan = copy.copy(self)
        plan.classes = {api: [dataclasses.replace(c, constants=constants) for c in classes]
                        for api, classes in self.classes.items()}
        return plan

    def now_tracing(self) -> tuple[str, tuple[str, ...]] | None:
        """`(api, candidate names)` of the shaping function of this plan (or of a view of it) being traced right now,
        or None."""
        return self._tracing[0]

    _inverse: dict | None = None
    """On a device of a sharded run: per API, each local row's place among the classes' outputs `[L]`."""

    def concat(self, outputs: list, classes: list[FunctionClass]):
        """Concatenate per-class `[G_c, ...]` pytrees and undo the class order."""
        if len(outputs) == 1:
            return outputs[0]
        if self._inverse is not None:  # on a device of a sharded run
            merged = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *outputs)
            return jax.tree.map(lambda x: jnp.take(x, self._inverse[classes[0].api], axis=0), merged)
        order = np.concatenate([c.indices for c in classes])
        merged = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *outputs)
        if np.array_equal(order, np.arange(len(order))):
            return merged
        inverse = np.argsort(order)
        return jax.tree.map(lambda x: jnp.take(x, inverse, axis=0), merged)
