"""The end of an `envcoder auto` run: the best finds, the starting files and the task's own shaping trained together
in rounds of seeds until the best is separable, then `best.py`, its readable form and the summary. `AutoRun`
(`envcoder.search.loop`) takes it as a base: it reads the run's settings (`s`), `validator`, `console`, `out`,
`task`, `description`, `fitness`, `fitness_name`, `initial`, `history`, `done`, `started`, `offline`, `proposer`,
`population_mode`, `_frozen`, `_evaluate`, `_started` and `_ranked`."""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Callable

from rich.markdown import Markdown

from envcoder.candidates import TASK_DEFAULT
from envcoder.runs.directory import read_json, write_json
from envcoder.runs.results import RunResults
from envcoder.search.population import population_summary
from envcoder.search.readable import readable_find
from envcoder.search.summary import against, against_default, search_record, summary_text
from envcoder.text import plural


class FinalEvaluation:
    """The final evaluation and summary of an `AutoRun`."""

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
            if row["source"] in starts:
                why = "its code is a starting file's as written, which the final trains under the file's name"
            elif row["source"] in sources:
                why = f"its code is the same as {sources[row['source']]}'s, which the final trains"
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
        (self.out / "summary.md").write_text(summary_text(summary))
        self.console.print(Markdown(summary_text(summary, terminal=True)))  # rendered, not as Markdown source
        if summary["best"] is not None:
            self.console.print(f"best candidate: {self.out / 'best.py'}; summary: {self.out / 'summary.md'}",
                               markup=False, highlight=False, soft_wrap=True)  # paths stay whole, to copy
        return summary
