"""A finished run's results: what `results.json` holds, as typed records, and the ranked table.

`envcoder eval` returns a `RunResults` and writes it with `RunResults.write`; `envcoder auto` and the report read it
back with `RunResults.read`. NaN (a diverged candidate's fitness) is `null` in the file and NaN again once read.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path
from typing import Callable, Sequence

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from envcoder.runs.ranking import (FITNESS_TIE, Ranked, beats_next, episodes_end_early, fitness_tied,
                                   not_separable_from_best, rank, separation, still_improving, tied_with_best,
                                   win_probabilities)
from envcoder.candidates import LoadFailure
from envcoder.text import one_line, shown


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
    training_auc: float = math.nan
    """Learning speed: the area under the group's training curve of the task fitness
    (`envcoder.runs.ranking.learning_auc`)."""
    training_best: float = math.nan
    """The best task fitness of the episodes finished in any one training iteration (`envcoder.runs.ranking.
    best_in_training`): the papers' measure (IsaacGymEnvs' `consecutive_successes` at its best over training), beside
    the final deterministic evaluation's."""

    @classmethod
    def of(cls, group, means, last_fitness: float, diverged_at: int, solved_at: int,
           eliminated_at: int | None = None) -> "GroupResult":
        """The row of a run's `group` (`envcoder.env.grouping.Group`) from its `means` (task fitness, episode length,
        shaped return) and its learner's status (`GroupedLearner.group_status`: the iteration at which it diverged
        or was solved, −1 where it was not)."""
        return cls(group.candidate.name, group.seed, *(float(m) for m in means), float(last_fitness),
                   int(diverged_at) if diverged_at >= 0 else None, int(solved_at) if solved_at >= 0 else None,
                   dict(group.candidate.params), eliminated_at)

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
    """The candidates the best one does not beat at 95% over these seeds (those tied with it left out)."""
    rank_by: str = "final"
    """The primary ranking key (`envcoder.runs.ranking.RANK_BY`)."""
    fitness_bounds: tuple = (None, None)
    """The fitness's declared range, `(low, high)`: the intervals are clipped to it."""
    tied_with_best: list[str] = dataclasses.field(default_factory=list)
    """The candidates whose fitness equals the best's, ordered by learning speed (more seeds would not separate
    them)."""
    separation: dict | None = None
    """Whether the best is separable from the runner-up at 95% (`envcoder.runs.ranking.separation`)."""
    seed_rounds: dict | None = None
    """With seeds added until separable (`envcoder.runs.seed_rounds`): its rounds and why they stopped; None
    otherwise."""
    own_control: dict = dataclasses.field(default_factory=dict)
    """`{name: {"policy_share", "task_share"}}`: candidates whose own `compute_torque` decides most of the motor
    command without the policy (`envcoder.candidates.own_control.own_control`)."""
    episodes_end_early: dict | None = None
    """Where every candidate's policy fails early, the longest-lived one (`ranking.episodes_end_early`); None
    otherwise, and then the key is left out of the file."""

    def to_json(self) -> dict:
        data = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        data["ranking"] = [dataclasses.asdict(r) for r in self.ranking]
        data["groups"] = [g.to_json() for g in self.groups]
        data["failures"] = [dataclasses.asdict(f) for f in self.failures]
        if not self.own_control:  # written only where a candidate is flagged: results.json stays as it was
            del data["own_control"]
        if self.episodes_end_early is None:
            del data["episodes_end_early"]
        return data

    @classmethod
    def from_json(cls, data: dict) -> "RunResults":
        data = {**data, "fitness_bounds": tuple(data.get("fitness_bounds", (None, None)))}
        return cls(**{**data, "ranking": [_with_nan(Ranked, r) for r in data["ranking"]],
                      "groups": [_with_nan(GroupResult, g) for g in data["groups"]],
                      "failures": [LoadFailure(**f) for f in data["failures"]]})

    @classmethod
    def read(cls, path: str | Path) -> "RunResults":
        """The results of a run directory (or of its `results.json`)."""
        path = Path(path)
        file = path / "results.json" if path.is_dir() else path
        try:
            return cls.from_json(json.loads(file.read_text()))
        except FileNotFoundError:
            raise
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{file} is damaged ({type(err).__name__}: {one_line(err, 200)}): run the evaluation "
                             "again, or restore the file") from None

    def group_rows(self, candidate: str) -> list[GroupResult]:
        return [g for g in self.groups if g.candidate == candidate]


