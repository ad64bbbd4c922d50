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
evaluations are kept, and an evaluation that was cut off goes on from its last checkpoint. What a population search
is (its copies, exploit steps and halving rungs) is `envcoder.search.population`'s; the summary's words are
`envcoder.search.summary`'s.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import math
import re
import shutil
import time
from pathlib import Path
from typing import Callable, Sequence

from rich.console import Console
from rich.markdown import Markdown

from envcoder.candidates import TASK_DEFAULT, isaac, read_source
from envcoder.candidates.constants import sources_with_constants
from envcoder.candidates.sandbox import JailedError, SandboxValidator
from envcoder.candidates.variants import freeze_sweep
from envcoder.runs.directory import read_json, writable_directory, write_json
from envcoder.runs.eval_settings import EvalSettings, settings_from_run
from envcoder.runs.evaluation import NoValidCandidatesError, run_evaluation
from envcoder.runs.job import Plan
from envcoder.runs.pbt import PopulationSettings
from envcoder.runs.ranking import rank
from envcoder.runs.results import RunResults
from envcoder.search import prompts
from envcoder.search.auto_settings import POPULATION_PROPOSERS, AutoRunExistsError, AutoSettings, load_settings
from envcoder.search.population import (CARRIED, Halving, as_proposed, population_rows, population_summary,
                                        seed_population)
from envcoder.search.proposers import OfflineProposer, Parent, Request, Sample, estimate_cost, make_proposer
from envcoder.search.readable import readable_find
from envcoder.search.state_terms import sample_states
from envcoder.search.summary import (against, against_default, commands_lines, evaluation_table, finite_number,
                                     measured, search_record, summary_text)
from envcoder.tasks import get_task
from envcoder.text import console as text_console, plural, shown


