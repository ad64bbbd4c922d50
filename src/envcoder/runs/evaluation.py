"""The main job: load candidates, validate them, train them all in one process, rank by task fitness."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Sequence

import jax
from rich.console import Console

import envcoder
from envcoder.compile_cache import xla_options
from envcoder.rl.staging import in_thread
from envcoder.rl.config import algorithm, minibatch_size
from envcoder.rl.typed_settings import Settings
from envcoder.runs.directory import RunDirectory
from envcoder.runs.driver import TrainingDriver
from envcoder.runs.job import Job, Plan
from envcoder.runs.memory import RunTooLargeError, available_device_bytes, out_of_memory_message
from envcoder.runs.results import RunResults
from envcoder.runs.eval_settings import EvalSettings
from envcoder.runs.schedule import rungs
from envcoder.runs.seed_rounds import evaluate_until_separable
from envcoder.candidates import LoadFailure, candidate_files
from envcoder.candidates.prepare import sandboxed_candidates
from envcoder.candidates.sandbox import SandboxValidator
from envcoder.sim import Simulator
from envcoder.text import console as text_console, shown


class OutOfGPUMemoryError(RuntimeError):
    """The grouped run does not fit in the device's memory; the message says which settings to change."""


class NoValidCandidatesError(RuntimeError):
    pass


def _versions() -> dict:
    import mujoco
    return {"envcoder": envcoder.__version__, "jax": jax.__version__, "mujoco": mujoco.__version__,
            "python": platform.python_version(), "device": str(jax.devices()[0].device_kind),
            "backend": jax.default_backend()}


def _check_same_candidates(run_dir: RunDirectory, valid) -> None:
    """A resumed run must train exactly the candidates it started with, with the same code."""
    recorded = run_dir.read_config()["candidates"]
    if recorded != [c.name for c in valid]:
        raise ValueError(f"cannot resume {run_dir.path}: it trained {', '.join(recorded)}, and the candidate files "
                         f"now give {', '.join(c.name for c in valid)}")
    for candidate in valid:
        saved = run_dir.path / "candidates" / f"{candidate.name}.py"
        if saved.read_text() != candidate.source:
            raise ValueError(f"cannot resume {run_dir.path}: {candidate.path} changed since the run started "
                             f"(the run's copy is {saved})")


def run_evaluation(settings: EvalSettings | Plan, console: Console | None = None, resume: bool = False,
                   validator: SandboxValidator | None = None, restart: Sequence[str] | None = None,
                   until: float | None = None) -> RunResults:
    """Run the whole job (`envcoder.runs.driver`) of `settings` (or of their `Plan`, resolved here where not yet)
    and return its results (what `results.json` holds); with
    `settings.seeds_until_separable`, in rounds of seeds (`envcoder.runs.seed_rounds`). With `resume`, continue the
    run in `settings.out` from its last checkpoint (see `settings_from_run`). `validator`: a sandbox to validate
    the candidates with (default: a new one for this run). `restart`: the `envcoder` arguments that continue the
    run (`eval --resume RUN`), with which a run whose iteration hangs on a candidate's loop restarts itself without
    it (`envcoder.runs.watchdog`); None (a library call): the watchdog ends the process. `until`: a time
    (`time.time()`) after which training stops at the next iteration and the policies are evaluated as they are
    (timings' "out_of_time"; `envcoder auto --budget`); not with rounds of seeds, nor over several processes."""
    plan = settings if isinstance(settings, Plan) else Plan.of(settings)
    if plan.settings.seeds_until_separable is not None:
        return evaluate_until_separable(plan, functools.partial(evaluate_once, restart=restart), console, resume,
                                        validator)
    return evaluate_once(plan, console, resume, validator, restart=restart, until=until)