def ranked_results(task: str, fitness_name: str, fitness, schedule: str, groups: list[GroupResult],
                   failures: list[LoadFailure], timings: dict,
                   training_fitness: Callable[[str], dict[int, float]], rank_by: str = "final",
                   own_control: dict | None = None, max_episode_length: int | None = None) -> RunResults:
    """Every candidate ranked by its groups' task fitness, ties by learning speed (or by learning speed first:
    `rank_by`; `groups` in the run's order), with how far to trust the ranking: per pair of candidates that trained
    equally long, the probability that one beats the other (from their seeds), whether the best candidate was still
    improving when training ended (`training_fitness(candidate)`: its training episodes' fitness per iteration),
    the candidates the best one does not beat at 95%, those tied with it, whether it is separable from the
    runner-up, and (given the task's `max_episode_length`) whether every candidate's policy fails early."""
    per_candidate: dict[str, list[dict]] = {}
    for row in groups:
        per_candidate.setdefault(row.candidate, []).append(dataclasses.asdict(row))
    higher = fitness.higher_is_better
    ranking = rank(per_candidate, higher, rank_by, fitness.bounds)
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
                      not_separable_from_best=not_separable_from_best(ranking, higher), rank_by=rank_by,
                      fitness_bounds=tuple(fitness.bounds), tied_with_best=tied_with_best(ranking),
                      separation=separation(ranking, higher, rank_by), own_control=dict(own_control or {}),
                      episodes_end_early=episodes_end_early(ranking, max_episode_length))


def print_results(console: Console, results: RunResults) -> None:
    """The ranked table and what to make of it."""
    beats = beats_next(results.ranking, results.win_probability, results.higher_is_better, results.rank_by)
    print_table(console, lambda drop: ranking_table(results.ranking, f"{results.fitness}: {results.fitness_doc}",
                                                    beats, results.fitness_bounds, drop))
    best = results.ranking[0] if results.ranking else None
    if any(r.seeds == 1 for r in results.ranking):
        console.print("one seed: 95% CI and P(>next) are - (--seeds 2 or more gives them)", highlight=False)
    if any(math.isnan(r.auc) for r in results.ranking):
        console.print("AUC -: no training episode ended (episodes outlast training: train longer)", highlight=False)
    if results.tied_with_best:
        console.print(f"tied: {tied_names([best.name, *results.tied_with_best])} reach the same fitness "
                      f"({best.fitness_mean:.3f}, to within {FITNESS_TIE:g}); ranked by learning speed (AUC: the "
                      "mean training fitness over the iterations)" + _speed_verdict(results), highlight=False)
    unseparated = results.not_separable_from_best
    if unseparated:
        console.print(f"not separable at 95%: {shown(best.name)} does not beat "
                      f"{', '.join(map(shown, unseparated))} at 95% "
                      "over these seeds; more seeds would tell them apart", highlight=False)
    if results.seed_rounds:
        console.print(one_line(results.seed_rounds["verdict"]), markup=False, highlight=False)  # names: never markup
    for name, share in results.own_control.items():
        console.print(f"[yellow]its own controller[/yellow]: {shown(name)}'s compute_torque decides the motor command "
                      f"with the policy's action deciding {share['policy_share']:.0%} of it on the sample states (the "
                      f"task's own mapping: {share['task_share']:.0%}): its fitness is more its file's than a "
                      "learned policy's", highlight=False)
    early = results.episodes_end_early
    if early:
        console.print(f"[yellow]every policy fails early[/yellow]: {shown(early['candidate'])}'s episodes last "
                      f"longest, {early['episode_length']:.0f} of {early['max_episode_length']:,} steps on average; "
                      "the ranking compares policies that all fail the task at this budget: train longer "
                      "(--train-iterations) or with more environments (--envs-per-candidate) before trusting it",
                      highlight=False)
    improving = results.best_still_improving
    if improving and improving["improving"]:
        console.print(f"[yellow]still improving[/yellow]: the best candidate's training fitness went from "
                      f"{improving['earlier_mean']:.3f} to {improving['later_mean']:.3f} over iterations "
                      f"{improving['from_iteration']}–{improving['to_iteration']}; longer training may change "
                      "the ranking (more --iterations)", highlight=False)