class AutoRun:
    """One `envcoder auto` run; `run()` does (or resumes) the whole loop: its iterations (an offline search's
    evaluation, or a population search's run and halving rungs), then the final evaluation and the summary."""

    until: float | None = None
    """When `--budget` ends (`time.time()`; `AutoRun.run` sets it), or None: no training runs past it."""

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
        self._valid_starts: set[str] | None = None
        """The starting files that validate (`_check_starts`), the first proposals' parents; None until checked."""
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
        (`Plan.check_sizes`, on their fewest groups: the proposals of an iteration, each in its copies; the finalists
        and the task default at the final's most seeds). The plan, resolved here once, is every evaluation's."""
        s, here = self.s, Path(".")
        copies = s.copies if self.population_mode else 1
        self.plan = Plan.of(s.evaluation(here, self.out, s.seeds))
        self.plan.check_sizes(candidates=s.candidates_per_iteration * copies, what="each iteration's")
        final = self.plan.for_settings(s.evaluation(here, self.out, 1, envs=s.final_envs_per_candidate))
        final.check_sizes(candidates=s.final_top + 1, seeds=max(s.final_seeds, s.final_max_seeds),
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
        early = results.episodes_end_early
        if early:
            parts.append(f"[yellow]every policy fails early[/yellow] (the longest episodes: "
                         f"{early['episode_length']:.0f} of {early['max_episode_length']:,} steps)")
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
                                                            for n, s in self.initial.items() if n in self._valid_starts
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
        if self._valid_starts is None and not any(h["status"] == "ok" for h in self.history):
            self._check_starts()
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

    def _check_starts(self) -> None:
        """Validate the starting files before the first proposals, so that a proposer builds only on those that run
        (`_valid_starts`): a start that fails (an Isaac reward taking a name the task class lacks, say) is no parent,
        and a model is not shown it. Their verdicts are remembered, so the first round checks them again for
        nothing."""
        files = [(name + suffix, variant) for name, source in self.initial.items()
                 for suffix, variant in self._frozen(source)]
        ok = {v.name for v in self.validator.validate(files) if v.ok} if files else set()
        self._valid_starts = {name for name, source in self.initial.items()
                              if all(name + suffix in ok for suffix, _ in self._frozen(source))}

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
                return run_evaluation(self.plan.for_settings(settings), self.log, resume=resume,
                                      validator=self.validator, restart=self.restart, until=until)
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
            of = (f"{iteration + 1}/{self.s.iterations}" if self.s.budget_minutes is None else
                  f"{iteration + 1} of at most {self.s.iterations} in {self.s.budget_minutes:g} min")
            self.console.rule(f"iteration {of} ({iter_dir.name}): " + (
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
            if self._valid_starts is None:
                self._check_starts()
            return prompts.first_prompt(self.description, self.s.shaper_types,
                                        {n: s for n, s in self.initial.items() if n in self._valid_starts})
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

    # ---- a population, random or seeds search's iteration ------------------------------------------------

    def _population_iteration(self, iteration: int, variants: dict[str, str], candidates_dir: Path, copies: int,
                              rungs: int):
        """`--proposer population`, `random` or `seeds`: the iteration's candidates (`variants`) and, after the
        first iteration of a population or seeds search, the best finds so far, each trained as `copies` groups under
        population-based training (`envcoder.search.population`; a random or seeds search never exploits, and a
        seeds search's copies all start from the file's own constants). Returns the table (a row
        per copy, with the constants its group trained with last; the starting files as rows of their own in the
        first iteration; then those of its `rungs` halving rungs), the copies the evaluation left out, and the
        results."""
        files = dict(variants)
        if self.s.proposer in ("population", "seeds"):  # the best finds so far go on (constants tuned further)
            files.update({f"it{iteration:02d}_p{k}": row["source"]
                          for k, row in enumerate(self._ranked(self.history)[:CARRIED])})
        try:
            sources = self.validator.jailed(seed_population, files=files, copies=copies,
                                            seed=self.s.seed + iteration, spread=self.s.proposer != "seeds")
        except JailedError:  # one copy of each: their checks say what is wrong
            sources = {f"{name}-0": source for name, source in files.items()}
        for name, source in sources.items():
            (candidates_dir / f"{name}.py").write_text(source)
        starts = {name: source for name, source in files.items() if name in self.initial}
        tuned = len({name.rsplit("-", 1)[0] for name in sources if not name.endswith("-0")})
        each = f", {copies} copies of each of the {tuned} with constants to tune and one of each other"
        exploit = ("the worst take over the best and perturb their constants" if self.s.proposer == "population"
                   and copies > 1 else "no exploit step" + (
                       ", every copy with the file's own constants" if self.s.proposer == "seeds" else ""))
        self.log.print(f"{len(sources)} groups train together: {plural(len(files), 'candidate')} "
                           f"({len(starts)} starting){each if tuned else ''}; {exploit}", highlight=False)
        eval_dir = candidates_dir.parent / "eval"
        interval = None if self.s.proposer == "population" else 0  # a random or seeds search never exploits
        tick = time.time()
        results = self._evaluate(candidates_dir, eval_dir, self.s.seeds, until=self.until, population=(
            PopulationSettings(seed=self.s.seed + iteration, interval=interval))) if sources else None
        self._stage("population run", results, f"{len(sources)} groups: {plural(len(files), 'candidate')} in copies",
                    time.time() - tick)
        table = [{"name": name, "fitness": None, "auc": None, "shaped_return": None, "episode_length": None,
                  "status": "start", "source": source, "iteration": iteration} for name, source in starts.items()]
        rows, record = [], None
        if results is not None:
            record = read_json(eval_dir / "population.json") if (eval_dir / "population.json").exists() else None
            rows = population_rows(results, record, sources, self.fitness.higher_is_better, self._with_constants,
                                   iteration)
        eval_failures = {f.name: f.error for f in results.failures} if results else {}
        ranked = {row["name"] for row in rows}
        failures = [{"name": name, "error": eval_failures.get(name, "not evaluated")}
                    for name in sources if name not in ranked]
        if rows and rungs:  # a random search's copies are never taken over: nothing to add
            proposed = as_proposed({name: source for name, source in files.items() if name not in starts},
                                   rows, (record or {}).get("lineage", [])) if self.s.proposer == "population" else {}
            timings = results.timings  # a rung runs its programs again, compiled: about this long (unless cut)
            each = None if timings.get("out_of_time") else max(
                timings.get("total_s", 0.0) - timings.get("xla", {}).get("seconds", 0.0), 0.0)
            rows += self._halving(iteration, rows, proposed, rungs, each)  # a start's own constants: the final's
        return table + rows, failures, results

    def _with_constants(self, pairs: list[tuple[str, dict]]) -> list[str]:
        """Each `(source, values)` as the source with those constants written in (`sources_with_constants`), in the
        sandbox; a source as it is where that fails."""
        try:
            return self.validator.jailed(sources_with_constants, pairs=pairs)
        except JailedError:
            if len(pairs) == 1:
                return [pairs[0][0]]
            return [source for pair in pairs for source in self._with_constants([pair])]

    def _halving(self, iteration: int, rows: list[dict], proposed: dict[str, str], rungs: int,
                 each: float | None) -> list[dict]:
        """The `rungs` rungs of successive halving after a population run (`envcoder.search.population.Halving`;
        `proposed`: each file with the constants it came with), as many as end before `--budget` does (`each`: the
        seconds a rung is expected to take, then those the last one took; None where the budget cut the population
        run: none): the table rows of every set of constants trained in them; the population run's own rows become
        `copy` (not ranked) where a rung ran."""
        halving, done = Halving(rows, self._ranked, self.fitness.higher_is_better, self.s.rank_by, proposed), 0
        skipped = self.out / f"iter_{iteration:02d}" / "rungs_skipped.json"  # `envcoder.search.summary.measured`
        skipped.unlink(missing_ok=True)  # a resumed iteration decides again
        for rung in range(1, rungs + 1):
            if self.until is not None and (each is None or time.time() + each > self.until):
                budget = f"--budget {self.s.budget_minutes:g}"
                why = f"the time of {budget} is up, no halving rung starts" if each is None else \
                    f"halving rung {rung}/{rungs} (about {each / 60:.1f} min) would end past {budget}"
                ranked = f"the sets of rung {done} are ranked" if done else \
                    "the population run's copies are ranked as they trained"
                self.console.print(f"budget: {why}: {ranked}", highlight=False)
                write_json(skipped, {"rungs": rungs - done, "expected_s": each})
                break
            tick = time.time()
            rung_dir = self.out / f"iter_{iteration:02d}" / f"rung_{rung}"
            (rung_dir / "candidates").mkdir(parents=True, exist_ok=True)
            slots = halving.slots(rung)
            for name, source in slots.items():
                (rung_dir / "candidates" / f"{name}.py").write_text(source)
            seeds = collections.Counter(slots.values())
            trained = (f"{len(seeds)} set(s) of constants × {'-'.join(map(str, sorted(set(seeds.values()))))} "
                       "seed(s), from scratch")
            self.log.rule(f"halving rung {rung}/{rungs}: {trained}")
            results = self._evaluate(rung_dir / "candidates", rung_dir / "eval", 1, population=PopulationSettings(
                seed=self.s.seed + iteration, interval=0))  # the population run's program: its data, no exploit
            compiled = {**results.timings.get("xla", {}), **results.timings.get("traces", {})} if results else {}
            write_json(rung_dir / "rung.json", {"rung": rung, "sets": len(seeds), "groups": len(slots),
                                                "compile": compiled})
            self.log.print(f"rung {rung} compiled {compiled.get('compiles', '?')} program(s)", highlight=False)
            self._stage(f"halving rung {rung}/{rungs}", results, trained, time.time() - tick)
            halving.record(rung, slots, results.ranking if results else [])
            done, each = rung, time.time() - tick
        for row in rows if done else ():
            row["status"] = "copy" if row["status"] == "ok" else row["status"]
        return halving.rows(done, iteration) if done else []

    # ---- the final evaluation and the summary ---------------------------------------------------------------

    def _is_start(self) -> Callable[[str], bool]:
        """Whether a name is one a starting file trains under: the file's, or a variant's of its sweep (frozen,
        `_frozen`, or expanded by the sandbox where it could not be frozen: `name[K=...]`)."""
        names = {name + suffix for name, source in self.initial.items() for suffix, _ in self._frozen(source)}
        return lambda name: name in names or name.split("[")[0] in names

    def _starts_ranked(self, finalists: dict[str, dict], results: RunResults) -> list[dict]:
        """The starting files among the final's candidates (a file of `--initial` or a variant of its sweep), best
        first by the final's ranking: what the find is compared with in the summary."""
        order = {row.name: k for k, row in enumerate(results.ranking)}
        is_start = self._is_start()
        starts = [h for name, h in finalists.items() if is_start(name) or h["status"] == "start"]
        return sorted(starts, key=lambda h: order.get(h["name"], len(order)))

    def _found(self, top, row: dict, starts: list[dict], results: RunResults) -> dict:
        """What the best file is (`kind`): a starting file unchanged ("start"), a starting file with constants the
        search tuned ("tuned"; `start_file`: which) or a proposal ("proposal"); and, but for a start unchanged, it
        against the best starting file of the final (`against_start`, `envcoder.search.summary.against`)."""
        sources = {variant for source in self.initial.values() for _, variant in self._frozen(source)}
        sources |= set(self.initial.values())
        if row["source"] in sources:
            return {"kind": "start"}
        found = {"kind": "proposal"}
        if self._started(top.name):
            found = {"kind": "tuned", "start_file": re.sub(r"(-\d+)?(r\d+)?$", "", top.name)}
        if starts:
            found["against_start"] = against(results, top, starts[0]["name"], f"the best starting file "
                                             f"({starts[0]['name']})", self.fitness.higher_is_better)
        return found

    def _leaders_left(self, records: list[dict], finalists: dict[str, dict]) -> list[dict]:
        """Each candidate that led an iteration and is not in the final, with why (`iteration`, `name`, `why`)."""
        sources = {h["source"]: name for name, h in finalists.items()}
        starts = {h["source"] for h in self.history if h["status"] == "start"} | set(self.initial.values())
        ranked, seen = [], set(starts)  # the finds as `_finalists` takes them: each code once, no start's own
        for h in self._ranked(self.history):
            if h["source"] not in seen:
                ranked.append(h["name"])
                seen.add(h["source"])
        left = []
        for record in records:
            name = record.get("best")
            row = next((h for h in self.history if h["name"] == name and h["status"] == "ok"), None)
            if name is None or name in finalists or row is None:
                continue
            if row["source"] in sources:  # the same code under the final's name (a start's own: the file's)
                why = f"the final trains its code under the name {sources[row['source']]} (see the table)"
            elif row["source"] in starts:
                why = "its code is a starting file's as written"
            else:
                place = ranked.index(name) + 1 if name in ranked else None
                why = (f"among the search's finds it ranks {place} (by fitness, ties by learning speed), and the final "
                       f"takes the best {self.s.final_top} (--final-top)" if place else
                       "its fitness is not a finite number")
            left.append({"iteration": record["iteration"], "name": name, "why": why})
        return left

    def _finalists(self) -> dict[str, dict]:
        """The final's candidates by name: the `final_top` best finds (each code once, and none a starting file's
        own: a copy of a file with no constant to tune is that file), the best starting file and, after a population
        run, every starting file (its copies' fitness is not the file's): the baselines the search had to beat (the
        task's own shaping joins them in the evaluation)."""
        finalists, seen = {}, {h["source"] for h in self.history if h["status"] == "start"}
        for h in self._ranked(self.history):  # a start's copy with nothing tuned is the start, which joins anyway
            if len(finalists) < self.s.final_top and h["source"] not in seen:
                finalists[h["name"]] = h
                seen.add(h["source"])
        is_start = self._is_start()
        starting = self._ranked([h for h in self.history if is_start(h["name"])])
        finalists.update({h["name"]: h for h in starting[:1]})
        finalists.update({h["name"]: h for h in self.history if h["status"] == "start"})
        return finalists

    def _final_evaluation(self, finalists: dict[str, dict]) -> RunResults | None:
        """The finalists and `task_default` trained together, in rounds of seeds until the best is separable."""
        if not finalists:
            return None
        final_dir = self.out / "final"
        (final_dir / "candidates").mkdir(parents=True, exist_ok=True)
        for name, h in finalists.items():
            (final_dir / "candidates" / f"{name}.py").write_text(h["source"])
        max_seeds = max(self.s.final_max_seeds, self.s.final_seeds)
        self.console.rule("final evaluation")
        more = f", up to {max_seeds} until the best is separable" if max_seeds > self.s.final_seeds else ""
        self.console.print(f"{plural(len(finalists), 'candidate')} and {TASK_DEFAULT} × {self.s.final_seeds} "
                           f"seeds{more} × {self.s.final_envs_per_candidate} envs", highlight=False)
        return self._evaluate(final_dir / "candidates", final_dir / "eval", self.s.final_seeds,
                              envs=self.s.final_envs_per_candidate, task_default=True, seeds_until_separable=max_seeds)

    def _fit_budget(self) -> None:
        """The final's sizes made smaller where `--budget` leaves less time than it takes as set
        (`AutoSettings.final_within_budget`), decided once: a resumed run reads them back (final/sizes.json), so that
        its final goes on with the settings it started with."""
        path = self.out / "final" / "sizes.json"
        if path.exists():
            sizes = read_json(path)
        else:
            records = [read_json(self.out / f"iter_{i:02d}" / "iteration.json") for i in range(self.done)]
            sizes, message = self.s.final_within_budget(records, len(self.initial), time.perf_counter() - self.started)
            if message is None:
                return
            self.console.print(message, highlight=False)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, sizes)
        self.s = dataclasses.replace(self.s, **sizes)

    def _finish(self) -> dict:
        self._fit_budget()
        finalists = self._finalists()
        results = self._final_evaluation(finalists)
        records = [read_json(self.out / f"iter_{i:02d}" / "iteration.json") for i in range(self.done)]
        proposer = self.s.proposer if self.offline else self.proposer.name + (
            f" ({self.s.proposer})" if self.population_mode else "")
        summary = search_record(self.out, records, self.history, results, {
            "task": self.task.name, "task_description": self.description, "proposer": proposer,
            "fitness": self.fitness_name, "higher_is_better": self.fitness.higher_is_better,
            "population": {**population_summary(self.out, self.done), "search": self.s.proposer}
            if self.population_mode else None,
            "offline": self.offline})
        top = next((r for r in results.ranking if r.name in finalists), None) if results else None
        if top is not None:  # the best file (the task's default, which may rank above it, is no file)
            summary["best"] = {**dataclasses.asdict(top), "file": "best.py",
                               "iteration": finalists[top.name]["iteration"]}
            (self.out / "best.py").write_text(finalists[top.name]["source"])
            summary["task_default"] = against_default(results, top, self.fitness.higher_is_better)
            starts = self._starts_ranked(finalists, results)
            summary["found"] = self._found(top, finalists[top.name], starts, results)
            summary["readable"] = readable_find(self.validator, self.out, finalists[top.name]["source"], starts)
        summary["leaders_not_in_final"] = self._leaders_left(records, finalists)
        write_json(self.out / "summary.json", summary)
        (self.out / "summary.md").write_text(summary_text(summary, run=str(self.out)))
        self.console.print(Markdown(summary_text(summary, terminal=True)))  # rendered, not as Markdown source
        if summary["best"] is not None:
            self.console.print(f"best candidate: {self.out / 'best.py'}; summary: {self.out / 'summary.md'}",
                               markup=False, highlight=False, soft_wrap=True)  # paths stay whole, to copy
            for line in commands_lines(summary, str(self.out)):
                self.console.print(line, markup=False, highlight=False, soft_wrap=True)
        return summary

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
