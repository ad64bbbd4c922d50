"""The training driver: trains a run's candidates rung by rung (one rung under the flat schedule, see
`envcoder.runs.schedule`), records every iteration, writes checkpoints, then evaluates the last rung's policies and
ranks every candidate.

The loop keeps the device busy: it dispatches iteration k+1 before it reads iteration k's metrics (JAX runs them in
order), and the records are written by a background thread. The train state is read back only at checkpoints,
before the next dispatch (the iteration donates its input state on the GPU).

    driver = TrainingDriver(job, run_dir, console, resume, validation_s)
    results = driver.run()           # RunResults; results.json, the report and the records are written
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
from typing import Sequence

import jax
import numpy as np
from rich.console import Console

from envcoder.candidates.own_control import own_control
from envcoder.compile_cache import CompileMeter
from envcoder.runs.background import (BackgroundWriter, DeferredInterrupt, progress_text, steps_rate,
                                      training_progress)
from envcoder.runs.checkpoint import checkpoint_due, has_train_state, load_train_state, read_progress, write_checkpoint
from envcoder.runs.directory import RunDirectory, write_json
from envcoder.runs.job import DriverState, Job
from envcoder.runs.memory import free_device_bytes, peak_device_bytes
from envcoder.runs.pbt import Population
from envcoder.runs.loggers import TensorBoardLog, WandbLog
from envcoder.runs.report import write_report
from envcoder.runs.ranking import best_in_training, learning_auc
from envcoder.runs.results import GroupResult, RunResults, print_results, ranked_results
from envcoder.runs.schedule import RUNG_KEYS, carry_over, recent_means, rung_scores, survivors
from envcoder.runs.watchdog import RunWatch
from envcoder.env.grouping import GroupPlan
from envcoder.text import plural, shown


class TrainingDriver:
    """Trains, records and ranks one run; see the module docstring."""

    def __init__(self, job: Job, run_dir: RunDirectory, console: Console, resume: bool, validation_s: float,
                 restart: Sequence[str] | None = None, until: float | None = None):
        self.job, self.run_dir, self.console = job, run_dir, console
        self.until = until if jax.process_count() == 1 else None  # the processes of a multi-host run may disagree
        self.all_labels = [g.label for g in GroupPlan(job.task, job.candidates, self.settings.seeds).groups]
        self.position = {label: i for i, label in enumerate(self.all_labels)}  # the loggers' rows
        self.resume = resume
        self.resumed = resume and has_train_state(run_dir.checkpoints)  # from a checkpoint (else from the start)
        self.state = DriverState(survivors=[c.name for c in job.candidates])
        if self.resumed:
            saved = read_progress(run_dir.checkpoints)
            self.state.rung, self.state.eliminated = saved.get("rung", 0), saved.get("eliminated", [])
            self.state.survivors = saved.get("survivors", self.state.survivors)
            self.state.next_survivors = saved.get("next_survivors")
        self.validation_s = validation_s
        self.watch = RunWatch(job, run_dir, self.state, restart, resume)  # the stage, the limits, what hung
        self.compile_meter = CompileMeter()  # what the run compiles (timings' "xla")
        self._enter_rung()  # the rung's learner, labels, reported components and env steps per iteration
        self.population = Population.of_run(self.settings, job, self.learner, read_progress(
            run_dir.checkpoints).get("population", []) if self.resumed else [])  # None unless the run asks for it
        self.writer = BackgroundWriter(max_pending=64)  # a checkpoint write may take as long as many iterations
        self.timings, self.tensorboard, self.wandb = {}, None, None
        self.evaluation_compiled = None  # the evaluation, compiling in the background during the last rung
        self.start_time = None  # when `start` began (perf_counter)
        self.checkpointed = None  # the iterations the last checkpoint holds, once training has started
        self.interrupt = None  # Ctrl-C deferred to the next iteration's end while `train` runs
        self.progress = self.bar = None  # the progress display and its bar while `train` runs

    @property
    def settings(self):
        return self.job.settings

    @property
    def config(self):
        return self.job.config

    # ---- the current rung ---------------------------------------------------------------------------

    def _enter_rung(self) -> None:
        """The current rung's learner, with its labels, reported components and env steps per iteration: the one
        place they are set."""
        learner = self.job.make_learner(self.state.survivors, self.job.schedule[self.state.rung].envs_per_candidate)
        self.labels = learner.labels
        # Components are reported only for the candidates that define them.
        self.own_components = {f"reward/{n}": np.array([n in g.candidate.reward_components for g in learner.groups])
                               for n in learner.component_names}
        self.steps_per_iteration = len(learner.labels) * learner.envs_per_candidate * self.config.horizon_length
        self.watch.learner = self.learner = learner

    def _announce(self) -> None:
        learner, settings, schedule = self.learner, self.settings, self.job.schedule
        count = len({g.candidate.name for g in learner.groups})
        kind = learner.devices[0].device_kind
        devices = kind if len(learner.devices) == 1 else f"{len(learner.devices)} × {kind}"
        self.console.print(f"[bold]{self.job.task.name}[/bold]: {plural(count, 'candidate')} × "
                           f"{plural(len(settings.seeds), 'seed')} × "
                           f"{learner.envs_per_candidate} envs = {self.steps_per_iteration // self.config.horizon_length} "
                           f"environments in one process on {devices}, {learner.physics} physics", highlight=False)
        if len(schedule) > 1:
            self.console.print("successive halving: " + "; ".join(
                f"iterations {a}–{r.end - 1}: {plural(r.candidates, 'candidate')} × {r.envs_per_candidate} envs"
                for a, r in zip([0] + [r.end for r in schedule[:-1]], schedule)), highlight=False)

    def start(self):
        """The first train state: initialized (its iteration compiling meanwhile), or resumed from the checkpoint."""
        self._announce()
        start = time.perf_counter()
        state, run_dir = self.state, self.run_dir
        with self.watch.compiling("compiling the initialization and the training iteration"):  # traced here,
            train_state = self.learner.init(prepare_iteration=True)                             # compiled meanwhile
        state.last_fitness, state.best_written = np.full(len(self.labels), np.nan), np.full(len(self.labels), -2)
        if self.resumed:
            host_state, progress = load_train_state(run_dir.checkpoints, self.learner.host_shapes(train_state))
            _check_progress(progress, self.job.iterations, len(self.labels), run_dir.checkpoints)
            train_state = self.learner.to_device(host_state)
            state.first = state.done = progress["iteration"]
            state.last_fitness = np.array(progress["last_fitness"], dtype=np.float64)
            state.reported_divergence = set(progress["reported_divergence"])
            self.console.print(f"resuming {shown(self.settings.out)} after iteration {state.first} of "
                               f"{self.job.iterations}", highlight=False)
        if self.resume:
            run_dir.keep_metrics_before(state.first)
        rung_start = self.job.schedule[state.rung - 1].end if state.rung else 0
        state.history = run_dir.read_metrics(self.labels, rung_start, state.first, RUNG_KEYS)  # resumed: so far
        if self.settings.tensorboard and run_dir.writes:
            self.tensorboard = TensorBoardLog(run_dir.path / "tensorboard", self.all_labels, state.first)
        if self.settings.wandb_project is not None and run_dir.writes:
            self.wandb = WandbLog(run_dir.path, self.all_labels, {k: v for k, v in run_dir.read_config().items()
                                                                  if k != "candidates"}, self.settings.wandb_project)
        self.start_time = start
        self.timings = {"validation_s": self.validation_s, "init_s": time.perf_counter() - start,
                        "resumed_after_iteration": state.first, "physics": self.learner.physics,
                        "devices": len(self.learner.devices), "rungs": []}
        return train_state

    # ---- records ------------------------------------------------------------------------------------

    def checkpoint(self, train_state) -> None:
        """Write the train state, every group's last policy and the best policies that changed, in the
        background. The next dispatch donates `train_state`: it is copied on the device first where the memory
        allows (the device runs on while the copy is read back), else read back now."""
        if self.watch.halving is not None:  # the checkpoint before the hang is where each half of a search restarts
            return
        learner, labels, best_written = self.learner, self.labels, self.state.best_written  # this rung's
        snapshot = learner.snapshot(train_state, free_device_bytes(learner.devices[0]))
        progress = self.state.progress()
        if self.population is not None:
            progress["population"] = list(self.population.lineage)
        host = learner.to_host(train_state) if snapshot is None else None
        if not self.run_dir.writes:
            return
        checkpoints = self.run_dir.checkpoints

        def write():
            write_checkpoint(checkpoints, host if snapshot is None else learner.to_host(snapshot), progress, labels,
                             learner.obs_dims, learner.action_dims, best_written)
        self.writer.submit(write)

    def record(self, iteration: int, metrics: dict, elapsed: float) -> bool:
        """Bookkeeping and records of one iteration's metrics; True when every group is solved or diverged."""
        state, labels, console = self.state, self.labels, self.progress.console
        for key, mask in self.own_components.items():
            metrics[key] = np.where(mask, metrics[key], np.nan)
        for g in np.flatnonzero(metrics["diverged"] > 0):
            if g not in state.reported_divergence:
                state.reported_divergence.add(g)
                console.print(f"[red]diverged[/red] {shown(labels[g])} at iteration {iteration}: non-finite rewards, "
                              "observations, actions or parameters; it stops updating", highlight=False)
        for g in np.flatnonzero(metrics["solved"] > 0):
            if g not in state.reported_solved:
                state.reported_solved.add(g)
                console.print(f"[green]solved[/green] {shown(labels[g])} at iteration {iteration}: task fitness "
                              f"{metrics['task_fitness'][g]:.3f} reached score_to_win {self.config.score_to_win}; "
                              "it keeps that policy and stops updating", highlight=False)
        state.physics_resets += int(np.nansum(metrics["physics_failures"]))  # NaN: a diverged group
        finished = ~np.isnan(metrics["task_fitness"])
        state.last_fitness[finished] = metrics["task_fitness"][finished]
        state.history.append((iteration, {k: metrics[k] for k in RUNG_KEYS}))
        extra = {"env_steps_per_s": self.steps_per_iteration / elapsed}
        if iteration != self.rung_first:
            state.steady_steps += self.steps_per_iteration
            state.steady_s += elapsed
        self.writer.submit(functools.partial(self.run_dir.append_metrics, iteration, labels, metrics, extra))
        rows = [self.position[label] for label in labels]
        for log in (self.tensorboard, self.wandb):
            if log is not None:
                self.writer.submit(functools.partial(log.write, iteration, metrics, extra, rows))
        rate = (f"first iteration {elapsed:.1f} s (compiling)" if iteration == self.rung_first
                else steps_rate(extra["env_steps_per_s"]))
        self.progress.update(self.bar, advance=1, rate=rate,
                             best=progress_text(state, labels, self.job.fitness.higher_is_better))
        return _all_done(metrics["diverged"] > 0, metrics["solved"] > 0)

    # ---- rungs --------------------------------------------------------------------------------------

    def end_rung(self, train_state) -> list[str]:
        """The candidates that go on to the next rung; the others' results (their training episodes' fitness over
        the rung's last iterations) join `eliminated`."""
        state, schedule = self.state, self.job.schedule
        rung_start = schedule[state.rung - 1].end if state.rung else 0
        window = recent_means(state.history, rung_start, state.done)
        score, scores = rung_scores(window, state.last_fitness, [g.candidate.name for g in self.learner.groups])
        keep = survivors(scores, schedule[state.rung + 1].candidates, self.job.fitness.higher_is_better)
        diverged_at, solved_at = self.learner.group_status(train_state)
        for g, group in enumerate(self.learner.groups):
            if group.candidate.name not in keep:
                state.eliminated.append(GroupResult.of(group, (score[g], window["episode_length"][g], window[
                    "shaped_return"][g]), state.last_fitness[g], diverged_at[g], solved_at[g], state.done).to_json())
        dropped = [name for name in scores if name not in keep]
        self.progress.console.print(
            f"rung {state.rung + 1}/{len(schedule)} ends after iteration {state.done - 1}: {len(keep)} candidate(s) "
            f"go on with {schedule[state.rung + 1].envs_per_candidate} envs each; dropped " + ", ".join(
                f"{name} ({scores[name]:.3f})" for name in dropped), highlight=False)
        return keep

    def next_rung(self, train_state):
        """The next rung's train state: the survivors keep what they learned, the freed environments become theirs."""
        state = self.state
        if state.next_survivors is None:  # not reached in practice: the checkpoint that ends a rung records them
            state.next_survivors = self.end_rung(train_state)
        self.writer.close()  # every record of this rung is written (the checkpoint's best_written included)
        self.writer = BackgroundWriter(max_pending=64)
        old_labels, host = self.labels, self.learner.to_host(train_state)
        del train_state
        state.rung, state.survivors, state.next_survivors = state.rung + 1, state.next_survivors, None
        self._enter_rung()
        rows = np.array([old_labels.index(label) for label in self.labels])
        with self.watch.compiling("initializing the next rung and compiling its iteration"):
            fresh = self.learner.to_host(self.learner.init(prepare_iteration=True))
        train_state = self.learner.to_device(carry_over(host, rows, fresh))
        del host, fresh
        state.last_fitness, state.best_written = state.last_fitness[rows], state.best_written[rows]
        moved = {int(before): after for after, before in enumerate(rows)}
        state.reported_divergence = {moved[g] for g in state.reported_divergence if g in moved}
        state.reported_solved = {moved[g] for g in state.reported_solved if g in moved}
        state.history, state.first = [], state.done
        return train_state

    # ---- training -----------------------------------------------------------------------------------

    def train_rung(self, train_state):
        """Train the current rung from `state.first` to its end (or until every group is solved or diverged):
        `(train state, stopped)`."""
        state, learner = self.state, self.learner
        last_rung = state.rung == len(self.job.schedule) - 1
        self.rung_first, rung_end = state.first, self.job.schedule[state.rung].end
        pending = None  # (iteration, metrics on the device) dispatched and not yet read
        arrived = tick = time.perf_counter()
        for iteration in range(state.first, rung_end):
            with (self.watch.compiling("compiling the training iteration") if iteration == state.first else
                  self.watch.running(f"dispatching training iteration {iteration}")):
                train_state, metrics = learner.iteration(train_state)
            self.interrupt.check()
            # Compiled now: the evaluation compiles meanwhile (after training where a device is full).
            if self.evaluation_compiled is None and last_rung and learner.compiles_evaluation_early:
                self.evaluation_compiled = learner.compile_evaluation(train_state)
            for leaf in metrics.values():
                leaf.copy_to_host_async()
            out_of_time = self.until is not None and time.time() >= self.until and iteration + 1 < rung_end
            exploit = self._exploit_due(iteration + 1, rung_end) and not out_of_time
            due = ([pending, (iteration, metrics)] if iteration + 1 == rung_end or exploit or checkpoint_due(
                iteration + 1, self.config) or self.interrupt.requested or out_of_time else [pending])
            stopped = False
            for item in due:
                if item is None:
                    continue
                with self.watch.running(f"training iteration {item[0]}"):
                    host_metrics = jax.device_get(item[1])
                now = time.perf_counter()
                if item[0] == state.first:
                    self.timings["rungs"].append({"rung": state.rung, "candidates": len(state.survivors),
                                                  "envs_per_candidate": learner.envs_per_candidate,
                                                  "first_iteration": state.first, "first_iteration_s": now - tick})
                    if state.first == self.timings["resumed_after_iteration"]:
                        self.timings["first_iteration_s"] = now - tick  # includes compilation
                        self._peak_memory("first_iteration")
                stopped = self.record(item[0], host_metrics, now - arrived)
                arrived, state.done, pending = now, item[0] + 1, None
                if stopped:
                    break  # an iteration dispatched after this one changed nothing (GroupedLearner._conclude)
            if exploit and not stopped and state.done == iteration + 1:
                train_state = self.population.step(train_state, state.done, state.history, state.last_fitness)
            if stopped or state.done == iteration + 1:
                if state.done == rung_end and not last_rung and not stopped:
                    state.next_survivors = self.end_rung(train_state)
                self.watch.past_hang(stopped)
                self.checkpoint(train_state)
                self.checkpointed = state.done
                if self.interrupt.requested:
                    self.progress.console.print(f"Ctrl-C: stopped after training iteration {state.done} of "
                                                f"{self.job.iterations}, checkpointed", highlight=False)
                    raise KeyboardInterrupt
            if stopped or out_of_time:
                return train_state, self._stopped_early(out_of_time and not stopped)
            if state.done != iteration + 1:
                pending = (iteration, metrics)
        return train_state, False

    def _stopped_early(self, out_of_time: bool) -> bool:
        """Training ends before its last iteration: every group is solved or diverged, or the run's time is up."""
        why = "the time given to this run is up" if out_of_time else "every candidate is solved or diverged"
        self.progress.update(self.bar, total=self.state.done)
        self.progress.console.print(f"{why}: stopping after {self.state.done} of {self.job.iterations} training "
                                    "iterations", highlight=False)
        self.timings["stopped_after_iteration"], self.timings["out_of_time"] = self.state.done, out_of_time
        return True

    def _exploit_due(self, done: int, rung_end: int) -> bool:
        """Whether population-based training exploits after `done` iterations (every group's fitness up to them is
        read first)."""
        interval = self.population.settings.interval if self.population is not None else 0
        return interval > 0 and done % interval == 0 and done < rung_end

    def train(self):
        """Every rung; the last rung's train state."""
        self.checkpointed = None  # the iterations the last checkpoint holds, once training has started
        self.interrupt = DeferredInterrupt(lambda: self.checkpointed is not None
                                           and self.state.done > self.checkpointed)
        with self.interrupt:
            train_state = self.start()
        self.interrupt.check()
        self.checkpointed = self.state.first
        try:
            with self.interrupt, training_progress(self.console, self.job.iterations,
                                                   self.state.first) as (self.progress, self.bar):
                diverged_at, solved_at = self.learner.group_status(train_state)
                self.state.reported_solved = set(np.flatnonzero(solved_at >= 0).tolist())
                stopped = _all_done(diverged_at >= 0, solved_at >= 0)  # resumed, stopped
                if stopped:
                    self.timings["stopped_after_iteration"] = self.state.first
                while not stopped:
                    train_state, stopped = self.train_rung(train_state)
                    if stopped or self.state.rung == len(self.job.schedule) - 1:
                        break
                    train_state = self.next_rung(train_state)
                if self.state.steady_s:
                    self.timings["steady_env_steps_per_s"] = self.state.steady_steps / self.state.steady_s
                self.watch.stage = "writing the last checkpoint"
                self.writer.close()  # every record written while training's thread switch interval holds
        finally:
            if sys.exc_info()[0] is None:  # else the stage that failed stays named
                self.watch.stage = "writing the last checkpoint"
            self.writer.close()
            self.run_dir.close()
            if self.tensorboard is not None:
                self.tensorboard.close()
        self._peak_memory("training")
        return train_state

    def _peak_memory(self, stage: str) -> None:
        """Record the most device memory any of the run's devices has held so far (GiB), after `stage`: the
        stages' figures together say which stage raised it (timings' "peak_memory_gib"; none on a CPU)."""
        peak = peak_device_bytes([d for d in self.learner.devices if d.process_index == jax.process_index()])
        if peak is not None:
            self.timings.setdefault("peak_memory_gib", {})[stage] = round(peak / 2**30, 2)

    # ---- the end ------------------------------------------------------------------------------------

    def run(self) -> RunResults:
        """Train, evaluate each policy deterministically, rank, and write the results and the report."""
        train_state = self.train()
        learner, console, fitness = self.learner, self.console, self.job.fitness
        episodes = ("one full episode per environment" if learner.evaluation_envs == learner.envs_per_candidate else
                    f"one full episode in each of {learner.evaluation_envs} of its {learner.envs_per_candidate} environments")
        console.print(f"evaluating each policy deterministically over {episodes}…", highlight=False)
        tick = time.perf_counter()
        with self.watch.compiling("compiling the evaluation"):
            evaluate = learner.evaluate if self.evaluation_compiled is None else self.evaluation_compiled.result()
            evaluate = evaluate.lower(train_state).compile() if evaluate is learner.evaluate else evaluate
        with self.watch.running("the final evaluation"):
            evaluation = jax.device_get(evaluate(train_state))
        self.watch.past_hang(evaluated=True)
        self.timings["evaluation_s"] = time.perf_counter() - tick
        self._peak_memory("evaluation")
        self.watch.stage = "writing the results"
        self.timings["total_s"] = time.perf_counter() - self.start_time
        self.timings["xla"], self.timings["traces"] = self.compile_meter.read(), learner.traces()

        diverged_at, solved_at = learner.group_status(train_state)
        groups = [GroupResult(**row) for row in self.state.eliminated]
        for g, group in enumerate(learner.groups):
            if group.candidate.name in self.job.left_out:  # hung in training: among the failures instead
                continue
            groups.append(GroupResult.of(group, (np.mean(evaluation[k][g]) for k in (
                "task_fitness", "episode_length", "shaped_return")), self.state.last_fitness[g], diverged_at[g],
                solved_at[g]))
        groups.sort(key=lambda row: self.position[f"{row.candidate}#{row.seed}"])  # the run's group order
        curves = self.run_dir.read_group_series("task_fitness")
        higher = self.job.fitness.higher_is_better
        groups = [dataclasses.replace(g, training_auc=learning_auc(curves.get((g.candidate, g.seed), {})),
                                      training_best=best_in_training(curves.get((g.candidate, g.seed), {}), higher))
                  for g in groups]
        training_fitness = functools.partial(self.run_dir.read_series, key="task_fitness")  # {} where none
        results = ranked_results(self.job.task.name, self.job.fitness_name, fitness, self.settings.schedule, groups,
                                 self.job.failures, self.timings, training_fitness, self.settings.rank_by,
                                 own_control([c for c in self.job.candidates if c.name not in self.job.left_out],
                                             self.job.task), self.job.task.max_episode_length)
        print_results(console, results)
        self.run_dir.write_results(results.to_json())
        if self.population is not None and self.run_dir.writes:
            write_json(self.run_dir.path / "population.json", self.population.record(train_state))
        if self.wandb is not None:
            self.wandb.summarize([g.to_json() for g in results.groups])
            self.wandb.close()
        if self.run_dir.writes:
            report = write_report(self.settings.out)
            console.print(f"run directory: {shown(self.settings.out)} (report: {shown(report)})", highlight=False)
        return results


