"""The main job: load candidates, validate them, train them all in one process, rank by task fitness."""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
import sys
import time
from pathlib import Path
from typing import Sequence

import jax
import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

import envcoder
from envcoder.compile_cache import in_thread
from envcoder.rl.algorithms import trainer_class
from envcoder.rl.config import ALGORITHMS, Settings, load_config_file
from envcoder.runs.background import BackgroundWriter
from envcoder.runs.checkpoint import (has_train_state, load_train_state, read_progress, save_policy,
                                      save_train_state)
from envcoder.runs.directory import RunDirectory
from envcoder.runs.ranking import not_separable_from_best, rank, still_improving, win_probabilities
from envcoder.runs.schedule import RUNG_KEYS, carry_over, recent_means, rungs, survivors
from envcoder.runs.report import write_report
from envcoder.runs.loggers import TensorBoardLog, WandbLog
from envcoder.runs.watchdog import describe_compile, describe_run, guard
from envcoder.search.sandbox import SandboxValidator
from envcoder.shaping.candidate import (CandidateError, LoadFailure, candidate_files, check_name, check_statically,
                                        cross_candidates, expand_sweeps, load_candidate, load_candidates, read_source)
from envcoder.shaping.grouping import GroupPlan
from envcoder.shaping.validate import CandidateSpec
from envcoder.sim import Simulator
from envcoder.tasks import get_task

GIL_SWITCH_INTERVAL_S = 2e-4
"""Python's thread switch interval while training (see `run_evaluation`)."""


class OutOfGPUMemoryError(RuntimeError):
    """The grouped run does not fit in the device's memory; the message says which settings to change."""


class NoValidCandidatesError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class EvalSettings:
    """What `envcoder eval` runs."""

    task: str
    """Task name (see `envcoder tasks`)."""
    functions: Path
    """Directory of candidate `.py` files."""
    out: Path
    """Run directory to create."""
    shaper_types: tuple[str, ...] = ("compute_reward",)
    """Shaping functions taken from the candidate files; the rest come from the task's defaults."""
    envs_per_candidate: int = 256
    """Parallel environments of each (candidate, seed) group."""
    iterations: int | None = None
    """PPO iterations; None takes the resolved config's `max_epochs`."""
    seeds: tuple[int, ...] = (0,)
    """Every candidate is trained once per seed, independently."""
    cross: bool = False
    """Form the product of candidate files across `shaper_types` instead of one candidate per file."""
    algo: str = "ppo"
    """The training algorithm (`envcoder.rl.config.ALGORITHMS`): every candidate is trained with it."""
    schedule: str = "flat"
    """How the iterations are spent (`envcoder.runs.schedule`): "flat" trains every candidate to the end;
    "halving" drops the worse half of the candidates at the end of each rung and gives their environments to
    the survivors."""
    rungs: int | None = None
    """Rungs of the halving schedule (None: 4); fewer where the candidates halve to one sooner, or where there
    are fewer iterations."""
    overrides: dict = dataclasses.field(default_factory=dict)
    """The algorithm's settings that override the task's and `config_file`'s (the `ALGO.NAME=VALUE` overrides)."""
    config_file: Path | None = None
    """A YAML file of the algorithm's settings applied over the task's `tasks/configs/<task>.yaml`."""
    fitness: str | None = None
    """Which of the task's fitness definitions ranks the candidates (None: the task's default)."""
    tensorboard: bool = True
    """Write TensorBoard event files per candidate and seed (`<out>/tensorboard/`)."""
    wandb_project: str | None = None
    """Log to Weights & Biases under this project, one W&B run per candidate and seed (None: off)."""
    physics: str | None = None
    """Physics engine for training and evaluation: "jax" or "warp" (None: "jax"; docs/benchmarks/throughput.md § 2
    and § 3 compare them). Candidates are validated on the JAX engine either way."""
    validation_timeout_s: float = 120.0
    """Wall-clock seconds each step of a candidate's sandboxed validation (loading the file; tracing, compiling or
    running one function) may take."""
    validation_memory_gib: float = 4.0
    """Memory limit of a validation process."""
    compile_timeout_s: float = 1800.0
    """Seconds that tracing and compiling the training iteration (or the initialization, or the evaluation) may
    take before the watchdog ends the run, naming the candidates it suspects."""
    iteration_timeout_s: float = 600.0
    """Seconds one training iteration (and the final evaluation) may run on the device before the watchdog ends
    the run."""
    devices: int | None = None
    """How many devices to shard the groups over (None: every device JAX sees; more than one needs JAX physics).
    Not a setting of the run: a run may be resumed on another number of devices."""


