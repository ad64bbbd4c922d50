"""A finished run's results: what `results.json` holds, as typed records, and the ranked table.

`envcoder eval` returns a `RunResults` and writes it with `RunResults.write`; `envcoder auto` and the report read it
back with `RunResults.read`. NaN (a diverged candidate's fitness) is `null` in the file and NaN again once read.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Callable, Sequence

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from envcoder.runs.ranking import (Ranked, not_separable_from_best, rank, still_improving,
                                   win_probabilities)
from envcoder.candidates import LoadFailure


@dataclasses.dataclass(frozen=True)
class GroupResult:
    """One (candidate, seed) group's result: its final deterministic evaluation (the mean over its environments'
    episodes), or for a candidate dropped by successive halving its training episodes' over its last rung."""

    candidate: str
    seed: int
    task_fitness: float
    episode_length: float
    shaped_return: float
    training_task_fitness: float
    """The task fitness of the group's last finished training episodes."""
    diverged_at_iteration: int | None
    solved_at_iteration: int | None
    params: dict
    """The candidate's swept constants (`PARAMS` entries), empty for a plain file."""
    eliminated_at_iteration: int | None = None
    """Under `--schedule halving`: the iteration after which the group stopped training (None: it trained to the
    end; then the key is left out of the file)."""

    def to_json(self) -> dict:
        row = dataclasses.asdict(self)
        if row["eliminated_at_iteration"] is None:
            del row["eliminated_at_iteration"]
        return row


@dataclasses.dataclass(frozen=True)
class RunResults:
    """Everything `results.json` holds."""

    task: str
    fitness: str
    """The task fitness that ranks the candidates."""
    fitness_doc: str
    higher_is_better: bool
    schedule: str
    ranking: list[Ranked]
    """Every candidate, best first (see `envcoder.runs.ranking.rank`)."""
    groups: list[GroupResult]
    """Every group, in the run's group order."""
    failures: list[LoadFailure]
    """The candidates left out, with their reasons."""
    timings: dict
    """Seconds of the run's phases (validation, initialization, first iteration, evaluation, total) and rates."""
    win_probability: dict[str, dict[str, float]]
    """`[a][b]`: the probability that candidate a beats b, for candidates that trained equally long."""
    best_still_improving: dict | None
    """Whether the best candidate's training fitness was still rising at the end (`ranking.still_improving`)."""
    not_separable_from_best: list[str]
    """The candidates the best one does not beat at 95% over these seeds."""

    def to_json(self) -> dict:
        data = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        data["ranking"] = [dataclasses.asdict(r) for r in self.ranking]
        data["groups"] = [g.to_json() for g in self.groups]
        data["failures"] = [dataclasses.asdict(f) for f in self.failures]
        return data

    @classmethod
    def from_json(cls, data: dict) -> "RunResults":
        return cls(**{**data, "ranking": [_with_nan(Ranked, r) for r in data["ranking"]],
                      "groups": [_with_nan(GroupResult, g) for g in data["groups"]],
                      "failures": [LoadFailure(**f) for f in data["failures"]]})

    @classmethod
    def read(cls, path: str | Path) -> "RunResults":
        """The results of a run directory (or of its `results.json`)."""
        path = Path(path)
        return cls.from_json(json.loads((path / "results.json" if path.is_dir() else path).read_text()))

    def group_rows(self, candidate: str) -> list[GroupResult]:
        return [g for g in self.groups if g.candidate == candidate]


def ranked_results(task: str, fitness_name: str, fitness, schedule: str, groups: list[GroupResult],
                   failures: list[LoadFailure], timings: dict,
                   training_fitness: Callable[[str], dict[int, float]]) -> RunResults:
    """Every candidate ranked by its groups' task fitness (`groups` in the run's order), with how far to trust the
    ranking: per pair of candidates that trained equally long, the probability that one beats the other (from their
    seeds), whether the best candidate was still improving when training ended (`training_fitness(candidate)`: its
    training episodes' fitness per iteration), and the candidates the best one does not beat at 95%."""
    per_candidate: dict[str, list[dict]] = {}
    for row in groups:
        per_candidate.setdefault(row.candidate, []).append(dataclasses.asdict(row))
    higher = fitness.higher_is_better
    ranking = rank(per_candidate, higher)
    rungs_of = {r.name: r.eliminated_at for r in ranking}
    probability = win_probabilities({name: [row["task_fitness"] for row in rows]
                                     for name, rows in per_candidate.items()}, higher)
    probability = {a: {b: p for b, p in row.items() if rungs_of[a] == rungs_of[b]} for a, row in probability.items()}
    improving = None
    if ranking:
        series = training_fitness(ranking[0].name)
        improving = still_improving(list(series), list(series.values()), higher) if series else None
    return RunResults(task=task, fitness=fitness_name, fitness_doc=fitness.doc, higher_is_better=higher,
                      schedule=schedule, ranking=ranking, groups=groups, failures=list(failures), timings=timings,
                      win_probability=probability, best_still_improving=improving,
                      not_separable_from_best=not_separable_from_best(ranking, higher))


def print_results(console: Console, results: RunResults) -> None:
    """The ranked table and what to make of it."""
    print_table(console, ranking_table(results.ranking, f"{results.fitness}: {results.fitness_doc}",
                                       results.win_probability))
    tied = results.not_separable_from_best
    if tied:
        console.print(f"not separable at 95%: {results.ranking[0].name} does not beat {', '.join(tied)} at 95% "
                      "over these seeds; more seeds would tell them apart", highlight=False)
    improving = results.best_still_improving
    if improving and improving["improving"]:
        console.print(f"[yellow]still improving[/yellow]: the best candidate's training fitness went from "
                      f"{improving['earlier_mean']:.3f} to {improving['later_mean']:.3f} over iterations "
                      f"{improving['from_iteration']}–{improving['to_iteration']}; longer training may change "
                      "the ranking (more --iterations)", highlight=False)


def _with_nan(record: type, row: dict):
    """`record(**row)` with the float fields that JSON holds as null (NaN) NaN again."""
    floats = {f.name for f in dataclasses.fields(record) if f.type == "float"}
    return record(**{k: math.nan if v is None and k in floats else v for k, v in row.items()})


def ranking_table(ranking: Sequence[Ranked], fitness_doc: str, win_probability: dict | None = None) -> Table:
    """The ranking as a table; with `win_probability` (`RunResults.win_probability`), a column of the probability
    that each candidate beats the next one down. Every number stays on one line (a row fits 100 columns unless a
    candidate's name is long)."""
    table = Table(title=f"Ranking by task fitness ({fitness_doc})", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, collapse_padding=True)
    columns = ["rank", "candidate", "fitness", "95% CI", "seeds", "return", "length"]
    if win_probability is not None:
        columns.append("P(>next)")
    if any(r.eliminated_at is not None for r in ranking):
        columns.append("dropped at")
    for column in columns:
        table.add_column(column, justify="left" if column == "candidate" else "right", no_wrap=column != "candidate")
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


def print_table(console: Console, table: Table) -> None:
    """`table` on `console`; where that is not a terminal (a log file, `| tee`, a batch job), as wide as the table
    needs, so that no number is cut at the console's 80 columns."""
    if console.is_terminal:
        console.print(table)
        return
    width, console_width = Measurement.get(console, console.options.update(width=10_000), table).maximum, console.width
    console.width = max(width, console_width)
    try:
        console.print(table)
    finally:
        console.width = console_width