TIED_SHOWN = 4
"""Names a tie note shows; the rest are counted (41 candidates tied at 1.000 made a note of 1,000 characters)."""


def tied_names(names: Sequence[str]) -> str:
    """`a, b and c`, or for more than `TIED_SHOWN` names the first ones and how many more."""
    shown_names = [shown(n) for n in names]
    if len(names) > TIED_SHOWN:
        return f"{', '.join(shown_names[:TIED_SHOWN - 1])} and {len(names) - TIED_SHOWN + 1} more"
    return f"{', '.join(shown_names[:-1])} and {shown_names[-1]}"


def _speed_verdict(results: RunResults) -> str:
    """How surely the best learns faster than the runner-up tied with it."""
    split = results.separation
    if not split or split["by"] != "auc" or split["runner_up"] not in results.tied_with_best:
        return ""
    if split["p_best_beats"] is None:
        return "; one seed: how surely it learns faster is unknown"
    return (f"; it learns faster than {split['runner_up']} with P = {split['p_best_beats']:.2f}"
            + (" (separable at 95%)" if split["separable"] else " (not separable at 95%)"))


def _with_nan(record: type, row: dict):
    """`record(**row)` with the float fields that JSON holds as null (NaN) NaN again."""
    floats = {f.name for f in dataclasses.fields(record) if f.type == "float"}
    return record(**{k: math.nan if v is None and k in floats else v for k, v in row.items()})


def ranking_table(ranking: Sequence[Ranked], fitness_doc: str, win_probability: dict | None = None,
                  bounds=(None, None), drop: Sequence[str] = ()) -> Table:
    """The ranking as a table; with `win_probability` (`{a: {b: p}}`, e.g. `envcoder.runs.ranking.beats_next`), a
    column of the probability that each candidate beats the next one down; `AUC` is the learning speed
    (`Ranked.auc`). Intervals are clipped to `bounds`, the fitness's range (the caption says so). Every number stays
    on one line (a row fits 100 columns unless a candidate's name is long), and a name is folded, never cut; the
    columns named in `drop` are left out (`print_table`, on a narrow terminal)."""
    caption = None
    if any(b is not None for b in bounds) and any(r.seeds > 1 for r in ranking):
        caption = "95% CI clipped to the fitness's range [{}, {}]".format(*("" if b is None else f"{b:g}"
                                                                             for b in bounds))
    table = Table(title=f"Ranking by task fitness ({fitness_doc})", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, collapse_padding=True, caption=caption, caption_justify="left")
    columns = ["rank", "candidate", "fitness", "95% CI", "seeds", "AUC", "return", "length"]
    if win_probability is not None:
        columns.append("P(>next)")
    if any(r.eliminated_at is not None for r in ranking):
        columns.append("dropped at")
    longest = max((len(shown(r.name)) for r in ranking), default=9)
    table.foldable = max(0, longest - 24)
    for column in columns:
        if column == "candidate":
            table.add_column(column, justify="left", overflow="fold", min_width=min(longest, 24))
        else:
            table.add_column(column, justify="right", no_wrap=True)
    digits = fitness_digits([r.fitness_mean for r in ranking], [fitness_tied(a, b) for a, b in zip(ranking,
                                                                                                  ranking[1:])])
    for i, r in enumerate(ranking, 1):
        ci = f"[{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.seeds > 1 else "-"
        row = [str(i), shown(r.name), f"{r.fitness_mean:.{digits}f}", ci, str(r.seeds),
               "-" if math.isnan(r.auc) else f"{r.auc:.3f}",
               f"{r.shaped_return:.2f}", f"{r.episode_length:.0f}"]
        if win_probability is not None:
            following = ranking[i].name if i < len(ranking) else None
            p = win_probability.get(r.name, {}).get(following)
            row.append("-" if p is None else f"{p:.2f}")
        if "dropped at" in columns:  # the iteration where a halving schedule stopped training it
            row.append("-" if r.eliminated_at is None else str(r.eliminated_at))
        table.add_row(*row)
    for column in [c for c in table.columns if c.header in drop]:  # with its cells
        table.columns.remove(column)
    return table


