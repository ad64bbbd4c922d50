"""What `envcoder auto` runs: its settings record (saved as `auto.json`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from envcoder.runs.eval_settings import EvalSettings
from envcoder.settings import RunSettings, from_record, to_record
from envcoder.text import plural


PROPOSERS = ("population", "offline", "jitter", "random", "seeds")
"""`AutoSettings.proposer`'s choices."""

POPULATION_PROPOSERS = ("population", "random", "seeds")
"""The proposers whose candidates train as `copies` groups each, then in halving rungs
(`AutoRun._population_iteration`, `envcoder.search.loop`)."""

BUDGET_ITERATIONS = 20
"""The most iterations a search with a budget (`--budget`) and no `--search-iterations` runs."""

SIZES = {
    "gpu": {"candidates_per_iteration": 12, "iterations": 1, "copies": 4, "envs_per_candidate": 256,
            "train_iterations": 300, "final_envs_per_candidate": 1024, "final_seeds": 4, "final_max_seeds": 4,
            "final_top": 2},
    "cpu": {"candidates_per_iteration": 4, "iterations": 1, "copies": 2, "envs_per_candidate": 64,
            "train_iterations": 30, "final_envs_per_candidate": "the search's", "final_seeds": 4, "final_max_seeds": 4,
            "final_top": 2},
}
"""`envcoder auto`'s defaults by device kind: on an accelerator, the setting the search benchmark measures
(docs/benchmarks/search.md: about 8 minutes of one GPU on Anymal); on a CPU, a small search; with what
`TASK_SIZES` changes of either for a task. `train_iterations` is a cap on the task's own
`max_epochs` (Cartpole's 60); on a CPU the final evaluation trains as many envs per candidate as the search's."""


TASK_SIZES = {
    "gpu": {"Humanoid": {"candidates_per_iteration": 5, "copies": 2, "envs_per_candidate": 1024, "halving_rungs": 0,
                         "final_top": 1}},
    "cpu": {"Cartpole": {"candidates_per_iteration": 8, "copies": 8, "iterations": 2, "train_iterations": 20,
                         "final_seeds": 16, "final_max_seeds": 16}},
}
"""What `SIZES` changes for a task, by device kind. On a GPU, the Humanoid: at 256 or 512 envs per group × 300
iterations a Humanoid has hardly begun to learn (0.4 and 0.27 m/s at most), so the search cannot rank its
candidates; at 1,024 envs the same files end at 0 to 2.1 m/s (docs/benchmarks/search.md). So its search trains
in the final's groups: 6 files (5 children and the start) × 2 copies × 1,024 envs (the start trains one copy: 11
groups), about as many environments as the 49 groups of 256 of `SIZES["gpu"]`. With a halving rung and two finds in
the final that took about 12 minutes on one GPU; without the rung (each file ranked by its better copy) and with
the best find alone in the final, 7 minutes from launch. On a CPU, Cartpole: by 30 training iterations
its fitness alone and its own shaping both reach the ceiling (1.0), so the search cannot rank there; at 20 the
shaping is ahead (0.949 against 0.771, 32 seeds each), and telling files that far apart takes more copies and a final
of 16 seeds. Five searches from the fitness alone at these sizes reach a median HNS of 1.23, at `SIZES["cpu"]` 0.58."""

SIZED = tuple(dict.fromkeys([*SIZES["gpu"], *(name for tasks in TASK_SIZES.values() for sizes in tasks.values()
                                                for name in sizes)]))
