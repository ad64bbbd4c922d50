"""The candidate's process checks its own hand-over (`envcoder.candidates.programs`): each exported program run on
the sample states at two batch sizes against the Python function it was exported from. An honest file's program that
behaves otherwise than its function fails here with the file's own error; what a dishonest process skips, the
verifier (`envcoder.candidates.verifier`) checks again."""

from __future__ import annotations

import base64
from typing import Callable, Mapping, Sequence

import jax
import numpy as np
from jax import export

from envcoder.shaping.api import CandidateError

HANDOVER_SIZES = ((1, 1), (2, 4))
"""The (groups, share of the sample's environments: 1 all, 4 a quarter) at which the worker runs each exported program
against its Python function (`check_handover`): two batch sizes."""


def check_handover(fn: Callable, params: Mapping[str, float], programs: Sequence[str], arguments: list[tuple],
                   state: Mapping, file: str, api: str) -> None:
    """In the worker: each exported program (`export_function`'s, for `arguments`, `abstract_arguments`' shapes)
    run on the sample `state` `[E, ...]` at two batch sizes (`HANDOVER_SIZES`), against `fn` (the Python function
    as the learner calls it, one group at a time, with its constants `params`, traced at the batch's concrete size)
    on the same inputs: the same outputs, dtypes and shapes, values equal up to rounding. A program that does
    otherwise than the function that was validated (a trace that tells symbolic sizes apart) is refused; one too big
    or too slow to run at the sample's size fails here, in the jail, not in training. Inputs and comparisons stay
    on the host (NumPy): each batch size compiles the program and the function once, and nothing else."""
    from envcoder.candidates.load import call_with_params

    envs = len(next(iter(v for k, v in state.items() if k != "curriculum")))
    function = jax.jit(lambda values, *args: call_with_params(fn, values, *args))
    for blob, abstract in zip(programs, arguments):
        exported = export.deserialize(bytearray(base64.b64decode(blob)))
        for g, share in HANDOVER_SIZES:
            e = max(1, envs // share)
            values = {n: np.full((g,), v, np.float32) for n, v in params.items()}
            args = concrete_arguments(abstract, state, g, e)
            try:
                got = jax.tree.map(np.asarray, exported.call(values, *args))
            except Exception as err:  # noqa: BLE001 - its program fails where its function did not
                raise CandidateError(file, f"its program fails on {g} group(s) of {e} environments: "
                                           f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200]}",
                                     function=api) from None
            want = [jax.tree.map(np.asarray, function({n: v[k] for n, v in values.items()},
                                                      *jax.tree.map(lambda x, k=k: x[k], args))) for k in range(g)]
            want = jax.tree.map(lambda *xs: np.stack(xs), *want)
            _same_outputs(got, want, g, e, file, api)


def shapes_at(abstract: tuple, g: int, e: int) -> tuple:
    """`abstract_arguments`' shapes at `g` groups of `e` environments."""
    def at(aval):
        return jax.ShapeDtypeStruct(tuple(g if str(d) == "g" else e if str(d) == "e" else int(d) for d in aval.shape),
                                    aval.dtype)
    return jax.tree.map(at, abstract)


def concrete_arguments(abstract: tuple, state: Mapping, g: int, e: int) -> tuple:
    """`abstract_arguments`' shapes at `g` groups of `e` environments, as host arrays: a state field from the sample
    `state` (its first `e` environments, each group the same), anything else (keys, actions, metrics) drawn at
    random."""
    leaves, tree = jax.tree_util.tree_flatten_with_path(abstract)
    out = []
    for i, (path, aval) in enumerate(leaves):
        shape = tuple(g if str(d) == "g" else e if str(d) == "e" else int(d) for d in aval.shape)
        dtype = np.dtype(aval.dtype)
        name = path[-1].key if len(path) == 2 and isinstance(path[-1], jax.tree_util.DictKey) else None
        sample = state.get(name) if name is not None else None
        rng = np.random.default_rng(i)
        if sample is not None and tuple(sample.shape[1:]) == shape[2:] and sample.dtype == dtype:
            out.append(np.broadcast_to(np.asarray(sample)[:e], shape))
        elif np.issubdtype(dtype, np.unsignedinteger):
            out.append(rng.integers(0, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True))
        elif np.issubdtype(dtype, np.integer):
            out.append(np.zeros(shape, dtype))  # a discrete action: the first one
        elif dtype == np.bool_:
            out.append(np.zeros(shape, bool))
        else:
            out.append(rng.uniform(-1.0, 1.0, shape).astype(dtype))
    return jax.tree_util.tree_unflatten(tree, out)


def _same_outputs(got, want, g: int, e: int, file: str, api: str) -> None:
    """`got` (the program's outputs) are `want` (the function's): the same structure, dtypes and shapes, and
    values equal up to rounding (booleans and integers on all but 1% of the entries: a threshold on a float that
    rounds the other way)."""
    where = f"on {g} group(s) of {e} environments"
    if jax.tree.structure(got) != jax.tree.structure(want):
        raise CandidateError(file, f"its program returns {jax.tree.structure(got)} {where}, where the function "
                                   f"returned {jax.tree.structure(want)}: it behaves otherwise once exported",
                             function=api)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype != b.dtype or a.shape != b.shape:
            raise CandidateError(file, f"its program returns {a.dtype}{list(a.shape)} {where}, where the function "
                                       f"returned {b.dtype}{list(b.shape)}: it behaves otherwise once exported",
                                 function=api)
        if np.issubdtype(a.dtype, np.inexact):
            scale = float(np.nanmax(np.abs(b))) if b.size and bool(np.isfinite(b).any()) else 1.0
            close = np.isclose(a, b, rtol=1e-3, atol=1e-3 * max(scale, 1.0), equal_nan=True)
            same = bool(close.all())
        else:
            same = b.size == 0 or float(np.mean(a == b)) >= 0.99
        if not same:
            raise CandidateError(file, f"its program's values {where} differ from the function's on the same "
                                       "inputs: it behaves otherwise once exported", function=api)