def _versions() -> dict:
    import mujoco
    return {"envcoder": envcoder.__version__, "jax": jax.__version__, "mujoco": mujoco.__version__,
            "python": platform.python_version(), "device": str(jax.devices()[0].device_kind),
            "backend": jax.default_backend()}


def settings_from_run(run: str | Path) -> EvalSettings:
    """The settings an existing run directory was started with (for `--resume`)."""
    config = RunDirectory(run, resume=True).read_config()
    return EvalSettings(
        task=config["task"], functions=Path(config["functions"]), out=Path(run),
        shaper_types=tuple(config["shaper_types"]), envs_per_candidate=config["envs_per_candidate"],
        iterations=config["iterations"], seeds=tuple(config["seeds"]), cross=config["cross"],
        algo=config.get("algo", "ppo"), schedule=config.get("schedule", "flat"), rungs=config.get("rungs"),
        overrides=config["overrides"], fitness=config["fitness"],
        tensorboard=config.get("tensorboard", True),
        wandb_project=config.get("wandb_project"), physics=config.get("physics", "jax"),
        config_file=Path(config["config_file"]) if config["config_file"] else None,
        **{k: config[k] for k in _LIMITS if k in config})


_LIMITS = ("validation_timeout_s", "validation_memory_gib", "compile_timeout_s", "iteration_timeout_s")
"""The time and memory limits of `EvalSettings`, recorded in config.json and kept by --resume."""


def build_candidates(settings: EvalSettings):
    """`(candidates, load failures)`: the files of `settings.functions`, sweeps expanded, crossed if asked,
    loaded in this process without the sandbox (for trusted files, e.g. the benchmarks' bundled ones)."""
    candidates, failures = load_candidates(settings.functions, settings.shaper_types)
    candidates = expand_sweeps(candidates)
    if settings.cross:
        candidates = cross_candidates(candidates, settings.shaper_types)
    return candidates, failures