def fitness_digits(values: list[float], tied: list[bool] | None = None, fewest: int = 3, most: int = 7) -> int:
    """Decimals that show every difference between neighbouring fitness values of a ranking that are not tied
    (`tied[i]`: values i and i + 1 are; at least `fewest`): a candidate ranked below another on fitness never shows
    the same number (0.99998 under 1.000 read as a tie that the table broke against its learning speed)."""
    tied = tied or [False] * max(len(values) - 1, 0)
    for digits in range(fewest, most + 1):
        if all(a == b or same or f"{a:.{digits}f}" != f"{b:.{digits}f}" for a, b, same in zip(values, values[1:], tied)
               if not (math.isnan(a) or math.isnan(b))):
            return digits
    return most


NARROW_DROPS = ("length", "return", "P(>next)", "seeds", "AUC", "95% CI")
"""The ranking's columns a narrow terminal leaves out, first to last, until the table fits: the rank, the name and
the fitness always show."""


def print_table(console: Console, make: Table | Callable[[Sequence[str]], Table]) -> None:
    """The table `make(columns to leave out)` (or a table as it is) on `console`. On a terminal narrower than the
    whole table, columns are left out (`NARROW_DROPS`) until every number fits whole and names are folded (at 60
    columns a ranking read `rank fitne… 95% CI see…` with no names); where the console is not a terminal (a log
    file, `| tee`, a batch job), as wide as the table needs, so that no number is cut at the console's 80
    columns."""
    def needs(table: Table) -> int:
        minimum = Measurement.get(console, console.options.update(width=10_000), table).minimum
        return minimum - getattr(table, "foldable", 0)  # a long name folds down to its column's min_width

    def fits(table: Table) -> bool:  # every header and number whole at the console's width
        with console.capture() as captured:
            console.print(table, soft_wrap=False)
        text = captured.get()
        return "…" not in text and all(str(c.header) in text for c in table.columns)

    if isinstance(make, Table):
        make = functools.partial(lambda table, drop: table, make)
    table = make(())
    if console.is_terminal:
        dropped = []
        for column in NARROW_DROPS:
            if needs(table) <= console.width and fits(table):
                break
            dropped.append(column)
            table = make(dropped)
        console.print(table, soft_wrap=False)  # a run's console soft-wraps its messages: a table it laid out wider
        if dropped:                            # than the terminal, with its last column's values blank
            console.print(f"(columns left out at {console.width} columns: {', '.join(dropped)}; a wider terminal or "
                          "the run's report shows them)", highlight=False)
        return
    width, console_width = Measurement.get(console, console.options.update(width=10_000), table).maximum, console.width
    console.width = max(width, console_width)
    try:
        console.print(table, soft_wrap=False)
    finally:
        console.width = console_width
