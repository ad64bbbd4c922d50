"""`envcoder auto --proposer population`: each iteration's candidates trained as populations of copies whose constants
population-based training tunes (`envcoder.runs.pbt`), then the winners written as plain files.

Each candidate of an iteration (a starting file, one of the best finds so far, or a new one: the LLM's, or without
`--llm` the offline proposer's structural children) trains as `copies` groups: copy 0 is the file itself, the others
start from its constants each multiplied by up to 30× either way (`INITIAL_DECADES`), one of them with its sign
flipped now and then (`INITIAL_FLIP`; zeros stay zero). A file whose constants cannot be data (it needs one as a
Python number) joins with one copy. At the end every copy's constants are those its group trained with last; a
winner is written out with them, and the final evaluation trains it from scratch next to the starting files and the
task's default, because a researcher takes away a fixed file.

Which constants win is decided by successive halving without recompiling (`Halving`, `AutoSettings.halving_rungs`):
after the population run, each file keeps its groups (the same code in the same places: the compiled programs are
reused) while its constants compete in rungs. In rung `r` a file of `n` copies trains its best `n >> r` sets of
constants so far from scratch, each in `n / (n >> r)` of its groups with new seeds, so the survivors take over the
groups of those dropped; a set's score is its mean over every seed it trained with from scratch. The last rung's
sets, one per file, are ranked by that mean (2 + 4 seeds for 4 copies): the population's last constants are judged
as a researcher will use them, trained from the start, and over more than one seed. Each file's constants as it came
(`as_proposed`; not a starting file's, which the final evaluation trains anyway, nor in a random search, which has
no exploit step) take the second place of its first rung, with 4 copies or more, where the population run did not
rank them first: an exploit step judges a copy on a few iterations of one run and can take over constants that would
have learned (an Anymal alive bonus whose agents stand before they track). On Anymal every winner of six searches
was a file as proposed (docs/benchmarks/search.md).

A seeds search (`--proposer seeds`) is this without population-based training: every copy starts from the file's
own constants and no exploit step runs, so each file has one set of constants, which the halving rungs train again
from scratch in all its groups; each file is then ranked by its mean over those seeds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from envcoder.candidates.constants import lift_constants, with_constants
from envcoder.text import parse as parse_source

INITIAL_DECADES = 1.5
"""A copy's starting constants are the file's each multiplied by `10 ** U(-INITIAL_DECADES, INITIAL_DECADES)`: a
weight or a kernel width 100× off is within reach of the first copies."""

CARRIED = 2
"""How many of the best finds so far a population search's later iterations train again (their constants tuned
further), next to the new candidates."""

INITIAL_FLIP = 0.2
"""The probability that one constant of a copy (drawn at random) has its sign flipped: a term of the wrong sign is
within reach too."""


def seed_population(files: dict[str, str], copies: int, seed: int, spread: bool = True) -> dict[str, str]:
    """`{copy name: source}`: `copies` copies (`name-0`, `name-1`, …) of each of `files` (`{name: source}`), copy 0
    the file itself, the others with their constants spread (`INITIAL_DECADES`, `INITIAL_FLIP`; a file without
    constants to tune joins once). Without `spread` (a seeds search) every copy is the file itself."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, source in files.items():
        try:
            _, constants, _ = lift_constants(parse_source(source))
        except SyntaxError:
            constants = {}
        tunable = sorted(k for k, v in constants.items() if v != 0.0)
        for k in range(copies if tunable or not spread else 1):
            values = {}
            if k and spread:
                values = {c: constants[c] * float(10.0 ** rng.uniform(-INITIAL_DECADES, INITIAL_DECADES))
                          for c in tunable}
                flipped = tunable[rng.integers(len(tunable))]
                if rng.random() < INITIAL_FLIP:
                    values[flipped] = -values[flipped]
            out[f"{name}-{k}"] = with_constants(source, values) if values else source
    return out


PROPOSED = "proposed"
"""The name of a file's constants as it came (`<file>-proposed`), where an exploit step took its copy 0 over."""


