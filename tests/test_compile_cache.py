"""The trace cache (`envcoder.compile_cache.CachedJit`): a second trainer of the same job loads its traced
programs instead of tracing them, and trains bit for bit as a trainer without the cache does."""

import dataclasses
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from conftest import BUNDLED
from envcoder import compile_cache
from envcoder.rl.ppo.config import PPOConfig
from envcoder.rl.ppo.learner import GroupedPPO
from envcoder.rl.staging import StagedIteration
from envcoder.candidates import Candidate, load_candidate
from envcoder.candidates.validate import sample_state, validate_candidate
from envcoder.sim import Simulator
from envcoder.tasks import get_task


@pytest.fixture(scope="module")
def job():
    task = get_task("Cartpole")
    sim = Simulator(task.model_file, task.substeps)
    state = sample_state(task, sim)
    candidates = [validate_candidate(task, sim, load_candidate(BUNDLED / "cartpole" / f"{n}.py", ("compute_reward",)),
                                     state) for n in ("good_upright", "alive_bonus")]
    sizes = {k: getattr(candidates[1], k) for k in ("obs_dim", "action_dim", "reward_components")}  # a default's

    def trainer(of_task=task, simulator=sim, chosen=candidates, **config):
        settings = PPOConfig.for_task(task, **{"horizon_length": 8, "mini_epochs": 1,
                                                             "units": (8,), **config})
        return GroupedPPO(of_task, [c if c.validated else dataclasses.replace(c, **sizes) for c in chosen],
                          settings, 4, (0,), simulator)
    trainer.task, trainer.sim = task, sim
    return trainer


def everything_computed(trainer):
    """Everything a run computes: the initial state, two iterations' metrics and states, the evaluation."""
    ts = trainer.init(prepare_iteration=True)
    assert trainer.iteration._cache_size() == 1, "init did not prepare the iteration for its state"
    out = [jax.device_get(ts)]
    for _ in range(2):
        ts, metrics = trainer.iteration(ts)
        out.append(jax.device_get((ts, metrics)))
    assert trainer.iteration._cache_size() == 1, "the prepared iteration was not the one called"
    out.append(jax.device_get(trainer.evaluate(ts)))
    return out


def assert_same(a, b):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)


def cached(trainer) -> list:
    """(loaded, stored) of the trainer's init, the iteration's two stages and the evaluation."""
    return [(f.loaded, f.stored) for f in trainer.programs().values()]


@pytest.mark.slow
def test_a_second_run_of_a_job_loads_its_traces_and_trains_bit_for_bit_as_without_the_cache(job, tmp_path,
                                                                                          monkeypatch):
    monkeypatch.setattr(compile_cache, "_CACHE_DIR", None)
    without = everything_computed(job())
    monkeypatch.setattr(compile_cache, "_CACHE_DIR", tmp_path)
    first = job()
    assert isinstance(first.iteration.collect, compile_cache.CachedJit)
    assert isinstance(first.iteration.learn, compile_cache.CachedJit)
    first_run = everything_computed(first)
    assert cached(first) == [(0, 1)] * 4
    second = job()
    second_run = everything_computed(second)
    assert cached(second) == [(1, 0)] * 4, "the second trainer of the same job traced again"
    assert_same(first_run, without)
    assert_same(second_run, without)
    # `lower(...).compile()` (the evaluation compiled in the background) gives the same function.
    ts = second.init()
    assert_same(jax.device_get(second.evaluate.lower(ts).compile()(ts)),
                jax.device_get(jax.jit(second._evaluate)(ts)))

    # Other settings are another job: traced anew, not served the first job's program.
    other = job(learning_rate=1e-2)
    everything_computed(other)
    assert cached(other) == [(0, 1)] * 4
    # A damaged entry is traced anew and replaced, not an error.
    for entry in (tmp_path / "envcoder-traces").iterdir():
        entry.write_bytes(entry.read_bytes()[:100])
    damaged = job()
    assert_same(everything_computed(damaged), without)
    assert cached(damaged) == [(0, 1)] * 4
    assert cached(job()) == [(0, 0)] * 4  # (nothing traced or loaded before the first call)


