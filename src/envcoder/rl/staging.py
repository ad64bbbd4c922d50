"""Compiling while other work goes on: a function in a background thread, and the training iteration as two
programs that compile at once (`StagedIteration`)."""

from __future__ import annotations

import concurrent.futures
import threading
import warnings
from typing import Callable

import jax

from envcoder.compile_cache import signature as call_signature


def in_thread(function: Callable, name: str) -> concurrent.futures.Future:
    """`function()` run in a daemon thread of its own (XLA releases the GIL while it compiles; a process that ends
    before the result is needed does not wait for it); the future gives its result or raises its exception."""
    future = concurrent.futures.Future()

    def run():
        try:
            future.set_result(function())
        except BaseException as err:  # noqa: BLE001 - raised where the result is asked for
            future.set_exception(err)
    threading.Thread(target=run, name=name, daemon=True).start()
    return future


class StagedIteration:
    """`learn((state, collect(state)))`, run as two programs that compile at once.

    XLA runs its optimization passes over one program on one thread, and on a GPU they are most of a compile: one
    program in two halves, compiled in two threads, takes about the longer half's time instead of the sum
    (docs/benchmarks/throughput.md). The second
    stage is traced while the first compiles. `collect` and `learn` are `jax.jit`s or `CachedJit`s; `learn` may
    donate its argument. Called, it takes and returns the pytrees; `lower(state).compile()` gives a callable that
    does, as `jax.jit`'s stages do; `prepare(shapes)` traces both stages ahead of the first call and compiles them
    in the background.
    """

    def __init__(self, collect, learn):
        self.collect, self.learn = collect, learn
        self._compiled: dict = {}  # the state's signature -> the compiled iteration

    def __call__(self, state):
        signature = call_signature(state)
        if signature not in self._compiled:
            self._compiled[signature] = self.lower(state).compile()
        return self._compiled[signature](state)

    def prepare(self, state, meanwhile: Callable[[], None] | None = None) -> None:
        """Trace both stages for `state` (arrays or `jax.ShapeDtypeStruct`s) now and compile them in background
        threads: the first call with a state of this signature waits only for what is left of the compile. What
        the learner does before its `init` runs; `meanwhile()` is called once the first stage compiles, before the
        second is traced (the learner starts `init`'s compile there). A stage that fails to trace is left to that
        call, which traces it again and raises the error where it always has."""
        signature = call_signature(state)
        if signature in self._compiled:
            return
        try:
            lowered = self.lower(state, meanwhile)
        except Exception:  # noqa: BLE001 - raised again by the first call
            return
        collect, learn = lowered._pending, in_thread(lowered._learn.compile, "envcoder-compile-learn")

        def iteration(state):
            return learn.result()((state, collect.result()(state)))
        self._compiled[signature] = iteration

    def lower(self, state, meanwhile: Callable[[], None] | None = None) -> "_StagedLowered":
        collect = self.collect.lower(state)
        # XLA releases the GIL: the second stage traces meanwhile
        pending = in_thread(collect.compile, "envcoder-compile-collect")
        if meanwhile is not None:
            meanwhile()
        collected = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), collect.out_info)
        with warnings.catch_warnings():
            # A donating second stage frees all of its input as it starts; what it cannot reuse for its outputs (the
            # rollout, one of two environment states) JAX would list in a warning at every run's start.
            warnings.filterwarnings("ignore", "Some donated buffers were not usable")
            learn = self.learn.lower((state, collected))
        return _StagedLowered(pending, learn)

    def _cache_size(self) -> int:
        """How many iterations (argument signatures) this has compiled."""
        return len(self._compiled)


class _StagedLowered:
    def __init__(self, pending: concurrent.futures.Future, learn):
        self._pending, self._learn = pending, learn

    def compile(self):
        learn = self._learn.compile()
        collect = self._pending.result()

        def iteration(state):
            return learn((state, collect(state)))
        return iteration