def sandboxed_candidates(settings: EvalSettings, task, validator: SandboxValidator | None = None,
                         only: set[str] | None = None, console: Console | None = None):
    """`(candidates, specs, failures)` of `settings.functions`, each file validated in the sandbox's worker
    processes before any of its code runs here; sweeps expanded, crossed if asked. `only`: the file stems to
    take (default all). `validator`: one to reuse (its workers stay up; default a new one for this call).

    Files that fail, and sweep variants that fail, are returned as failures with their reasons.
    """
    failures, drafts = [], []
    for path in candidate_files(settings.functions):
        if only is not None and path.stem not in only:
            continue
        try:
            check_name(path.stem, str(path))
            source = read_source(path)
            check_statically(source, str(path), settings.shaper_types)
            drafts.append((path.stem, source, str(path)))
        except CandidateError as err:
            failures.append(LoadFailure(file=str(path), name=path.stem, error=str(err)))
    if drafts:
        if console is not None:
            console.print(f"validating {len(drafts)} candidate file(s) in sandboxed processes…", highlight=False)
        own = validator is None
        workers = min(len(drafts), max(2, min(8, (os.cpu_count() or 2) // 4)))  # each uses several cores
        validator = validator or SandboxValidator(task.name, settings.shaper_types, settings.validation_timeout_s,
                                                  settings.validation_memory_gib, workers=workers)
        try:
            verdicts = validator.validate(drafts)
        finally:
            if own:
                validator.close()
    else:
        verdicts = []
    specs: dict[str, CandidateSpec] = {}
    loaded = []
    for (name, source, file), verdict in zip(drafts, verdicts):
        failures += [LoadFailure(file=file, name=variant, error=error) for variant, error in verdict.errors.items()]
        if verdict.specs:
            try:  # the sandbox ran this code already: loading it here is safe
                loaded.append(load_candidate(Path(file), settings.shaper_types, source=source))
            except CandidateError as err:
                failures.append(LoadFailure(file=file, name=name, error=str(err)))
                continue
            specs.update(verdict.specs)
    candidates = [c for c in expand_sweeps(loaded) if c.name in specs]
    if settings.cross and candidates:
        candidates = cross_candidates(candidates, settings.shaper_types)
        specs = {c.name: _crossed_spec(c, specs) for c in candidates}
    return candidates, {c.name: specs[c.name] for c in candidates}, failures


def _crossed_spec(candidate, specs: dict[str, CandidateSpec]) -> CandidateSpec:
    """A crossed candidate's sizes, from the files that provide its functions (each validated on its own: the
    shaping functions depend on the task's state only, never on each other)."""
    def of(api):
        return specs[candidate.providers.get(api, next(iter(candidate.providers.values())))]
    critic = "compute_critic_observation"
    return CandidateSpec(obs_dim=of("compute_observation").obs_dim, action_dim=of("compute_torque").action_dim,
                         reward_components=of("compute_reward").reward_components,
                         critic_obs_dim=of(critic).critic_obs_dim if critic in candidate.functions else None)


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


def run_evaluation(settings: EvalSettings, console: Console | None = None, resume: bool = False,
                   validator: SandboxValidator | None = None) -> dict:
    """Run the whole job and return what `results.json` holds. With `resume`, continue the run in
    `settings.out` from its last checkpoint (see `settings_from_run`). `validator`: a sandbox to validate the
    candidates with (default: a new one for this run)."""
    lead = jax.process_index() == 0  # of a multi-host run, only process 0 writes and prints
    console = console or Console(quiet=not lead)
    task = get_task(settings.task)
    fitness_name, fitness = task.get_fitness(settings.fitness)
    task.check_algorithm(settings.algo)
    layers = [(str(task.config_file), task.settings(settings.algo))]
    if settings.config_file is not None:
        layers.append((str(settings.config_file), load_config_file(settings.config_file, settings.algo)))
    layers.append(("command-line override", settings.overrides))
    if settings.iterations is not None:
        layers.append(("--iterations", {"max_epochs": settings.iterations}))
    config = ALGORITHMS[settings.algo].resolve(layers)
    settings = dataclasses.replace(settings, iterations=config.max_epochs)
    candidate_files(settings.functions)  # a missing or empty directory is reported before anything else
    run_dir = RunDirectory(settings.out, resume, writes=lead)  # fails now, before any compiling, if --out is taken
    # The device's setup (the GPU backend, the model on it: ~1 s on an H100) needs no verdict: it runs while the
    # sandbox validates, in worker processes.
    simulator = in_thread(lambda: Simulator(task.model_file, task.substeps), "envcoder-simulator")
    tick = time.perf_counter()
    valid, specs, failures = sandboxed_candidates(settings, task, validator, console=console)
    validation_s = time.perf_counter() - tick
    simulator = simulator.result()
    for failure in failures:
        console.print(f"[yellow]left out[/yellow] {failure.error}", highlight=False)
    run_dir.write_failures(failures)
    if not valid:
        raise NoValidCandidatesError(f"no valid candidates in {settings.functions} "
                                     f"({len(failures)} failed validation; see the messages above)")

    if resume:
        _check_same_candidates(run_dir, valid)
    else:
        _write_run_records(run_dir, settings, task, fitness_name, config, valid)

    schedule = rungs(settings.schedule, len(valid), settings.envs_per_candidate, settings.iterations,
                     settings.rungs, functools.partial(_batch_fits, config))
    physics = _physics(settings)

    def make_trainer(names, envs_per_candidate: int):
        """The trainer of the candidates `names` (a rung's survivors), each group with `envs_per_candidate` envs."""
        return trainer_class(settings.algo)(task, [c for c in valid if c.name in names], specs, config,
                                            envs_per_candidate, settings.seeds,
                                            simulator if physics == simulator.physics else None,
                                            fitness=fitness_name, physics=physics, devices=settings.devices)
    try:
        return _train_and_rank(settings, task, fitness_name, fitness, config, make_trainer, schedule, valid, run_dir,
                               failures, console, resume, validation_s)
    except jax.errors.JaxRuntimeError as err:
        if "RESOURCE_EXHAUSTED" not in str(err):
            raise
        raise OutOfGPUMemoryError(_out_of_memory_message(err, len(valid) * len(settings.seeds), settings,
                                                         run_dir)) from err


def _batch_fits(config: Settings, envs_per_candidate: int) -> bool:
    """Whether PPO's minibatches divide a group's batch at `envs_per_candidate` envs (off-policy batches are
    sampled from the replay: any size fits)."""
    if not hasattr(config, "num_minibatches"):
        return True
    batch = envs_per_candidate * config.horizon_length
    minibatch = config.minibatch_size or max(batch // config.num_minibatches, 1)
    return batch % minibatch == 0


def _out_of_memory_message(err, groups: int, settings: EvalSettings, run_dir: RunDirectory) -> str:
    """What to do when the device runs out of memory: the sizes involved and the settings that matter."""
    reason = str(err).split("\n")[0].removeprefix("RESOURCE_EXHAUSTED: ")
    limit = (jax.devices()[0].memory_stats() or {}).get("bytes_limit")
    limit_text = f" of the {limit / 2**30:.1f} GiB JAX may use" if limit else ""
    hints = ["train fewer environments at once: a smaller --envs-per-candidate, fewer --seeds, or the candidates "
             "split over several runs"]
    try:
        fraction = float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75"))
    except ValueError:
        fraction = 0.0
    if fraction < 0.95:
        hints.append("let JAX use more of the GPU: XLA_PYTHON_CLIENT_MEM_FRACTION=0.95 (JAX's default is 0.75)")
    if os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").lower() in ("false", "0"):
        hints.append("unset XLA_PYTHON_CLIENT_PREALLOCATE=false: growing the pool piecemeal fragments it, and one "
                     "iteration needs its temporaries in one block (2048 Anymal candidates × 256 envs failed that "
                     "way at 49 GiB of need on an 80 GB H100)")
    return (f"out of GPU memory{limit_text} training {groups} policies × {settings.envs_per_candidate} envs "
            f"({groups * settings.envs_per_candidate} environments): {reason}. To fix: " + "; or ".join(hints) +
            f". {run_dir.path} keeps its records and last checkpoint: after changing only XLA_PYTHON_CLIENT_* "
            f"settings, --resume continues it.")


def _physics(settings: EvalSettings) -> str:
    """The run's physics engine: the one asked for, else JAX."""
    return settings.physics or "jax"


def _write_run_records(run_dir, settings, task, fitness_name, config, valid) -> None:
    run_dir.write_config({
        "task": task.name, "functions": str(settings.functions), "shaper_types": list(settings.shaper_types),
        "envs_per_candidate": settings.envs_per_candidate, "iterations": settings.iterations,
        "seeds": list(settings.seeds), "cross": settings.cross, "fitness": fitness_name,
        "config_file": str(settings.config_file) if settings.config_file else None, "algo": settings.algo,
        "schedule": settings.schedule, "rungs": settings.rungs,
        "overrides": settings.overrides,
        "tensorboard": settings.tensorboard, "wandb_project": settings.wandb_project,
        "physics": _physics(settings), **{k: getattr(settings, k) for k in _LIMITS},
        settings.algo: dataclasses.asdict(config),
        "candidates": [c.name for c in valid],
        "command": sys.argv, "versions": _versions(),
    })
    run_dir.write_candidates(valid)
    run_dir.write_algorithm_config(config, settings.algo)


def _train_and_rank(settings, task, fitness_name, fitness, config, make_trainer, schedule, valid, run_dir, failures,
                    console, resume, validation_s: float) -> dict:
    """Train rung by rung (one rung under the flat schedule, see `envcoder.runs.schedule`), recording as it goes,
    then evaluate the last rung's policies and rank every candidate.

    The loop keeps the device busy: it dispatches iteration k+1 before it reads iteration k's metrics (JAX
    runs them in order), and the records are written by a background thread. The train state is read back
    only at checkpoints, before the next dispatch (the iteration donates its input state on the GPU).
    """
    best_of = np.nanargmax if fitness.higher_is_better else np.nanargmin
    all_labels = [g.label for g in GroupPlan(task, valid, settings.seeds).groups]  # the loggers' rows
    position = {label: i for i, label in enumerate(all_labels)}
    rung, survivors_now, eliminated, next_survivors = 0, [c.name for c in valid], [], None
    if resume and has_train_state(run_dir.checkpoints):
        saved = read_progress(run_dir.checkpoints)
        rung, eliminated = saved.get("rung", 0), saved.get("eliminated", [])
        survivors_now, next_survivors = saved.get("survivors", survivors_now), saved.get("next_survivors")
    trainer = make_trainer(survivors_now, schedule[rung].envs_per_candidate)

    def describe_rung(trainer):
        """The rung's labels, the reward components each of its groups reports, its env steps per iteration."""
        own = {f"reward/{n}": np.array([n in spec.reward_components for spec in trainer.specs])
               for n in trainer.component_names}  # components are reported only for the candidates that define them
        return trainer.labels, own, len(trainer.labels) * trainer.num_envs * config.horizon_length
    labels, own_components, steps_per_iteration = describe_rung(trainer)
    reported_divergence = set()
    count = len({g.candidate.name for g in trainer.groups})
    console.print(f"[bold]{task.name}[/bold]: {count} candidates × {len(settings.seeds)} seed(s) × "
                  f"{trainer.num_envs} envs = {steps_per_iteration // config.horizon_length} environments "
                  f"in one process on {_devices_text(trainer.devices)}, {trainer.physics} physics", highlight=False)
    if len(schedule) > 1:
        console.print("successive halving: " + "; ".join(
            f"iterations {a}–{r.end - 1}: {r.candidates} candidate(s) × {r.envs_per_candidate} envs"
            for a, r in zip([0] + [r.end for r in schedule[:-1]], schedule)), highlight=False)

    start = time.perf_counter()
    candidates = list({g.candidate.name: g.candidate for g in trainer.groups}.values())

    def compiling(what: str):  # the watchdog ends the process with a clear message when a compile hangs
        return guard(settings.compile_timeout_s, describe_compile(what, settings.compile_timeout_s, candidates,
                                                                  "--compile-timeout"))

    def running(what: str):  # ... or an iteration
        return guard(settings.iteration_timeout_s, describe_run(what, settings.iteration_timeout_s, candidates,
                                                                "--iteration-timeout"))

    with compiling("compiling the initialization and the training iteration"):  # traced here, compiled meanwhile
        train_state = trainer.init(prepare_iteration=True)
    last_fitness = np.full(len(labels), np.nan)
    first = 0
    if resume and has_train_state(run_dir.checkpoints):
        host_state, progress = load_train_state(run_dir.checkpoints, trainer.host_shapes(train_state))
        train_state = trainer.to_device(host_state)
        first = progress["iteration"]
        last_fitness = np.array(progress["last_fitness"], dtype=np.float64)
        reported_divergence = set(progress["reported_divergence"])
        console.print(f"resuming {settings.out} after iteration {first} of {settings.iterations}", highlight=False)
    if resume:
        run_dir.keep_metrics_before(first)
    rung_start = schedule[rung - 1].end if rung else 0
    history = run_dir.read_metrics(labels, rung_start, first, RUNG_KEYS)  # this rung's so far, when resumed
    tensorboard = None
    if settings.tensorboard and run_dir.writes:
        tensorboard = TensorBoardLog(run_dir.path / "tensorboard", all_labels, first)
    wandb = None
    if settings.wandb_project is not None and run_dir.writes:
        wandb = WandbLog(run_dir.path, all_labels, {k: v for k, v in run_dir.read_config().items()
                                                    if k != "candidates"}, settings.wandb_project)
    timings = {"validation_s": validation_s, "init_s": time.perf_counter() - start, "resumed_after_iteration": first,
               "physics": trainer.physics, "devices": len(trainer.devices), "rungs": []}
    writer = BackgroundWriter(max_pending=64)  # a checkpoint write may take as long as many iterations
    best_written = np.full(len(labels), -2)  # the best policy's iteration last written per group
    steady = [0, 0.0]  # env steps and seconds of the iterations read after each rung's first (compiled) one

    def checkpoint(done: int, state) -> None:
        """Write the train state, every group's last policy and the best policies that changed, in the
        background. The next dispatch donates `state`: it is copied on the device first where the memory
        allows (the device runs on while the copy is read back), else read back now."""
        snapshot = trainer.snapshot(state)
        progress = {"iteration": done, "last_fitness": [float(x) for x in last_fitness],
                    "reported_divergence": sorted(int(g) for g in reported_divergence),
                    "rung": rung, "survivors": list(survivors_now), "eliminated": list(eliminated),
                    "next_survivors": next_survivors}
        if snapshot is None:
            state = trainer.to_host(state)
        if not run_dir.writes:
            return
        trainer_, labels_, best_written_ = trainer, labels, best_written  # this rung's, whenever the job runs

        def write():
            nonlocal state
            if snapshot is not None:
                state = trainer_.to_host(snapshot)
            best = state.best
            changed = np.flatnonzero((best.iteration >= 0) & (best.iteration != best_written_))
            best_written_[changed] = best.iteration[changed]
            changed = set(changed.tolist())
            save_train_state(run_dir.checkpoints, state, progress)
            for g, label in enumerate(labels_):
                group = functools.partial(_row, g)
                save_policy(run_dir.checkpoints / label / "last.npz", group(state.params), group(state.obs_rms),
                            int(trainer_.obs_dims[g]), int(trainer_.action_dims[g]), done, float(progress[
                                "last_fitness"][g]))
                if g in changed:
                    save_policy(run_dir.checkpoints / label / "best.npz", group(best.params), group(best.obs_rms),
                                int(trainer_.obs_dims[g]), int(trainer_.action_dims[g]), int(best.iteration[g]),
                                float(best.fitness[g]))
        writer.submit(write)

    def record(iteration: int, metrics, elapsed: float) -> bool:
        """Bookkeeping and records of one iteration's metrics; True when every group is solved or diverged."""
        for key, mask in own_components.items():
            metrics[key] = np.where(mask, metrics[key], np.nan)
        for g in np.flatnonzero(metrics["diverged"] > 0):
            if g not in reported_divergence:
                reported_divergence.add(g)
                progress.console.print(f"[red]diverged[/red] {labels[g]} at iteration {iteration}: non-finite "
                                       "rewards, observations, actions or parameters; it stops updating",
                                       highlight=False)
        for g in np.flatnonzero(metrics["solved"] > 0):
            if g not in reported_solved:
                reported_solved.add(g)
                progress.console.print(
                    f"[green]solved[/green] {labels[g]} at iteration {iteration}: task fitness "
                    f"{metrics['task_fitness'][g]:.3f} reached score_to_win {config.score_to_win}; "
                    "it keeps that policy and stops updating", highlight=False)
        finished = ~np.isnan(metrics["task_fitness"])
        last_fitness[finished] = metrics["task_fitness"][finished]
        history.append((iteration, {k: metrics[k] for k in RUNG_KEYS}))
        extra = {"env_steps_per_s": steps_per_iteration / elapsed}
        if iteration != rung_first:
            steady[0] += steps_per_iteration
            steady[1] += elapsed
        writer.submit(functools.partial(run_dir.append_metrics, iteration, labels, metrics, extra))
        rows = [position[label] for label in labels]
        for log in (tensorboard, wandb):
            if log is not None:
                writer.submit(functools.partial(log.write, iteration, metrics, extra, rows))
        best = "" if np.all(np.isnan(last_fitness)) else (
            f"best {labels[int(best_of(last_fitness))].split('#')[0]} {last_fitness[best_of(last_fitness)]:.3f}")
        failures_so_far[0] += int(np.sum(metrics["physics_failures"]))
        if reported_solved:
            best += f" | {len(reported_solved)}/{len(labels)} solved"
        if reported_divergence or failures_so_far[0]:
            best += f" | {len(reported_divergence)} diverged, {failures_so_far[0]} physics resets"
        progress.update(bar, advance=1, rate=f"{extra['env_steps_per_s'] / 1e3:,.0f}k steps/s", best=best)
        return _all_done(metrics["diverged"] > 0, metrics["solved"] > 0)

    def end_rung(done: int, state) -> list[str]:
        """The candidates that go on to the next rung; the others' results (their training episodes' fitness over
        the rung's last iterations) join `eliminated`."""
        window = recent_means(history, rung_start, done)
        score = np.where(np.isnan(window["task_fitness"]), last_fitness, window["task_fitness"])
        per_candidate = {}
        for g, group in enumerate(trainer.groups):
            per_candidate.setdefault(group.candidate.name, []).append(score[g])
        scores = {name: float(np.nanmean(v)) if np.any(np.isfinite(v)) else float("nan")
                  for name, v in per_candidate.items()}
        keep = survivors(scores, schedule[rung + 1].candidates, fitness.higher_is_better)
        diverged_at, solved_at = trainer.group_status(state)
        for g, group in enumerate(trainer.groups):
            if group.candidate.name not in keep:
                eliminated.append({
                    "candidate": group.candidate.name, "seed": group.seed, "task_fitness": float(score[g]),
                    "shaped_return": float(window["shaped_return"][g]),
                    "episode_length": float(window["episode_length"][g]),
                    "training_task_fitness": float(last_fitness[g]),
                    "diverged_at_iteration": int(diverged_at[g]) if diverged_at[g] >= 0 else None,
                    "solved_at_iteration": int(solved_at[g]) if solved_at[g] >= 0 else None,
                    "eliminated_at_iteration": done, "params": dict(group.candidate.params)})
        dropped = [name for name in scores if name not in keep]
        progress.console.print(
            f"rung {rung + 1}/{len(schedule)} ends after iteration {done - 1}: {len(keep)} candidate(s) go on with "
            f"{schedule[rung + 1].envs_per_candidate} envs each; dropped " + ", ".join(
                f"{name} ({scores[name]:.3f})" for name in dropped), highlight=False)
        return keep

    columns = (TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
               TextColumn("{task.fields[best]}"))
    # While the device trains, other threads run Python: the evaluation's tracing (seconds, cold) and the background
    # writer. Python hands the GIL over every 5 ms by default, and the training loop waits for it at each of its
    # many short calls, so the device starved for ~1 s per iteration while the evaluation traced (H200, cold:
    # wall/device 0.82 against 0.97 with 0.2 ms; docs/benchmarks/throughput.md).
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    try:
        with Progress(*columns, console=console, transient=False) as progress:
            bar = progress.add_task("training", total=settings.iterations, completed=first, rate="compiling…",
                                    best="")
            failures_so_far = [0]
            diverged_at, solved_at = trainer.group_status(train_state)
            reported_solved = set(np.flatnonzero(solved_at >= 0).tolist())
            done = first
            stopped = _all_done(diverged_at >= 0, solved_at >= 0)  # resumed, stopped
            if stopped:
                timings["stopped_after_iteration"] = first
            evaluation_compiled = None
            while not stopped:
                last_rung = rung == len(schedule) - 1
                rung_first, rung_end = first, schedule[rung].end
                pending = None  # (iteration, metrics on the device) dispatched and not yet read
                arrived = tick = time.perf_counter()
                for iteration in range(first, rung_end):
                    with compiling("compiling the training iteration") if iteration == first else running(
                            f"dispatching training iteration {iteration}"):
                        train_state, metrics = trainer.iteration(train_state)
                    if evaluation_compiled is None and last_rung:  # compiled now: the evaluation compiles meanwhile
                        evaluation_compiled = trainer.compile_evaluation(train_state)
                    for leaf in metrics.values():
                        leaf.copy_to_host_async()
                    last = iteration + 1 == rung_end
                    due = ([pending, (iteration, metrics)] if last or _checkpoint_due(iteration + 1, settings, config)
                           else [pending])
                    for item in due:
                        if item is None:
                            continue
                        with running(f"training iteration {item[0]}"):
                            host_metrics = jax.device_get(item[1])
                        now = time.perf_counter()
                        if item[0] == first:
                            timings["rungs"].append({"rung": rung, "candidates": len(survivors_now),
                                                     "envs_per_candidate": trainer.num_envs, "first_iteration": first,
                                                     "first_iteration_s": now - tick})
                            if first == timings["resumed_after_iteration"]:
                                timings["first_iteration_s"] = now - tick  # includes compilation
                        stopped = record(item[0], host_metrics, now - arrived)
                        arrived, done, pending = now, item[0] + 1, None
                        if stopped:
                            break  # an iteration dispatched after this one changed nothing (GroupedTrainer._conclude)
                    if stopped or done == iteration + 1:
                        if done == rung_end and not last_rung and not stopped:
                            next_survivors = end_rung(done, train_state)
                        checkpoint(done, train_state)
                    if stopped:
                        progress.update(bar, total=done)
                        progress.console.print(f"every candidate is solved or diverged: stopping after iteration "
                                               f"{done - 1}", highlight=False)
                        timings["stopped_after_iteration"] = done
                        break
                    if done != iteration + 1:
                        pending = (iteration, metrics)
                if stopped or last_rung:
                    break
                # The next rung: the survivors keep what they learned, the freed environments become theirs.
                if next_survivors is None:  # not reached in practice: the checkpoint that ends a rung records them
                    next_survivors = end_rung(done, train_state)
                writer.close()  # every record of this rung is written (the checkpoint's best_written included)
                writer = BackgroundWriter(max_pending=64)
                old_labels, host = labels, trainer.to_host(train_state)
                del train_state
                rung, survivors_now, next_survivors, rung_start = rung + 1, next_survivors, None, done
                trainer = make_trainer(survivors_now, schedule[rung].envs_per_candidate)
                labels, own_components, steps_per_iteration = describe_rung(trainer)
                candidates = list({g.candidate.name: g.candidate for g in trainer.groups}.values())
                rows = np.array([old_labels.index(label) for label in labels])
                with compiling("initializing the next rung and compiling its iteration"):
                    fresh = trainer.to_host(trainer.init(prepare_iteration=True))
                train_state = trainer.to_device(carry_over(host, rows, fresh))
                del host, fresh
                last_fitness, best_written = last_fitness[rows], best_written[rows]
                moved = {int(before): after for after, before in enumerate(rows)}
                reported_divergence = {moved[g] for g in reported_divergence if g in moved}
                reported_solved = {moved[g] for g in reported_solved if g in moved}
                history, first = [], done
            if steady[1]:
                timings["steady_env_steps_per_s"] = steady[0] / steady[1]
    finally:
        sys.setswitchinterval(switch_interval)
        writer.close()
        run_dir.close()
        if tensorboard is not None:
            tensorboard.close()

    console.print("evaluating each policy deterministically over one full episode per environment…")
    tick = time.perf_counter()
    with compiling("compiling the evaluation"):
        evaluate = trainer.evaluate if evaluation_compiled is None else evaluation_compiled.result()
        evaluate = evaluate.lower(train_state).compile() if evaluate is trainer.evaluate else evaluate
    with running("the final evaluation"):
        evaluation = jax.device_get(evaluate(train_state))
    timings["evaluation_s"] = time.perf_counter() - tick
    timings["total_s"] = time.perf_counter() - start

    diverged_at, solved_at = trainer.group_status(train_state)
    per_group = list(eliminated)
    for g, group in enumerate(trainer.groups):
        per_group.append({"candidate": group.candidate.name, "seed": group.seed,
                          **{k: float(np.mean(v[g])) for k, v in evaluation.items()},
                          "training_task_fitness": float(last_fitness[g]),
                          "diverged_at_iteration": int(diverged_at[g]) if diverged_at[g] >= 0 else None,
                          "solved_at_iteration": int(solved_at[g]) if solved_at[g] >= 0 else None,
                          "params": dict(group.candidate.params)})
    per_group.sort(key=lambda row: position[f"{row['candidate']}#{row['seed']}"])  # the run's group order
    per_candidate: dict[str, list[dict]] = {}
    for row in per_group:
        per_candidate.setdefault(row["candidate"], []).append(row)
    ranking = rank(per_candidate, fitness.higher_is_better)
    results = {
        "task": task.name, "fitness": fitness_name, "fitness_doc": fitness.doc,
        "higher_is_better": fitness.higher_is_better, "schedule": settings.schedule,
        "ranking": [dataclasses.asdict(r) for r in ranking],
        "groups": per_group, "failures": [dataclasses.asdict(f) for f in failures], "timings": timings,
    }
    trust = _trust(ranking, per_candidate, run_dir, fitness.higher_is_better)
    results.update(trust)
    console.print(ranking_table(ranking, f"{fitness_name}: {fitness.doc}", trust["win_probability"]))
    tied = not_separable_from_best(ranking, fitness.higher_is_better)
    if tied:
        console.print(f"not separable at 95%: {ranking[0].name} does not beat {', '.join(tied)} at 95% over "
                      "these seeds; more seeds would tell them apart", highlight=False)
    results["not_separable_from_best"] = tied
    improving = trust["best_still_improving"]
    if improving and improving["improving"]:
        console.print(f"[yellow]still improving[/yellow]: the best candidate's training fitness went from "
                      f"{improving['earlier_mean']:.3f} to {improving['later_mean']:.3f} over iterations "
                      f"{improving['from_iteration']}–{improving['to_iteration']}; longer training may change the "
                      "ranking (more --iterations)", highlight=False)
    run_dir.write_results(results)
    if wandb is not None:
        wandb.summarize(per_group)
        wandb.close()
    if not run_dir.writes:
        return results
    report = write_report(settings.out)
    console.print(f"run directory: {settings.out} (report: {report})", highlight=False)
    return results


def _devices_text(devices) -> str:
    kind = devices[0].device_kind
    return kind if len(devices) == 1 else f"{len(devices)} × {kind}"


def _row(g: int, tree):
    """Group `g`'s slice of a pytree stacked over groups."""
    return jax.tree.map(lambda x: x[g], tree)


def _checkpoint_due(done: int, settings: EvalSettings, config: Settings) -> bool:
    """A checkpoint follows the iteration that makes `done` iterations: every `save_frequency`, and the last."""
    return done == settings.iterations or bool(config.save_frequency and done % config.save_frequency == 0)


def _all_done(diverged, solved) -> bool:
    """`[G]` booleans: every group solved (score_to_win) or diverged, at least one solved: nothing to train."""
    diverged, solved = (np.asarray(jax.device_get(x)) for x in (diverged, solved))
    return bool(np.all(diverged | solved) and np.any(solved))


def _trust(ranking, per_candidate: dict[str, list[dict]], run_dir: RunDirectory, higher_is_better: bool) -> dict:
    """How far to trust the ranking: per pair of candidates that trained equally long, the probability that one
    beats the other (from their seeds); and whether the best candidate was still improving when training ended
    (from its training-episode fitness in metrics.csv)."""
    rungs_of = {r.name: r.eliminated_at for r in ranking}
    probability = win_probabilities({name: [row["task_fitness"] for row in rows]
                                     for name, rows in per_candidate.items()}, higher_is_better)
    probability = {a: {b: p for b, p in row.items() if rungs_of[a] == rungs_of[b]} for a, row in probability.items()}
    improving = None
    if ranking and (run_dir.path / "metrics.csv").exists():
        series = run_dir.read_series(ranking[0].name, "task_fitness")
        improving = still_improving(list(series), list(series.values()), higher_is_better)
    return {"win_probability": probability, "best_still_improving": improving}


def ranking_table(ranking: Sequence, fitness_doc: str, win_probability: dict | None = None) -> Table:
    """The ranking as a table; with `win_probability` (`_trust`'s), a column of the probability that each
    candidate beats the next one down."""
    table = Table(title=f"Ranking by task fitness ({fitness_doc})", title_justify="left")
    columns = ["rank", "candidate", "task fitness", "95% CI", "seeds", "shaped return", "episode length"]
    if win_probability is not None:
        columns.append("P(beats next)")
    if any(r.eliminated_at is not None for r in ranking):
        columns.append("dropped at")
    for column in columns:
        table.add_column(column, justify="left" if column == "candidate" else "right", no_wrap=column == "candidate")
    for i, r in enumerate(ranking, 1):
        ci = f"[{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.seeds > 1 else "-"
        row = [str(i), r.name, f"{r.fitness_mean:.3f}", ci, str(r.seeds), f"{r.shaped_return:.2f}",
               f"{r.episode_length:.0f}"]
        if win_probability is not None:
            following = ranking[i].name if i < len(ranking) else None
            p = win_probability.get(r.name, {}).get(following)
            row.append("-" if p is None else f"{p:.2f}")
        if "dropped at" in columns:  # the iteration where a halving schedule stopped training it
            row.append("-" if r.eliminated_at is None else str(r.eliminated_at))
        table.add_row(*row)
    return table