def evaluate_once(plan: Plan, console: Console | None = None, resume: bool = False,
                  validator: SandboxValidator | None = None, restart: Sequence[str] | None = None,
                  until: float | None = None) -> RunResults:
    """`run_evaluation` of `plan` in one round of seeds, whatever its `seeds_until_separable` (which config.json
    records, for a resumed run)."""
    lead = jax.process_index() == 0  # of a multi-host run, only process 0 writes and prints
    console = console or text_console(quiet=not lead)  # a message is a line: never cut in a value
    settings, task, fitness_name, config = plan.settings, plan.task, plan.fitness_name, plan.config
    candidate_files(settings.functions)  # a missing or empty directory is reported before anything else
    plan.check_sizes()
    run_dir = RunDirectory(settings.out, resume, writes=lead)  # fails now, before any compiling, if --out is taken
    count = plan.likely_candidates
    with _simulator_while_validating(task, count and count * len(settings.seeds) * settings.envs_per_candidate) \
            as simulator:
        tick = time.perf_counter()
        valid, failures = sandboxed_candidates(settings, task, validator, console=console,
                                               device_memory=lambda: available_device_bytes(1)[0])
    validation_s = time.perf_counter() - tick
    simulator = simulator.result()
    if valid:
        try:
            plan.check_sizes(len(valid))
        except RunTooLargeError:
            run_dir.discard()
            raise
    valid, failures, left_out = _leave_out(valid, failures, run_dir.read_hung() if resume else [])
    for failure in failures:
        console.print(f"[yellow]left out[/yellow] {shown(failure.error)}", highlight=False)
    aside = [c for c in left_out if c not in {f.name for f in failures}]
    if aside:  # not out yet: they come back if the hang is not theirs
        console.print(f"set aside while finding which candidate hung: {', '.join(map(shown, sorted(aside)))}",
                      highlight=False)
    run_dir.write_failures(failures)
    if not valid:
        run_dir.discard()
        where = settings.functions if isinstance(settings.functions, Path) else ", ".join(map(str, settings.functions))
        raise NoValidCandidatesError(f"no valid candidates in {where} "
                                     f"({len(failures)} failed validation; see the messages above)")

    if resume:
        _check_same_candidates(run_dir, valid)
    else:
        _write_run_records(run_dir, plan, valid)

    schedule = rungs(settings.schedule, len(valid), settings.envs_per_candidate, config.max_epochs,
                     settings.rungs, functools.partial(_batch_fits, config))
    physics = _physics(settings)

    def make_learner(names, envs_per_candidate: int):
        """The learner of the candidates `names` (a rung's survivors), each group with `envs_per_candidate` envs."""
        return algorithm(settings.algo).learner(task, [c for c in valid if c.name in names], config,
                                                envs_per_candidate, settings.seeds,
                                                simulator if physics == simulator.physics else None,
                                                fitness=fitness_name, physics=physics, devices=settings.devices,
                                                evaluation_envs=settings.evaluation_envs)
    job = Job(plan, valid, failures, schedule, make_learner, left_out)
    return _train(job, run_dir, console, resume, validation_s, restart, until)


def _train(job: Job, run_dir: RunDirectory, console: Console, resume: bool, validation_s: float,
           restart: Sequence[str] | None, until: float | None = None) -> RunResults:
    """The job trained and ranked (`TrainingDriver`); the device's memory running out is a candidate's fault found
    by halves where one needs much of it (`watchdog.RunWatch.out_of_memory`: the run restarts), else an
    `OutOfGPUMemoryError` that says what to change."""
    settings, driver = job.settings, None
    try:
        driver = TrainingDriver(job, run_dir, console, resume, validation_s, restart, until)
        return driver.run()
    except (jax.errors.JaxRuntimeError, MemoryError) as err:
        if not isinstance(err, MemoryError) and "RESOURCE_EXHAUSTED" not in str(err):
            raise
        stage = driver.watch.stage if driver is not None else "building the learner"
        if driver is not None:
            reason = (str(err).split("\n")[0] or type(err).__name__).removeprefix("RESOURCE_EXHAUSTED: ")
            driver.watch.out_of_memory(f"out of device memory while {stage}: {reason}")
        raise OutOfGPUMemoryError(out_of_memory_message(err, len(job.candidates) * len(settings.seeds),
                                                        settings.envs_per_candidate, run_dir.path, stage)) from err