def as_proposed(files: dict[str, str], rows: list[dict], lineage: list[dict]) -> dict[str, str]:
    """`{file: source}`: each of a population run's `files` (`{name: source}`) with the constants it came with, for
    the halving to train from scratch (`Halving`): its copy 0's row where no exploit step took that copy over (the
    same constants, as the run wrote them), else the file itself. A file is left out where its copy 0 has no row, or
    diverged with the file's constants (`rows`: `population_rows`; `lineage`: `population.json`'s)."""
    taken = {step["group"].rsplit("#", 1)[0] for step in lineage}
    copy_0 = {row["name"][:-2]: row for row in rows if row["name"].endswith("-0")}
    return {file: copy_0[file]["source"] if f"{file}-0" not in taken else source for file, source in files.items()
            if file in copy_0 and (f"{file}-0" in taken or copy_0[file]["status"] != "diverged")}


def halving_slots(copies: list[str], best_first: list, rung: int) -> list:
    """The set of constants (from `best_first`, a file's sets best first) that each of the file's groups (`copies`,
    its copy names in the order of their groups) trains in `rung` (1, 2, ...): its best `len(copies) >> rung` (at
    least one), each in as many neighbouring groups, the first ones one more where they do not divide."""
    kept = best_first[:max(1, len(copies) >> rung)]
    return [kept[j * len(kept) // len(copies)] for j in range(len(copies))]


class Halving:
    """The sets of constants of a population run's files in its halving rungs (see the module docstring)."""

    NAN_RUN = {"task_fitness": math.nan, "shaped_return": math.nan, "episode_length": math.nan}
    """A set of constants none of whose groups finished training in a rung (left out, or diverged)."""

    def __init__(self, rows: list[dict], ranked: Callable[[list[dict]], list[dict]], higher_is_better: bool,
                 rank_by: str, proposed: dict[str, str] | None = None):
        """`rows`: the population run's (`population_rows`); `ranked`: rows best first, as the search ranks them;
        `proposed`: `{file: source}`, each file with the constants it came with (`as_proposed`)."""
        self.higher_is_better, self.rank_by = higher_is_better, rank_by
        self.files: dict[str, list[str]] = {}  # each file's copies, in their groups' order
        for row in sorted(rows, key=lambda row: row["name"]):
            self.files.setdefault(row["name"].rsplit("-", 1)[0], []).append(row["name"])
        self.sets: dict[str, dict] = {}  # a set of constants (its source): the first copy that trained it, its runs
        for row in rows:
            self.sets.setdefault(row["source"], {"name": row["name"], "runs": []})
        self.best_first = {file: list(dict.fromkeys(  # the population run's ranking, the copies without a fitness last
            [row["source"] for row in ranked([r for r in rows if r["name"] in copies])] +
            [row["source"] for row in rows if row["name"] in copies])) for file, copies in self.files.items()}
        for file, source in (proposed or {}).items():  # second, unless the population run ranked it first
            if file in self.files and source not in self.best_first[file][:2]:
                self.sets.setdefault(source, {"name": f"{file}-{PROPOSED}", "runs": []})
                order = [s for s in self.best_first[file] if s != source]
                self.best_first[file] = order[:1] + [source] + order[1:]
        self.last: dict[str, int] = {}  # each set's last rung

    def slots(self, rung: int) -> dict[str, str]:
        """`{group name: source}` of `rung`: each file's copies in their order (the same groups, the same programs),
        named anew (new seeds) as `<copy>r<rung>`."""
        slots = {}
        for file, copies in self.files.items():
            for copy, source in zip(copies, halving_slots(copies, self.best_first[file], rung)):
                slots[f"{copy}r{rung}"] = source
                self.last[source] = rung
        return slots

    def record(self, rung: int, slots: dict[str, str], ranking) -> None:
        """The results of `rung` (`ranking`: its evaluation's, one seed per group); each file's sets best first by
        the mean over every seed they trained with from scratch."""
        for r in ranking:
            self.sets[slots[r.name]]["runs"].append({"task_fitness": r.fitness_mean, "shaped_return": r.shaped_return,
                                                     "episode_length": r.episode_length, "training_auc": r.auc})
        for file in self.files:
            tried = [source for source in self.best_first[file] if self.last.get(source) == rung]
            self.best_first[file] = [r.name for r in self._rank({source: source for source in tried})]

    def _rank(self, sources: dict[str, str]):
        from envcoder.runs.ranking import rank

        return rank({key: self.sets[source]["runs"] or [self.NAN_RUN] for key, source in sources.items()},
                    self.higher_is_better, self.rank_by)

    def rows(self, rungs: int, iteration: int) -> list[dict]:
        """The search's table rows of every set trained in a rung: `rung` its last, `seeds` its runs from scratch;
        those of the last rung `ok` (ranked), the others `dropped`."""
        out = []
        for source, rung in self.last.items():
            (r,) = self._rank({source: source})
            out.append({"name": self.sets[source]["name"], "fitness": r.fitness_mean,
                        "auc": r.auc if math.isfinite(r.auc) else None, "shaped_return": r.shaped_return,
                        "episode_length": r.episode_length, "seeds": len(self.sets[source]["runs"]), "rung": rung,
                        "status": "ok" if rung == rungs else "dropped", "source": source, "iteration": iteration})
        return out


def population_rows(results, record: dict | None, sources: dict[str, str], higher_is_better: bool, written,
                    iteration: int = 0) -> list[dict]:
    """The search's table rows of a population run: each copy with its fitness in the run's final evaluation and
    its source with the constants that its best group trained with last (`record`: the run's `population.json`;
    `written`: `[(source, values)] -> [source]`, `sources_with_constants` where it may parse them)."""
    final = (record or {}).get("final_constants", {})
    diverged = {g.candidate for g in results.groups if g.diverged_at_iteration is not None}
    sign = 1.0 if higher_is_better else -1.0
    rows, tuned = [], []
    for r in results.ranking:
        groups = sorted((g for g in results.group_rows(r.name) if np.isfinite(g.task_fitness)),
                        key=lambda g: -sign * g.task_fitness)
        label = f"{r.name}#{groups[0].seed}" if groups else None
        values = {key.split(":", 1)[1]: value for key, value in final.get(label, {}).items()}
        rows.append({"name": r.name, "fitness": r.fitness_mean, "auc": r.auc if np.isfinite(r.auc) else None,
                     "shaped_return": r.shaped_return, "episode_length": r.episode_length,
                     "status": "diverged" if r.name in diverged else "ok",
                     "source": sources.get(r.name, sources.get(r.name.split("[")[0], "")),  # a sweep's variant
                     "iteration": iteration})
        if values:
            tuned.append((rows[-1], values))
    for (row, _), source in zip(tuned, written([(row["source"], values) for row, values in tuned]) if tuned else []):
        row["source"] = source
    return rows


def population_summary(out: Path, iterations: int) -> dict:
    """What `summary.json` says of an auto run's population runs (`out`: its directory): the copies trained, the
    exploit steps and every takeover (`lineage`, each row with its `generation`: the iteration)."""
    lineage, copies, steps, interval = [], 0, 0, None
    for i in range(iterations):
        record = json.loads((out / f"iter_{i:02d}" / "iteration.json").read_text())
        copies += sum(1 for row in record["table"] if row["status"] != "start" and not row.get("rung"))
        steps += record.get("population", {}).get("exploit_steps", 0)
        interval = interval if interval is not None else record.get("population", {}).get("interval")
        file = out / f"iter_{i:02d}" / "eval" / "population.json"
        lineage += [{"generation": i, **row} for row in (json.loads(file.read_text())["lineage"] if file.exists()
                                                          else [])]
    return {"copies": copies, "interval": interval, "exploit_steps": steps, "takeovers": len(lineage),
            "lineage": lineage}