def test_the_trace_cache_is_on_with_the_compilation_cache_and_off_with_it(job, monkeypatch):
    monkeypatch.setattr(compile_cache, "_CACHE_DIR", None)
    assert not isinstance(job().iteration.learn, compile_cache.CachedJit)  # the library's default: off
    # The commands turn it on: beside JAX's compilation cache (here the tests' own)...
    path = compile_cache.enable_compilation_cache()
    assert compile_cache.trace_cache_dir() == path / "envcoder-traces"
    assert isinstance(job().iteration.learn, compile_cache.CachedJit)
    # ... and ENVCODER_CACHE_DIR= (empty) turns both off.
    code = ("from envcoder import compile_cache as c; print(c.enable_compilation_cache(), c.trace_cache_dir())")
    env = {**os.environ, "ENVCODER_CACHE_DIR": "", "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["None", "None"]


class SlipperySimulator(Simulator):
    """Another physics under the same task: a trace of it must not be served to a plain simulator's job."""

    def physics_step(self, data, ctrl, physics=None):
        return super().physics_step(data, 0.5 * ctrl, physics)


def test_the_trace_key_tells_apart_whatever_a_trace_reads(job):
    """The key covers the task's content (not its name), the simulator's class, and candidates' functions
    that carry no code key; the same job gives the same key."""
    key = job()._trace_key
    assert job()._trace_key == key
    task = job.task
    upright = next(iter(task.fitness.values()))

    def heavy(key, params):
        return {"gravity": jax.numpy.array([0.0, 0.0, -40.0])}

    def heavier(key, params):
        return {"gravity": jax.numpy.array([0.0, 0.0, -80.0])}
    others = [
        job(simulator=SlipperySimulator(task.model_file, task.substeps)),
        job(of_task=dataclasses.replace(task, max_qvel=task.max_qvel / 2)),
        job(of_task=dataclasses.replace(task, fitness={**task.fitness, "upright": dataclasses.replace(
            upright, physics=heavy)})),
        job(of_task=dataclasses.replace(task, fitness={**task.fitness, "upright": dataclasses.replace(
            upright, physics=heavier)})),
        job(of_task=dataclasses.replace(task, defaults={**task.defaults, "sample_physics": heavy})),
        job(chosen=[Candidate("default", None, "", {"sample_physics": heavy}, "default")]),
        job(chosen=[Candidate("default", None, "", {"sample_physics": heavier}, "default")]),
    ]
    keys = [key] + [t._trace_key for t in others]
    assert len(set(keys)) == len(keys)


def test_xla_options_keep_what_this_xla_knows(monkeypatch):
    """envcoder's XLA options pass to the trainer's programs; one that this jaxlib does not know (options are
    renamed between releases) is left out instead of failing every compile."""
    backend = jax.default_backend()
    monkeypatch.setitem(compile_cache.XLA_OPTIONS, backend, {"xla_cpu_enable_fast_math": False,
                                                             "xla_no_such_option_in_any_release": True})
    compile_cache.xla_options.cache_clear()
    try:
        assert compile_cache.xla_options() == {"xla_cpu_enable_fast_math": False}
    finally:
        compile_cache.xla_options.cache_clear()


def test_a_staged_iteration_is_learn_of_collect_and_compiles_the_stages_at_once():
    """`StagedIteration(collect, learn)(x) == learn((x, collect(x)))`, compiled once per argument signature; the
    first stage compiles in a thread of its own while the second is traced (here its compile waits until the second
    stage's tracing has begun, which a sequential lower-compile-lower would never let happen)."""
    import threading

    def collect(x):
        return {"doubled": 2.0 * x["a"], "total": x["a"].sum()}

    def learn(args):
        x, collected = args
        return {"a": x["a"] + collected["doubled"]}, collected["total"]

    learn_traced, compiled_in = threading.Event(), []

    class Watched:
        def __init__(self, jitted, on_lower=None, on_compile=None):
            self.jitted, self.on_lower, self.on_compile = jitted, on_lower, on_compile

        def lower(self, *args):
            lowered = self.jitted.lower(*args)
            if self.on_lower:
                self.on_lower()
            watched = self

            class Lowered:
                out_info = lowered.out_info

                def compile(self):
                    if watched.on_compile:
                        watched.on_compile()
                    return lowered.compile()
            return Lowered()

    def collect_compiles():
        compiled_in.append(threading.current_thread().name)
        assert learn_traced.wait(timeout=60), "the second stage was not traced while the first compiled"

    staged = StagedIteration(Watched(jax.jit(collect), on_compile=collect_compiles),
                                           Watched(jax.jit(learn), on_lower=learn_traced.set))
    x = {"a": np.arange(3.0, dtype=np.float32)}
    state, total = staged(x)
    assert compiled_in and compiled_in[0].startswith("envcoder-compile")
    np.testing.assert_array_equal(state["a"], [0.0, 3.0, 6.0])
    assert float(total) == 3.0
    state, total = staged(state)
    np.testing.assert_array_equal(state["a"], [0.0, 9.0, 18.0])
    assert staged._cache_size() == 1 and len(compiled_in) == 1
    staged({"a": np.arange(4.0, dtype=np.float32)})  # another shape: compiled anew
    assert staged._cache_size() == 2


def test_a_prepared_iteration_compiles_in_the_background_and_a_stage_that_fails_to_trace_raises_at_the_call():
    """`prepare(shapes)` traces both stages and returns while they compile in threads of their own (here the first
    stage's compile waits until `prepare` has returned); the first call runs what they compiled. A stage that does
    not trace is not an error of `prepare`: the call traces it again and raises there."""
    import threading

    returned, compiled_in = threading.Event(), []

    class Watched:
        def __init__(self, jitted, wait=False):
            self.jitted, self.wait = jitted, wait

        def lower(self, *args):
            lowered, watched = self.jitted.lower(*args), self

            class Lowered:
                out_info = lowered.out_info

                def compile(self):
                    compiled_in.append(threading.current_thread().name)
                    assert not watched.wait or returned.wait(timeout=60), "prepare waited for the compile"
                    return lowered.compile()
            return Lowered()

    def collect(x):
        return 2.0 * x

    def learn(args):
        x, doubled = args
        return x + doubled

    x = np.arange(3.0, dtype=np.float32)
    shapes = jax.ShapeDtypeStruct(x.shape, x.dtype)
    staged = StagedIteration(Watched(jax.jit(collect), wait=True), Watched(jax.jit(learn)))
    staged.prepare(shapes)
    returned.set()
    assert staged._cache_size() == 1
    np.testing.assert_array_equal(staged(x), [0.0, 3.0, 6.0])
    assert staged._cache_size() == 1 and len(compiled_in) == 2
    assert all(name.startswith("envcoder-compile") for name in compiled_in)
    staged.prepare(shapes)  # prepared already: nothing is traced or compiled again
    assert len(compiled_in) == 2

    def broken(args):
        raise ValueError("learn does not trace")
    staged = StagedIteration(jax.jit(collect), jax.jit(broken))
    staged.prepare(shapes)
    assert staged._cache_size() == 0
    with pytest.raises(ValueError, match="learn does not trace"):
        staged(x)


def test_a_donating_second_stage_lowers_without_jax_s_warning_about_unused_buffers():
    """The trainer's second stage donates all of its input, more buffers than its outputs can reuse; JAX's warning
    that lists them would print at the start of every run. (The same stage lowered alone warns.)"""
    import warnings

    def learn(args):
        state, collected = args
        return state + collected.sum()
    x = np.ones(3, np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jax.jit(learn, donate_argnums=0).lower((x, 2.0 * x))
        assert any("donated buffers" in str(w.message) for w in caught)
        caught.clear()
        staged = StagedIteration(jax.jit(lambda s: 2.0 * s), jax.jit(learn, donate_argnums=0))
        np.testing.assert_array_equal(staged.lower(x).compile()(x), [7.0, 7.0, 7.0])
    assert not [w for w in caught if "donated buffers" in str(w.message)]


def test_a_cached_jit_gives_its_output_shapes_from_one_trace_that_its_export_reuses(tmp_path, monkeypatch):
    """`out_shapes` traces without lowering (what `init` does so that the rollout's stage is traced and compiled
    first); the program's export later reuses that trace, and a rerun reads the shapes from the trace cache
    without tracing at all."""
    monkeypatch.setattr(compile_cache, "_CACHE_DIR", tmp_path)
    traced = []

    def f(x, scale):
        traced.append(1)
        return {"y": x * scale["s"], "n": x.sum()}
    x, scale = np.arange(4.0, dtype=np.float32), {"s": np.float32(2.0)}
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    want = {"n": jax.ShapeDtypeStruct((), np.float32), "y": jax.ShapeDtypeStruct((4,), np.float32)}
    first = compile_cache.CachedJit(f, "out-shapes-test")
    assert first.out_shapes(shape, scale) == want and len(traced) == 1
    out = first.lower(shape, scale).compile()(x, scale)
    np.testing.assert_array_equal(out["y"], 2.0 * x)
    assert len(traced) == 1 and (first.loaded, first.stored) == (0, 1)  # exported from out_shapes' trace
    rerun = compile_cache.CachedJit(f, "out-shapes-test")
    assert rerun.out_shapes(shape, scale) == want and len(traced) == 1 and rerun.loaded == 1
    np.testing.assert_array_equal(rerun(x, scale)["n"], 6.0)
    assert len(traced) == 1


_COMPILING: list = []


def _on_compile(event: str, duration: float, **_) -> None:
    if event.endswith("backend_compile_duration") and _COMPILING:
        _COMPILING[-1].append(duration)


def test_building_a_trainer_compiles_no_program(job):
    """A trainer is built after the candidates' verdicts, on a cold start's critical path: it compiles nothing (on a
    GPU each small program, e.g. the conversion `jnp.asarray` compiles for a mask's dtype, cost 20-130 ms there)."""
    jax.monitoring.register_event_duration_secs_listener(_on_compile)
    compile_cache.xla_options()  # checked once a process, beside validation in a run
    _COMPILING.append([])
    try:
        job()
    finally:
        compiled = _COMPILING.pop()
    assert compiled == []
