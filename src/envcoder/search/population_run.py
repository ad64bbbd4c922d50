"""A population, random or seeds search's iteration (`envcoder auto --proposer population|random|seeds`): its
candidates trained as copies under population-based training (`envcoder.runs.pbt`; a random or seeds search never
exploits), then the rungs of successive halving over their constants (`envcoder.search.population`). `AutoRun`
(`envcoder.search.loop`) takes it as a base: it reads the run's settings (`s`), `validator`, `console`, `log`, `out`,
`fitness`, `initial`, `history`, `until` (when `--budget` ends, or None), `_evaluate`, `_stage` and `_ranked`."""

from __future__ import annotations

import collections
import time
from pathlib import Path

from envcoder.candidates.constants import sources_with_constants
from envcoder.candidates.sandbox import JailedError
from envcoder.runs.directory import read_json, write_json
from envcoder.runs.pbt import PopulationSettings
from envcoder.search.population import CARRIED, Halving, as_proposed, population_rows, seed_population
from envcoder.text import plural


class PopulationIteration:
    """The population iteration of an `AutoRun`."""

    until: float | None = None
    """When `--budget` ends (`time.time()`; `AutoRun.run` sets it), or None: no training runs past it."""

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