def _all_done(diverged, solved) -> bool:
    """`[G]` booleans: every group solved (score_to_win) or diverged, at least one solved: nothing to train."""
    diverged, solved = (np.asarray(jax.device_get(x)) for x in (diverged, solved))
    return bool(np.all(diverged | solved) and np.any(solved))


def _check_progress(progress, iterations: int, groups: int, folder) -> None:
    """A checkpoint's progress record as this run can take it: an iteration from 0 to the run's `iterations`, a
    fitness per group. One that says iteration 999 or -40 finished a run that trained nothing, or trained 160
    iterations, before."""
    iteration = progress.get("iteration") if isinstance(progress, dict) else None
    fitness = progress.get("last_fitness") if isinstance(progress, dict) else None
    if not isinstance(iteration, int) or isinstance(iteration, bool) or not 0 <= iteration <= iterations:
        raise ValueError(f"{folder}/train_state.npz says it was saved after iteration {iteration!r}, this run has "
                         f"{iterations}: it is damaged or another run's; start the run again with another --out")
    if not isinstance(fitness, list) or len(fitness) != groups or not isinstance(
            progress.get("reported_divergence", []), list):
        raise ValueError(f"{folder}/train_state.npz holds a progress record for other groups than this run's "
                         f"{groups}: it is damaged or another run's; start the run again with another --out")
