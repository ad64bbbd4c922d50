"""The automatic shaping loop (`envcoder auto`): propose, validate, evaluate all at once, reflect, repeat.

Every iteration:
1. the proposer writes `candidates_per_iteration` candidates (in parallel for LLMs), each from the task
   description and, after the first iteration, the reflection on the last one;
2. each is checked statically, then validated in a sandboxed process (`SandboxValidator`) as the files it is
   trained as (a sweep: one file per variant); one that fails is sent back with its error and replaced, up to
   `retries` times;
3. the valid ones are trained and ranked together in one process (`run_evaluation`, one run directory per
   iteration), which takes their verdicts from the validator instead of checking them again;
4. the reflection for the next iteration is built from their task fitness, the statistics of every reward
   component over training, the failures and the best candidate so far.
At the end the best finds, the best starting file and the task's own default shaping (`task_default`) are
re-evaluated together, adding rounds of seeds until the best is separable from the others (or a seed budget is
spent); the summary says whether the best beats the task default, and by how much.

The run directory (`out/`):

    auto.json                    the settings (what --resume reads)
    system_prompt.md             what every LLM request starts with
    llm/itKK_sSS_aA.json         every proposer call: messages, response, tokens, estimated cost, error
    iter_KK/drafts.json          every extracted candidate with its validation verdict
    iter_KK/candidates/*.py      the valid candidates of the iteration
    iter_KK/eval/                their evaluation run directory (results.json, metrics.csv, ...)
    iter_KK/iteration.json       the iteration's table, failures and the reflection it produced
    iter_KK/sizes.json           its copies where --budget made them fewer (AutoSettings.next_iteration)
    iter_KK/rungs_skipped.json   its halving rungs that would have ended past --budget
    final/                       the final evaluation (final/eval/seed_rounds/: its rounds of added seeds)
    final/sizes.json             its finds and seeds where --budget made them smaller (AutoSettings.final_within_budget)
    best.py, summary.json, summary.md

Resuming reads what exists: recorded proposer calls are never repeated, finished validations and
evaluations are kept, and an evaluation that was cut off goes on from its last checkpoint. A population search's
iteration is `envcoder.search.population_run`'s, the final evaluation and the summary `envcoder.search.final`'s.
"""

from __future__ import annotations

import concurrent.futures
import math
import re
import shutil
import time
from pathlib import Path
from typing import Sequence

from rich.console import Console

from envcoder.candidates import isaac, read_source
from envcoder.candidates.sandbox import JailedError, SandboxValidator
from envcoder.candidates.variants import freeze_sweep
from envcoder.runs.directory import read_json, writable_directory, write_json
from envcoder.runs.eval_settings import EvalSettings, settings_from_run
from envcoder.runs.evaluation import NoValidCandidatesError, check_sizes, run_evaluation
from envcoder.runs.ranking import rank
from envcoder.runs.results import RunResults
from envcoder.search import prompts
from envcoder.search.auto_settings import POPULATION_PROPOSERS, AutoRunExistsError, AutoSettings, load_settings
from envcoder.search.final import FinalEvaluation
from envcoder.search.state_terms import sample_states
from envcoder.search.population_run import PopulationIteration
from envcoder.search.proposers import OfflineProposer, Parent, Request, Sample, estimate_cost, make_proposer
from envcoder.search.summary import evaluation_table, finite_number, measured, summary_text
from envcoder.tasks import get_task
from envcoder.text import console as text_console, plural, shown