"""The settings that `AutoSettings.resolved` fills in where they are unset."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class AutoSettings(RunSettings):
    """What `envcoder auto` runs (saved as `auto.json`): the settings every run shares (`RunSettings`) and these."""

    task_description: str | None = None
    """What the robot should do, in words (default: the task's own one-line description)."""
    llm: str | None = None
    """Model that proposes candidates; None: the offline proposer, which mutates the best candidates and needs no
    network."""
    proposer: str = "population"
    """How candidates are searched. "population": each iteration's candidates (the LLM's, or without `llm` the
    offline proposer's structural children, next to the starting files or the best finds so far) train as `copies`
    groups each, whose constants population-based training tunes in the run (`envcoder.search.population`).
    "offline": each candidate trains once as written (without `llm`, the offline proposer's children by structural
    moves and constant jitter, `envcoder.search.proposers.OfflineProposer`). Two baselines of the search benchmark
    (docs/benchmarks/search.md), without `llm`: "jitter", the offline proposer by constant jitter alone (the search
    before structural moves), and "random", the starting files' copies with random constants and no exploit step
    (a random search over the same constants). "seeds": the population search without population-based training
    (a baseline, with or without `llm`): each candidate's `copies` groups all train its constants as written, with
    their own seeds and no exploit step, then the same halving rungs retrain it from scratch, so that each candidate
    is ranked by its mean over every seed (`envcoder.search.population`)."""
    copies: int | None = None
    """With "population", "random" or "seeds": the groups that each candidate of an iteration trains as."""
    halving_rungs: int | None = None
    """With "population", "random" or "seeds": rungs of successive halving after the population run, in which each
    file's best constants so far (the population run's best and the file's own) train again from scratch with new
    seeds in the groups of those dropped, nothing recompiled
    (`envcoder.search.population.halving_slots`). None: as many as halve `copies` to one (2 for 4
    copies), except for the Humanoid on a GPU, 0; 0: the population run's own ranking decides."""
    provider: str | None = None
    """`openai` or `anthropic`; None follows from the model name."""
    base_url: str | None = None
    """An OpenAI-compatible server (vLLM, Ollama, ...), or another endpoint for the SDK."""
    candidates_per_iteration: int | None = None
    """Candidates proposed and evaluated together per iteration."""
    iterations: int | None = None
    """Search iterations (with `budget_minutes`: at most this many, by default `BUDGET_ITERATIONS`)."""
    budget_minutes: float | None = None
    """Minutes the search may take from its start, final evaluation included: after each iteration it goes on only
    where another iteration and the final evaluation are expected to fit (each estimated from the iterations so far
    and their environments); where only a smaller iteration fits, a population search's last trains fewer copies
    (`next_iteration`); it says so where it ends or shrinks; the final is made smaller where what is left is less
    than it takes (`final_within_budget`). No iteration trains past it: an evaluation's training stops where the
    budget ends and its policies are ranked as they are (`envcoder.runs.evaluation.run_evaluation`'s `until`), and
    a halving rung starts only where the last one's time fits before the end; where the first iteration takes the
    whole budget, the final, made as small as it goes, runs after it, and the search says what to make smaller."""
    retries: int = 2
    """How often a candidate that fails validation is sent back to be fixed (or redrawn)."""
    envs_per_candidate: int | None = None
    """Parallel environments of each (candidate, seed) group in the search's evaluations."""
    train_iterations: int | None = None
    """Training iterations per evaluation: by default the task's `max_epochs` up to the device's cap below, or an
    `ALGO.max_epochs=N` override."""
    seeds: int = 1
    """Seeds per candidate during the search."""
    schedule: str = "flat"
    """How each search iteration's evaluation spends its budget (`EvalSettings.schedule`): "flat" trains every
    candidate to the end; "halving" (two rungs) stops the worse half of the candidates halfway and gives their
    environments to the others. The final evaluation is always flat. Flat is the default because halving saved
    no GPU time at equal rank fidelity in docs/benchmarks/fidelity.md."""
    final_seeds: int | None = None
    """Seeds per finalist of the final evaluation's first round."""
    final_max_seeds: int | None = None
    """The final evaluation adds rounds of `final_seeds` seeds until the best finalist is separable from the runner-up
    at 95% or a finalist has this many seeds (`EvalSettings.seeds_until_separable`)."""
    final_top: int | None = None
    """How many of the best finds the final evaluation trains again, next to the best starting file and the task's
    own default shaping (`task_default`)."""
    final_envs_per_candidate: int | None = None
    """Envs per candidate of the final evaluation, which trains as long as the search's evaluations."""
    seed: int = 0
    """The first seed."""
    initial: tuple[Path, ...] = ()
    """Starting candidate files: evaluated in the first iteration, shown to an LLM, mutated offline."""
    validation_workers: int = 2
    """Validation worker processes kept up for the whole run."""
    request_timeout_s: float = 120.0
    """Seconds before an LLM request is retried."""
    api_retries: int = 4
    """Retries with backoff of a failed LLM request, by the SDK."""
    concurrency: int = 4
    """Proposer calls in flight at once."""
    temperature: float | None = None
    """Sampling temperature (None: the model's)."""
    max_tokens: int = 4096
    """Longest response in tokens."""
    price: tuple[float, float] | None = None
    """USD per million (input, output) tokens, for models without a known list price."""

    def to_json(self) -> dict:
        return to_record(self)

    @classmethod
    def from_json(cls, data: dict) -> "AutoSettings":
        data = dict(data)
        if "ppo" in data:  # runs started before --algo
            data["overrides"] = data.pop("ppo")
        data.setdefault("final_envs_per_candidate", data["envs_per_candidate"])  # runs started before it
        data.setdefault("proposer", "offline")  # runs started before the population search
        data.setdefault("halving_rungs", 0)  # runs started before its halving rungs
        return from_record(cls, data)

    def evaluation(self, functions: Path, out: Path, seeds: int, schedule: str = "flat", envs: int | None = None,
                   **changes) -> EvalSettings:
        """The settings of one of the run's evaluations (`envcoder eval`'s record): the candidates of `functions`
        trained into `out` with `seeds` seeds from `seed`, under `schedule` (halving: two rungs), with `envs`
        environments per candidate (None: `envs_per_candidate`); every setting that every run has is this run's
        (`RunSettings`)."""
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(RunSettings)}
        return EvalSettings(**{
            **shared, "functions": functions, "out": out, "envs_per_candidate": envs or self.envs_per_candidate,
            "train_iterations": self.train_iterations, "seeds": tuple(range(self.seed, self.seed + seeds)),
            "schedule": schedule, "rungs": 2 if schedule == "halving" else None,  # more decide too early (fidelity.md)
            "overrides": dict(self.overrides), **changes})

    def check(self) -> None:
        """Settings that cannot go together, refused before anything is written."""
        if self.proposer not in PROPOSERS:
            raise ValueError(f"--proposer {self.proposer!r}: choose one of {', '.join(PROPOSERS)}")
        if self.llm is not None and self.proposer in ("jitter", "random"):
            raise ValueError(f"--proposer {self.proposer} is a search without a model: leave out --llm, or choose "
                             "--proposer population (the LLM writes code, the population tunes its constants) or "
                             "offline (the LLM's candidates train as written)")
        if self.budget_minutes is not None and self.budget_minutes <= 0:
            raise ValueError(f"--budget {self.budget_minutes:g}: pass a number of minutes above 0")
        if self.copies is not None and self.copies < 1:
            raise ValueError(f"--copies {self.copies}: pass 1 or more")
        if self.halving_rungs is not None and self.halving_rungs < 0:
            raise ValueError(f"--halving-rungs {self.halving_rungs}: pass 0 or more")

    def resolved(self) -> "AutoSettings":
        """These settings with every default that depends on the device and the task filled in (`SIZES`,
        `TASK_SIZES`; saved so: a resumed run keeps them on another machine, and under later defaults)."""
        unset = [name for name in SIZED if getattr(self, name) is None]
        if not unset:
            return self
        if self.budget_minutes is not None and self.iterations is None:
            return dataclasses.replace(self, iterations=BUDGET_ITERATIONS).resolved()
        import jax

        from envcoder.rl.config import ALGORITHMS, task_settings
        from envcoder.tasks import get_task

        task = get_task(self.task)
        kind = "cpu" if jax.default_backend() == "cpu" else "gpu"
        sizes = {**SIZES[kind], **TASK_SIZES[kind].get(task.name, {})}
        task_epochs = task_settings(task, self.algo).get("max_epochs", ALGORITHMS[self.algo].config.max_epochs)
        sizes["train_iterations"] = self.overrides.get("max_epochs") or min(sizes["train_iterations"], task_epochs)
        if self.preset is not None:  # the preset's budget, whole, in the search's evaluations and in the final
            preset = task.preset(self.preset)
            envs = preset.get("envs_per_candidate") or sizes["envs_per_candidate"]
            epochs = (preset.get(self.algo) or {}).get("max_epochs") or sizes["train_iterations"]
            sizes.update(envs_per_candidate=envs, final_envs_per_candidate=envs,
                         train_iterations=self.overrides.get("max_epochs") or epochs)
        if not isinstance(sizes["final_envs_per_candidate"], int):  # on a CPU: the search's
            sizes["final_envs_per_candidate"] = self.envs_per_candidate or sizes["envs_per_candidate"]
        sizes.setdefault("halving_rungs", (self.copies or sizes["copies"]).bit_length() - 1)  # as many as halve them
        return dataclasses.replace(self, **{name: sizes[name] for name in unset})

    def next_iteration(self, records: list[dict], starts: int, elapsed: float) -> tuple[dict | None, str | None]:
        """The sizes of the iteration after `records` (their `iteration.json`) where `budget_minutes` leaves room
        for it and the final evaluation: `{}` as set; with fewer `copies` (and halving rungs) where only a smaller
        iteration of a population, random or seeds search fits; None where none fits and the search ends. With what
        was decided, in words (None where the next iteration runs as set). An iteration is expected to take the
        fixed part of those so far (validation, compilation) and their training at its size (`iteration_seconds`);
        the final, as `final_seconds` says; `elapsed`: this process's time so far, or, where the iterations were
        read back, the time they took when they ran."""
        if self.budget_minutes is None or not records:
            return {}, None
        final = self.final_seconds(records, starts, self.final_top, max(self.final_max_seeds, self.final_seeds))
        spent, each, budget = max(elapsed, sum(r.get("seconds", 0.0) for r in records)), \
            self.iteration_seconds(records, self.copies, starts), 60 * self.budget_minutes
        if spent + each + final <= budget:
            return {}, None
        done = f"budget: {plural(len(records), 'iteration')} in {spent / 60:.1f} min; another"
        would = f"(about {each / 60:.1f} min) and the final evaluation (about {final / 60:.1f} min) would pass " \
                f"{self.budget_minutes:g} min"
        fewer = range(self.copies - 1, 0, -1) if self.proposer in POPULATION_PROPOSERS else ()
        copies = next((c for c in fewer if spent + self.iteration_seconds(records, c, starts) + final <= budget),
                      None)
        if copies is not None:
            sizes = {"copies": copies, "halving_rungs": self.rungs_for(copies)}
            rungs = f", {plural(sizes['halving_rungs'], 'halving rung')} (set: {self.halving_rung_count})" \
                if sizes["halving_rungs"] != self.halving_rung_count else ""
            return sizes, (f"{done} as set {would}: the next trains {plural(copies, 'copy', 'copies')} of each "
                           f"candidate (set: {self.copies}){rungs}, about "
                           f"{self.iteration_seconds(records, copies, starts) / 60:.1f} min")
        message = f"{done} {would}: the search ends here"
        if spent + final > budget:  # the iterations took it all (their training stops where it ends)
            message += (f"; with the final it takes about {(spent + final) / 60:.1f} min, past the budget: the final "
                        "is made smaller to fit what is left, and a smaller iteration (--candidates-per-iteration, "
                        "--copies, --envs-per-candidate) fits it better")
        return None, message

    def rungs_for(self, copies: int) -> int:
        """The halving rungs of an iteration of `copies` copies: the set rungs (`halving_rung_count`), at most as
        many as halve `copies` to one where `--budget` made the copies fewer than set."""
        rungs = self.halving_rung_count
        return rungs if copies == self.copies else min(rungs, copies.bit_length() - 1)

    def iteration_seconds(self, records: list[dict], copies: int, starts: int = 1) -> float:
        """An iteration's expected seconds at `copies` copies, from the iterations `records` (`starts`: the
        starting files). Each record's time, made of what did not train (its `seconds` less its
        `training_seconds`, each evaluation's training after its first iteration: proposing, validating, compiling),
        its population run's training and its halving rungs' times the rungs of `copies`, is scaled by
        max(1, G / its groups), G the next iteration's groups at most; the mean of those. A run is taken to train
        no faster with fewer groups (on a GPU below its capacity it hardly does: docs/benchmarks/search.md) and
        no more than in proportion with more, so that the estimate is not short of what the iteration takes. A
        search without copies: the iterations' mean."""
        if self.proposer not in POPULATION_PROPOSERS:
            return sum(r["seconds"] for r in records) / len(records)
        from envcoder.search.population import CARRIED

        groups = copies * (starts if self.proposer == "random" else self.candidates_per_iteration + CARRIED)
        runs = [_runs(r, self.rungs_for(r.get("copies", self.copies))) for r in records]
        rungs = [seconds for each in runs for seconds in each[1:]]
        rung = sum(rungs) / len(rungs) if rungs else None
        total = 0.0
        for record, each in zip(records, runs):
            seconds = record["seconds"] - sum(each[1:]) + self.rungs_for(copies) * (
                sum(each[1:]) / len(each[1:]) if each[1:] else rung or each[0])
            total += seconds * max(1.0, groups / record.get("population", {}).get("groups", groups))
        return total / len(records)

    def final_seconds(self, records: list[dict], starts: int, top: int, seeds: int) -> float:
        """The final evaluation's expected seconds: as long per environment trained as the iterations `records` took,
        for its `top` finds, the `starts` starting files and the task default × `seeds` seeds."""
        seconds = sum(r.get("seconds", 0.0) for r in records)
        envs = sum(r.get("environments", 0) for r in records)
        return seconds / max(envs, 1) * (top + starts + 1) * seeds * self.final_envs_per_candidate

    def final_within_budget(self, records: list[dict], starts: int, elapsed: float) -> tuple[dict, str | None]:
        """The final evaluation's sizes (`final_top`, `final_seeds`, `final_max_seeds`) that fit what `budget_minutes`
        leaves after the iterations `records` (`next_iteration`'s `elapsed`), and what changed, in words (None where
        the final fits as set). It is made smaller in this order until it fits: no rounds of added seeds
        (`final_max_seeds` down to `final_seeds`), fewer seeds (down to 2, the fewest that give an interval), fewer
        finds (down to 1); the smallest may still pass the budget, and the words say so."""
        given = {"final_top": self.final_top, "final_seeds": self.final_seeds,
                 "final_max_seeds": max(self.final_max_seeds, self.final_seeds)}
        if self.budget_minutes is None or not records:
            return given, None
        left = 60 * self.budget_minutes - max(elapsed, sum(r.get("seconds", 0.0) for r in records))
        floor = min(2, self.final_seeds)
        fewer_seeds = range(self.final_seeds - 1, floor - 1, -1)
        smaller = [given, {**given, "final_max_seeds": self.final_seeds},
                   *({**given, "final_seeds": n, "final_max_seeds": n} for n in fewer_seeds),
                   *({"final_top": top, "final_seeds": floor, "final_max_seeds": floor}
                     for top in range(self.final_top - 1, 0, -1))]

        def seconds(sizes: dict) -> float:
            return self.final_seconds(records, starts, sizes["final_top"], sizes["final_max_seeds"])
        sizes = next((s for s in smaller if seconds(s) <= left), smaller[-1])
        if sizes == given:
            return given, None
        fits = "to fit" if seconds(sizes) <= left else "and still passes it"
        return sizes, (f"budget: {max(left, 0) / 60:.1f} min left; the final trains "
                       f"{plural(sizes['final_top'], 'find')} × {sizes['final_seeds']} seeds{_up_to(sizes)} (set: "
                       f"{plural(given['final_top'], 'find')} × {given['final_seeds']} seeds{_up_to(given)}), about "
                       f"{seconds(sizes) / 60:.1f} min, {fits}")

    @property
    def halving_rung_count(self) -> int:
        """The halving rungs of a population or random search (`halving_rungs`, its default resolved; not
        `EvalSettings.rungs`, the rungs of one evaluation's `--schedule halving`)."""
        if self.proposer not in POPULATION_PROPOSERS:
            return 0
        return self.copies.bit_length() - 1 if self.halving_rungs is None else self.halving_rungs


class AutoRunExistsError(FileExistsError):
    pass


def load_settings(run: Path) -> AutoSettings:
    """The settings of an existing auto run (for `--resume`)."""
    path = Path(run) / "auto.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: {run} is not an `envcoder auto` run directory")
    from envcoder.runs.directory import read_json

    try:
        settings = AutoSettings.from_json(read_json(path))
    except (KeyError, TypeError) as err:
        raise ValueError(f"{path} is damaged or another version's ({type(err).__name__}: {err}): start the search "
                         "again with another --out") from None
    return dataclasses.replace(settings, out=Path(run))


def _runs(record: dict, rungs: int) -> list[float]:
    """An iteration record's training seconds per evaluation (its population run, then each halving rung); a record
    from before they were kept: its seconds, shared evenly by its population run and `rungs` rungs."""
    return record.get("training_seconds") or [record["seconds"] / (rungs + 1)] * (rungs + 1)


def _up_to(sizes: dict) -> str:
    """`final_within_budget`'s words for the seeds a final may add."""
    more = sizes["final_max_seeds"] > sizes["final_seeds"]
    return f", up to {sizes['final_max_seeds']} until the best is separable" if more else ""