@contextlib.contextmanager
def _simulator_while_validating(task, worlds: int | None):
    """The task's simulator (a future), built in a thread while the body runs the sandbox's validation: the
    device's setup (the GPU backend, the model on it: about a second) needs no verdict. If the sandbox is still
    validating then, the simulator traces its physics step ahead too (`Simulator.trace_ahead`), for `worlds`
    environments: the run's first rollout if every file is valid (`likely_count`). A trace not begun by the end of
    validation is left out: where the verdicts came from the cache at once (a warm run, whose programs the trace
    cache holds too), it would only compete for the GIL with the run's start (warm starts were slower with it), and
    a cold run's rollout traces what is left itself."""
    validated = threading.Event()

    def build() -> Simulator:
        simulator = Simulator(task.model_file, task.substeps)
        xla_options()  # checked on a small program once a process: here, beside validation, not on the run's path
        if not validated.is_set():
            simulator.trace_ahead(worlds, wanted=lambda: not validated.is_set())
        return simulator

    future = in_thread(build, "envcoder-simulator")
    try:
        yield future
    finally:
        validated.set()


def _leave_out(valid, failures, hung: list[dict]):
    """The candidates that hung in this run's training (`hung`: `hung.json`'s entries) made inert: their programs
    compute nothing (`Program.left_out`), under code keys of their own, and they keep their place, so the run's
    checkpoint fits; each is a failure with its reason, but for those only set aside while the run finds by halves
    which one hung (an entry still `bisecting`: they come back). `(valid, failures, their names)`."""
    left_out = {name: entry for entry in hung for name in entry["candidates"]}
    if not left_out:
        return valid, failures, frozenset()
    inert, failures = [], list(failures)
    for c in valid:
        if c.name not in left_out:
            inert.append(c)
            continue
        entry = left_out[c.name]
        inert.append(dataclasses.replace(c, functions={api: f.left_out() if hasattr(f, "left_out") else f
                                                       for api, f in c.functions.items()},
                                         function_keys={api: f"{k}:left-out" for api, k in c.function_keys.items()}))
        if "bisecting" not in entry:
            failures.append(LoadFailure(file=str(c.path), name=c.name, error=(
                f"{c.path}: left out after training iteration {entry['after_iteration']}: {entry['reason']}")))
    return inert, failures, frozenset(left_out)


def _batch_fits(config: Settings, envs_per_candidate: int) -> bool:
    """Whether PPO's minibatches divide a group's batch at `envs_per_candidate` envs (off-policy batches are
    sampled from the replay: any size fits)."""
    if not hasattr(config, "num_minibatches"):
        return True
    batch = envs_per_candidate * config.horizon_length
    return batch % minibatch_size(config, batch) == 0


def _physics(settings: EvalSettings) -> str:
    """The run's physics engine: the one asked for, else JAX."""
    return settings.physics or "jax"


def _write_run_records(run_dir, plan: Plan, valid) -> None:
    """config.json (the settings as resolved: the fitness's and the physics engine's names, the iterations, the
    algorithm's settings), the candidates' sources and the algorithm's settings file."""
    settings, task, fitness_name, config = plan.settings, plan.task, plan.fitness_name, plan.config
    resolved = dataclasses.replace(settings, task=task.key, fitness=fitness_name, physics=_physics(settings),
                                   train_iterations=config.max_epochs)
    run_dir.write_config({**resolved.to_config(), settings.algo: dataclasses.asdict(config),
                          "candidates": [c.name for c in valid], "command": sys.argv, "versions": _versions()})
    run_dir.write_candidates(valid)
    run_dir.write_algorithm_config(config, settings.algo)