class AutoRun(PopulationIteration, FinalEvaluation):
    """One `envcoder auto` run; `run()` does (or resumes) the whole loop."""

    def __init__(self, settings: AutoSettings, console: Console | None = None, resume: bool = False,
                 restart: Sequence[str] | None = None):
        """`restart`: the `envcoder` arguments that continue this run (`auto --resume RUN`), with which an evaluation
        whose iteration hangs restarts the process without the candidate that hung (`run_evaluation`)."""
        self.restart = restart
        settings.check()
        settings = settings.resolved()
        self.s = settings
        self.console = console or text_console()
        self.out = Path(settings.out)
        self.task = get_task(settings.task)
        self.task.check_algorithm(settings.algo)  # before anything is written
        self.fitness_name, self.fitness = self.task.get_fitness(settings.fitness)
        self.description = settings.task_description or self.task.description
        self.validator = SandboxValidator(self.task.key, settings.shaper_types, settings.validation_timeout_s,
                                          settings.validation_memory_gib, settings.validation_workers,
                                          same_code_once=settings.proposer in POPULATION_PROPOSERS,
                                          run_envs=settings.envs_per_candidate)
        """Checks the drafts and does all work on their text (this process parses none: `jailed`)."""
        self.proposer = make_proposer(settings.llm, settings.provider, settings.base_url, settings.request_timeout_s,
                                      settings.api_retries, settings.temperature, settings.max_tokens, settings.seed,
                                      fitness=self.fitness, search=settings.proposer, jail=self.validator.jailed,
                                      state_fields=self.task.state_fields,
                                      states=sample_states(self.task) if settings.llm is None else None)
        self._frozen_sweeps: dict[str, list[tuple[str, str]]] = {}
        self.offline = isinstance(self.proposer, OfflineProposer)
        self.population_mode = settings.proposer in POPULATION_PROPOSERS
        self.initial = {f"init_{Path(p).stem}": self._starting_text(Path(p)) for p in settings.initial}
        if self.offline and not self.initial:
            raise ValueError("the offline proposer mutates starting candidates: give --initial FILE or DIR")
        self._check_sizes()
        if resume:
            if not (self.out / "auto.json").exists():
                raise FileNotFoundError(f"{self.out} is not an `envcoder auto` run directory (no auto.json)")
        elif self.out.exists() and any(self.out.iterdir()):
            raise AutoRunExistsError(f"run directory {str(self.out)!r} already exists and is not empty; choose another "
                                     f"--out, or continue it with `envcoder auto --resume {self.out}`")
        writable_directory(self.out)
        (self.out / "llm").mkdir(exist_ok=True)
        self.log = log_console(self.out)
        """Everything the search's evaluations print (their tables, tie notes, files left out, training lines), in
        the run's console.log; the terminal shows a line per iteration and rung (`_stage`) and the summary."""
        if not resume:
            write_json(self.out / "auto.json", settings.to_json())
        self.system = prompts.system_prompt(self.task, settings.shaper_types, self.fitness_name)
        (self.out / "system_prompt.md").write_text(self.system)
        self.history: list[dict] = []
        """Every evaluated candidate: name, iteration, source, fitness, shaped_return, episode_length, status."""

    def _check_sizes(self) -> None:
        """Refuse, before anything is written, a search whose iterations or final evaluation cannot fit in memory
        (`check_sizes`, on their fewest groups: the proposals of an iteration, each in its copies; the finalists and
        the task default at the final's most seeds)."""
        s, here = self.s, Path(".")
        copies = s.copies if self.population_mode else 1
        check_sizes(s.evaluation(here, self.out, s.seeds), candidates=s.candidates_per_iteration * copies,
                    what="each iteration's")
        final = s.evaluation(here, self.out, 1, envs=s.final_envs_per_candidate)
        check_sizes(final, candidates=s.final_top + 1, seeds=max(s.final_seeds, s.final_max_seeds),
                    what="the final evaluation's")

    # ---- what the terminal shows -------------------------------------------------------------------------

    def _started(self, name: str) -> bool:
        """Whether an evaluation's candidate `name` is a starting file's: the file's own name, a variant of its
        sweep, or a copy of either (`-K`) in a population run or a halving rung (`rK`)."""
        is_start = self._is_start()
        return is_start(name) or is_start(re.sub(r"(-\d+)?(r\d+)?$", "", name))

    def _say_drafts(self, iteration: int, drafts: list[dict]) -> None:
        """One line on the terminal for an iteration's checked drafts: how many are valid, and the starting files
        and proposals that are not (their reasons: drafts.json and console.log)."""
        last = {d["name"]: d for d in drafts}  # each slot's last attempt
        bad = [name for name, d in last.items() if not d["ok"]]
        line = f"  checked: {len(last) - len(bad)} of {len(last)} valid"
        if bad:
            line += (f"; not valid: {', '.join(map(shown, bad[:6]))}{' …' if len(bad) > 6 else ''} (why: "
                     f"{self.out.name}/iter_{iteration:02d}/drafts.json)")
        self.console.print(line, highlight=False)

    def _stage(self, label: str, results: RunResults | None, sizes: str, seconds: float) -> None:
        """One line on the terminal for one of the search's evaluations (`label`: which; `sizes`: what it trained):
        its best candidate, the best starting file's candidate beside it, and how many it left out. The whole
        ranking is in console.log and the evaluation's report."""
        head = f"  {label} ({sizes}, {seconds:.0f} s): "
        if results is None or not results.ranking:
            self.console.print(head + "nothing trained", highlight=False)
            return
        best = results.ranking[0]
        seeds = f" over {best.seeds} seeds" if best.seeds > 1 else ""
        parts = [f"best {shown(best.name)} {best.fitness_mean:#.4g}{seeds}"]
        start = next((r for r in results.ranking if self._started(r.name)), None)
        if start is best:
            parts[0] += " (a starting file's)"
        elif start is not None:
            parts.append(f"best start {shown(start.name)} {start.fitness_mean:#.4g}")
        if results.failures:
            parts.append(f"{len(results.failures)} left out")
        self.console.print(head + "; ".join(parts), highlight=False)

    # ---- proposing --------------------------------------------------------------------------------


    def _starting_text(self, path: Path) -> str:
        """A starting file's text; a reward written for Isaac Gym converted once, in the jail, to the native file the
        search then reads and changes (`envcoder convert`'s). One it cannot convert stays as it is: its check then
        leaves it out with the reason."""
        source = read_source(path)
        try:
            return self.validator.jailed(isaac.starting_text, source=source, file=str(path), task=self.task.key)
        except JailedError:
            return source

    def _frozen(self, source: str) -> list[tuple[str, str]]:
        """`freeze_sweep(source)`, done in the sandbox (a file whose table it cannot read stays whole: its check says
        what is wrong with it)."""
        if source not in self._frozen_sweeps:
            try:
                self._frozen_sweeps[source] = [tuple(v) for v in self.validator.jailed(freeze_sweep, source=source)]
            except JailedError:
                self._frozen_sweeps[source] = [("", source)]
        return self._frozen_sweeps[source]

    def _sample(self, iteration: int, slot: int, attempt: int, messages: Sequence[dict]) -> Sample:
        """One proposer call, recorded; a recorded call is read back instead of being made again."""
        path = self.out / "llm" / f"it{iteration:02d}_s{slot:02d}_a{attempt}.json"
        if path.exists():
            record = read_json(path)
            return Sample(record["response"], record["input_tokens"], record["output_tokens"], record["error"])
        population = tuple(Parent(h["name"], h["source"], h["fitness"]) for h in self.history
                           if h["status"] == "ok") or tuple(Parent(n + suffix, variant, None)
                                                            for n, s in self.initial.items()
                                                            for suffix, variant in self._frozen(s))
        request = Request(self.system, tuple(messages), iteration, slot, attempt, population,
                          self.fitness.higher_is_better)
        tick = time.perf_counter()
        sample = self.proposer.sample(request)
        write_json(path, {
            "proposer": self.proposer.name, "iteration": iteration, "slot": slot, "attempt": attempt,
            "messages": None if self.offline else list(messages), "response": sample.text, "error": sample.error,
            "input_tokens": sample.input_tokens, "output_tokens": sample.output_tokens,
            "cost_usd": 0.0 if self.offline else estimate_cost(self.proposer.name, sample.input_tokens,
                                                                sample.output_tokens, self.s.price),
            "seconds": time.perf_counter() - tick, "time": time.strftime("%Y-%m-%dT%H:%M:%S")})
        return sample

    def _draft(self, iteration: int, first_message: str) -> list[dict]:
        """Sample, check and validate `candidates_per_iteration` candidates, with retries; every attempt is
        returned (`name, slot, attempt, ok, error, source, llm`)."""
        n = 0 if self.s.proposer == "random" else self.s.candidates_per_iteration
        conversations = {slot: [{"role": "user", "content": first_message}] for slot in range(n)}
        drafts: list[dict] = []
        extra = self._starting_files(iteration)
        pending = list(range(n))
        for source in self.initial.values():  # here, not in the proposer's threads
            self._frozen(source)
        for attempt in range(self.s.retries + 1):
            if not pending and not extra:
                break
            with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, self.s.concurrency)) as pool:
                samples = list(pool.map(lambda slot: self._sample(iteration, slot, attempt, conversations[slot]),
                                        pending)) if pending else []
            round_drafts, to_validate = [], []
            for slot, sample in zip(pending, samples):
                name = f"it{iteration:02d}_c{slot:02d}"
                draft = {"name": name, "slot": slot, "attempt": attempt, "ok": False, "error": None, "source": None,
                         "llm": f"llm/it{iteration:02d}_s{slot:02d}_a{attempt}.json"}
                if sample.error:
                    draft["error"] = f"proposer call failed: {sample.error}"
                else:
                    try:  # the response is parsed and checked in the sandbox only
                        draft["source"] = self.validator.jailed(prompts.extract_code, text=sample.text,
                                                                shaper_types=list(self.s.shaper_types))
                        to_validate.append((name, draft["source"]))
                    except JailedError as err:
                        draft["error"] = str(err)
                round_drafts.append((draft, sample))
            for name, source in extra:  # the starting files, validated with the first round, never retried
                draft = {"name": name, "slot": None, "attempt": 0, "ok": False, "error": None, "source": source,
                         "llm": None}
                to_validate.append((name, source))
                round_drafts.append((draft, None))
            extra = []
            if to_validate:
                self._validate_drafts(round_drafts, to_validate)
            pending = []
            for draft, sample in round_drafts:
                drafts.append(draft)
                if draft["ok"] or draft["slot"] is None:
                    continue
                pending.append(draft["slot"])
                if sample is not None and sample.text:  # show the model its answer and what was wrong with it
                    conversations[draft["slot"]] += [{"role": "assistant", "content": sample.text},
                                                      {"role": "user", "content": prompts.fix_prompt(draft["error"])}]
            failed = [d for d in drafts if d["attempt"] == attempt and not d["ok"]]
            for draft in failed:
                self.log.print(f"invalid {shown(draft['error'])}", highlight=False)
        return drafts

    def _validate_drafts(self, round_drafts: list[tuple[dict, Sample | None]], to_validate: list[tuple[str, str]]):
        """Validate the files the evaluation will train: each draft's sweep frozen into one file per variant
        (`_frozen`), each variant under its file's name, so that the evaluation finds every verdict remembered
        (`SandboxValidator`) and checks nothing again. A draft passes when all its variants pass."""
        files = {name: [(name + suffix, variant) for suffix, variant in self._frozen(source)]
                 for name, source in to_validate}
        starting = sum(1 for draft, _ in round_drafts if draft["slot"] is None)
        count = sum(map(len, files.values()))
        self.log.print(f"validating {len(to_validate)} candidate(s) ({len(to_validate) - starting} proposed, "
                           f"{starting} starting file(s)"
                           + (f"; {count} files with their sweeps' variants" if count > len(to_validate) else "")
                           + ") in sandboxed processes…", highlight=False)
        verdicts = {v.name: v for v in self.validator.validate([f for each in files.values() for f in each])}
        for draft, _ in round_drafts:
            if draft["error"] is None and draft["name"] in files:
                found = [verdicts[name] for name, _ in files[draft["name"]]]
                draft["ok"] = all(v.ok for v in found)
                draft["error"] = next((v.error for v in found if not v.ok), None)

    # ---- evaluating -------------------------------------------------------------------------------

    def _evaluate(self, candidates_dir: Path, eval_dir: Path, seeds: int, schedule: str = "flat",
                  envs: int | None = None, until: float | None = None, **changes) -> RunResults | None:
        """`run_evaluation` on a directory of candidates (`changes`: of its settings; `until`: when its training
        stops, `run_evaluation`'s); a finished evaluation is read back; one cut off (Ctrl-C, a kill, a hang, or in
        its rounds of added seeds) goes on from its last checkpoint, or from its first iteration where it had none;
        one cut off before it recorded its settings, or that recorded others, starts over."""
        settings = self.s.evaluation(candidates_dir, eval_dir, seeds, schedule, envs, fitness=self.fitness_name,
                                     **changes)
        resume = False
        if (eval_dir / "results.json").exists():
            results = RunResults.read(eval_dir)
            if settings.seeds_until_separable is None or results.seed_rounds is not None:
                return results
            resume = True
        elif (eval_dir / "hung.json").exists() and (eval_dir / "config.json").exists():
            resume = True  # restarted without a candidate that hung in it (`envcoder.runs.watchdog.restart`)
        elif (eval_dir / "config.json").exists() and _recorded(settings, eval_dir):
            resume = True
        elif eval_dir.exists():
            shutil.rmtree(eval_dir)
        try:
            with self.console.status(f"training {eval_dir.relative_to(self.out)} (its lines: "
                                     f"{self.out / 'console.log'})"):
                return run_evaluation(settings, self.log, resume=resume, validator=self.validator,
                                      restart=self.restart, until=until)
        except NoValidCandidatesError as err:
            self.console.print(f"[yellow]no candidate could be trained:[/yellow] {shown(err)}", highlight=False)
            return None

    def _iteration(self, iteration: int, copies: int | None = None, halving_rungs: int | None = None) -> dict:
        """Run (or read back) one iteration (a population search's with `copies` copies and `halving_rungs` rungs,
        None: as set); returns what `iteration.json` holds."""
        iter_dir = self.out / f"iter_{iteration:02d}"
        record_file = iter_dir / "iteration.json"
        if record_file.exists():
            return read_json(record_file)
        tick = time.perf_counter()
        iter_dir.mkdir(exist_ok=True)
        first_message = self._next_message(iteration)
        drafts_file = iter_dir / "drafts.json"
        if drafts_file.exists():
            drafts = read_json(drafts_file)
        else:
            self.console.rule(f"iteration {iteration + 1}/{self.s.iterations} ({iter_dir.name}): " + (
                "copies of the starting files with random constants" if self.s.proposer == "random" else
                f"{self.proposer.name} proposes {self.s.candidates_per_iteration} candidates"))
            drafts = self._draft(iteration, first_message)
            write_json(drafts_file, drafts)
            self._say_drafts(iteration, drafts)
        valid = [d for d in drafts if d["ok"]]
        candidates_dir = iter_dir / "candidates"
        candidates_dir.mkdir(exist_ok=True)
        variants = {f"{d['name']}{suffix}": source for d in valid for suffix, source in self._frozen(d["source"])}
        if self.population_mode:
            copies = copies or self.s.copies
            rungs = self.s.halving_rung_count if halving_rungs is None else halving_rungs
            table, failures, results = self._population_iteration(iteration, variants, candidates_dir, copies, rungs)
            rungs = max((row.get("rung") or 0 for row in table), default=0)  # those that fitted --budget
        else:
            for name, source in variants.items():
                (candidates_dir / f"{name}.py").write_text(source)
            tock = time.perf_counter()
            results = self._evaluate(candidates_dir, iter_dir / "eval", self.s.seeds, self.s.schedule,
                                     until=self.until) if variants else None
            self._stage("evaluation", results, plural(len(variants), "candidate"), time.perf_counter() - tock)
            table, failures = evaluation_table(iteration, variants, results)
        last_attempt = {}
        for draft in drafts:
            last_attempt[draft["name"]] = draft
        failures += [{"name": d["name"], "error": d["error"]} for d in last_attempt.values() if not d["ok"]]
        best = self._ranked(table)
        compiled = {**results.timings.get("xla", {}), **results.timings.get("traces", {})} if results else {}
        record = {"iteration": iteration, "table": table, "failures": failures,
                  "best": best[0]["name"] if best else None, "attempts": len(drafts), "valid": len(valid),
                  "starting": sum(1 for d in valid if d["slot"] is None),
                  "compile": compiled, "halving": [read_json(p) for p in sorted(iter_dir.glob("rung_*/rung.json"))]}
        if results is not None and (iter_dir / "eval" / "population.json").exists():
            population = read_json(iter_dir / "eval" / "population.json")
            record["population"] = {"groups": len(results.groups), "interval": population["settings"]["interval"],
                                    "exploit_steps": len({row["iteration"] for row in population["lineage"]}),
                                    "takeovers": len(population["lineage"])}
        if compiled:
            self.log.print(f"compiled {compiled.get('compiles', '?')} program(s) "
                               f"({compiled.get('seconds', 0):.1f} s compiling or loading; "
                               f"{compiled.get('cache_hits', 0)} from the compilation cache, "
                               f"{compiled.get('loaded', 0)} trace(s) loaded)", highlight=False)
        record["seconds"] = time.perf_counter() - tick  # what `--budget` expects of the next one
        record.update(measured(iter_dir))
        if self.population_mode:
            record["copies"], record["halving_rungs"] = copies, rungs
        write_json(record_file, record)
        return record

    def _starting_files(self, iteration: int) -> list[tuple[str, str]]:
        """The starting files that an iteration validates next to its proposals: all of them in the first; with
        `--proposer random`, in every one (renamed by the iteration after the first: new copies of them)."""
        if iteration == 0:
            return list(self.initial.items())
        if self.s.proposer == "random":
            return [(f"it{iteration:02d}_{name}", source) for name, source in self.initial.items()]
        return []

    def _next_message(self, iteration: int) -> str:
        """The user message that opens every conversation of `iteration`."""
        if iteration == 0 or not self.history:
            return prompts.first_prompt(self.description, self.s.shaper_types, self.initial)
        last = iteration - 1
        record = read_json(self.out / f"iter_{last:02d}" / "iteration.json")
        best = next(iter(self._ranked(self.history)), None)
        latest = next((row for row in record["table"] if row["name"] == record["best"] and row["status"] == "ok"),
                      None)  # ranked: a halving set, not the population run's copy of the same name
        return prompts.reflection_prompt(self.description, self.s.shaper_types, last + 1, self.fitness_name,
                                         self.fitness.higher_is_better, record["table"], record["failures"],
                                         best, prompts.row_statistics(self.out, best), latest,
                                         prompts.row_statistics(self.out, latest))

    def _ranked(self, rows: Sequence[dict]) -> list[dict]:
        """Trained, non-diverged candidates with a finite fitness, best first, as an evaluation ranks them
        (`envcoder.runs.ranking.rank`: ties on fitness by learning speed, or learning speed first)."""
        usable = {h["name"]: h for h in rows if h["status"] == "ok" and finite_number(h["fitness"])}
        order = rank({name: [{"task_fitness": h["fitness"], "shaped_return": 0.0, "episode_length": 0.0,
                              "training_auc": h.get("auc") if finite_number(h.get("auc")) else math.nan}]
                      for name, h in usable.items()}, self.fitness.higher_is_better, self.s.rank_by)
        return [usable[r.name] for r in order]

    # ---- the whole run ----------------------------------------------------------------------------

    def run(self) -> dict:
        self.started, self.done = time.perf_counter(), 0
        done_s = sum(read_json(path)["seconds"] for path in self.out.glob("iter_*/iteration.json"))
        self.until = None if self.s.budget_minutes is None else time.time() + 60 * self.s.budget_minutes - done_s
        with self.validator:  # its worker processes stay up for the whole run
            for iteration in range(self.s.iterations):
                sizes = self._within_budget(iteration, time.perf_counter() - self.started)
                if sizes is None:
                    break
                record = self._iteration(iteration, **sizes)
                self.done = iteration + 1
                self.history += record["table"]
                best = self._ranked(self.history)
                if best:
                    how = _how_measured(best[0], self.fitness_name)
                    self.console.print(f"  best so far: {shown(best[0]['name'])} ({how})", highlight=False)
            return self._finish()

    def _within_budget(self, iteration: int, elapsed: float) -> dict | None:
        """The sizes `iteration` trains at (`AutoSettings.next_iteration`: `{}` as set, fewer copies where only a
        smaller iteration fits `--budget`), or None where none fits: says so where it shrinks or ends. Decided once:
        a resumed run reads them back (iter_KK/sizes.json)."""
        path = self.out / f"iter_{iteration:02d}" / "sizes.json"
        if path.exists():
            return read_json(path)
        records = [read_json(self.out / f"iter_{i:02d}" / "iteration.json") for i in range(self.done)]
        sizes, message = self.s.next_iteration(records, len(self.initial), elapsed)
        if message:
            self.console.print(message, highlight=False)
        if sizes:
            path.parent.mkdir(exist_ok=True)
            write_json(path, sizes)
        return sizes


