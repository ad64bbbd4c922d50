"""Curricula: values that change over training, and the declarative `CURRICULUM` table.

A candidate's `curriculum(iteration, metrics)` (or `curriculum(iteration, metrics, params)`, which also gets its
own previous values, None at first) returns a dict of named values. It runs once per group at the start of
training and after every iteration, inside the jitted iteration; its values are part of the train state (so a
resumed run continues them exactly), go to `sample_physics(key, params)` as `params`, and reach every other
shaping function as `state["curriculum"]` (e.g. a command range that `sample_goal` widens).

The declarative form, a module-level table in the candidate file, compiles to the same thing:

    CURRICULUM = {"friction": {"range": [0.5, 1.5], "iters": 500},   # widens from 1 to [0.5, 1.5] over 500 its
                  "push_velocity": {"range": [0.0, 1.0]}}             # the full range from the start

Each entry's value is a range `[lo, hi]` that moves linearly from `start` (default: the field's neutral value,
or the range's midpoint for a name that is not a physics field) to `range` over `iters` iterations (default 0).
When the file defines no `sample_physics`, one is made that draws each field uniformly from its current range:
one value per environment (three for `com_offset` and `gravity`).
"""

from __future__ import annotations

import math
from typing import Mapping

import jax
import jax.numpy as jnp

from envcoder.sim.randomization import FIELDS

CURRICULUM_METRICS = ("task_fitness", "task_fitness_per_step", "episode_length", "shaped_return", "episodes",
                      "physics_failures")
"""What `curriculum` receives as `metrics`: the group's values of the iteration just run (NaN before the first,
and for an episode mean when no episode ended)."""

TABLE_KEYS = ("range", "iters", "start")


class TableError(ValueError):
    """A `CURRICULUM` table that cannot be used; the message says which entry and why."""


def parse_table(table, defines_sampler: bool) -> dict[str, dict]:
    """Check a `CURRICULUM` table: `{name: {"range": [lo, hi], "iters": N, "start": [lo, hi]}}`; returns it with
    floats and every key filled in."""
    if not isinstance(table, dict) or not table:
        raise TableError("CURRICULUM must be a non-empty dict: name -> {'range': [lo, hi], 'iters': N}")
    parsed = {}
    for name, entry in table.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise TableError(f"CURRICULUM key {name!r} must be a name")
        if not defines_sampler and name not in FIELDS:
            raise TableError(f"CURRICULUM[{name!r}] is not a physics field (the file defines no sample_physics to "
                             f"read it); fields: {', '.join(FIELDS)}")
        if not isinstance(entry, dict) or "range" not in entry or set(entry) - set(TABLE_KEYS):
            raise TableError(f"CURRICULUM[{name!r}] must be a dict with 'range': [lo, hi] and optionally 'iters': N, "
                             f"'start': [lo, hi]")
        end = _pair(entry["range"], name, "range")
        neutral = FIELDS[name].neutral if name in FIELDS else (end[0] + end[1]) / 2
        start = _pair(entry.get("start", [neutral, neutral]), name, "start")
        iters = entry.get("iters", 0)
        if not isinstance(iters, int) or isinstance(iters, bool) or iters < 0:
            raise TableError(f"CURRICULUM[{name!r}]['iters'] must be an integer ≥ 0, got {iters!r}")
        parsed[name] = {"range": end, "start": start, "iters": iters}
    return parsed


def _pair(value, name: str, key: str) -> tuple[float, float]:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
            or value[0] > value[1]):
        raise TableError(f"CURRICULUM[{name!r}][{key!r}] must be [lo, hi] with finite numbers, lo ≤ hi; "
                         f"got {value!r}")
    return float(value[0]), float(value[1])


def table_curriculum(table: Mapping[str, dict]):
    """The `curriculum` function of a parsed table: each name's current `[lo, hi]`."""
    def curriculum(iteration, metrics, params=None):
        values = {}
        for name, entry in table.items():
            fraction = jnp.clip(iteration / entry["iters"], 0.0, 1.0) if entry["iters"] else jnp.float32(1.0)
            start, end = jnp.asarray(entry["start"], jnp.float32), jnp.asarray(entry["range"], jnp.float32)
            values[name] = start + fraction * (end - start)
        return values
    return curriculum


def table_sampler(table: Mapping[str, dict]):
    """The `sample_physics` function of a parsed table: each field drawn uniformly from its current range."""
    names = sorted(table)

    def sample_physics(key, params):
        keys = jax.random.split(key, len(names))
        return {name: jax.random.uniform(k, (3,) if FIELDS[name].size == "3" else (), minval=params[name][0],
                                         maxval=params[name][1]) for name, k in zip(names, keys)}
    return sample_physics


def no_randomization(key, params):
    """The default `sample_physics`: every environment has the task's own physics."""
    return {}


def no_curriculum(iteration, metrics, params=None):
    """The default `curriculum`: no values."""
    return {}