def log_console(out: Path) -> Console:
    """A console that appends to `out/console.log`: as wide as a log reads, no colour, a message per line."""
    return Console(file=(out / "console.log").open("a", buffering=1), width=120, soft_wrap=True, no_color=True,
                   force_terminal=False, force_interactive=False, highlight=False)


def _how_measured(row: dict, fitness: str) -> str:
    """A table row's fitness with where it comes from: a halving rung's mean over its runs, or its evaluation."""
    if row.get("rung"):
        return f"{fitness} {row['fitness']:#.4g}, the mean over its {row['seeds']} run(s) in halving rung {row['rung']}"
    return f"{fitness} {row['fitness']:#.4g} in iteration {row['iteration'] + 1}'s evaluation"


def _recorded(settings: EvalSettings, eval_dir: Path) -> bool:
    """Whether the evaluation in `eval_dir` was started with `settings` (its config.json; a setting that `settings`
    leave to the start, None, is what the start resolved it to; where its candidates are is not a setting)."""
    recorded = settings_from_run(eval_dir).to_config()
    return all(value is None or recorded.get(key) == value for key, value in settings.to_config().items()
               if key != "functions")


def run_auto(settings: AutoSettings, console: Console | None = None, resume: bool = False,
             restart: Sequence[str] | None = None) -> dict:
    return AutoRun(settings, console, resume, restart).run()


__all__ = ["AutoSettings", "AutoRun", "run_auto", "load_settings", "summary_text", "AutoRunExistsError"]
