"""How much of the gap to the task's default reward a search closes from deliberately poor starting rewards.

    python benchmarks/search.py --task Anymal --starts benchmarks/search_starts/anymal --proposer population \
        --out runs/search_anymal -- --candidates-per-iteration 12 --iterations 1 --copies 4 --train-iterations 300

Runs `envcoder auto` (the arguments after `--` are its own) with `--proposer` population, offline, or one of the
three baselines (jitter: constant jitter alone; random: random constants, no exploit step; seeds: the population
search's children each trained as proposed on all its copies, no exploit step) from the starting files, then reads
its final evaluation, which trains the finds, every starting file (a population, random or seeds search) or the
best one, and `task_default`
side by side with the same seeds: the gap closed is `(best start - best find) / (best start - task default)` in the
fitness's better direction (1.0: the find is as good as the task's default; above 1: better). Writes
`<out>/search.json` with the numbers, the wall-clock seconds from process start and the compile seconds. A search
that was cut short continues with `-- --resume` (`envcoder auto --resume <out>`, its recorded settings; the seconds
are then the resumed process's).

The search's final picks its best find and its best start by the same seeds that then measure them, so its
figure is biased (the best of several noisy means). `verify` measures again, on fresh seeds: each search's
`best.py`, the start that was best in it and the task's default, retrained side by side, in several processes at
once (one per GPU of `--gpus`, each with its own seeds), then the gap closed per search and over the searches,
and each find against the default, with 95% bootstrap intervals:

    python benchmarks/search.py verify --runs runs/search_anymal_* --starts benchmarks/search_starts/anymal \
        --seeds 3 --gpus 0 1 2 3 --out runs/verify -- --envs-per-candidate 1024 --iterations 300

writes `<out>/verify.json` and prints a table (`--report-only` recomputes it from the parts already run). A search
that kept its start (its `best.py` is the start) is not retrained: its runs are the start's, so its gap closed is 0.

From a *sparse* start, the task's fitness as the only reward (`benchmarks/search_starts/sparse/<task>.py`, one per
task that Eureka shares with us), the gap closed is Eureka's human-normalized score, HNS = (find − sparse) /
|default − sparse|, with the task's own shaping as the human's; `envcoder auto` runs with its defaults:

    python benchmarks/search.py --task Anymal --starts benchmarks/search_starts/sparse/anymal.py --out runs/hns_anymal_0
    python benchmarks/search.py verify --runs runs/hns_anymal_* --starts benchmarks/search_starts/sparse \
        --seeds 4 --gpus 0 1 2 3 --out runs/hns_verify_anymal -- --envs-per-candidate 1024 --iterations 300

HNS is defined where sparse and default are separable at the retraining's budget (`gap_defined` in verify.json).
The references can be measured again and pooled: `--pool runs/hns_verify_anymal_earlier` adds another verify's
start and default runs (same task, same arguments) to this one's, and HNS and each find's lead over the default use
them all; a find it retrained too (the same file under the same name) has its runs pooled as well, so a second
verify of the same searches on other seeds (`--seed 1016`) adds to the first. `--join` does that too, and its
verifies' other searches join this one's (named `<its folder>/<find>`; one that two of them retrained, the same
file under the same name, is one search with both verifies' runs), scored against the pooled references: a row over
searches retrained in several verifies of one setting. The last lines give each start's searches as
search.md's HNS table has them: HNS per search, the median with its 95% interval (resampling the searches and each
candidate's seeds) and how many finds beat the default at P ≥ 0.95.

One row of that table in one command, `hns`: the searches from the task's sparse start (`--search-seeds`, one at a
time on each GPU of `--gpus`; a seed whose search ended before is kept), then their verify:

    python benchmarks/search.py hns --task Ant --search-seeds 9 10 11 12 13 --gpus 0 1 --out runs/hns_ant \
        --verify-seeds 16 --join runs/verify_D      # searches with `--budget 9`, retrained at 1,024 envs × 300

(the Humanoid's finds at 4,096 envs × 300 and Cartpole's at 64 × 20, where their sparse start and default
separate: `VERIFY_ARGS`). With `--starts` the searches start from other files, a folder of them or one file; from
the poor starts, the row is the gap closed per search, each against the start that was best in it: a line per such
start, and a count over all of them where there are several (archive/search.md § 30):

    python benchmarks/search.py hns --task Anymal --starts benchmarks/search_starts/anymal \
        --search-seeds 20 21 22 23 24 25 26 27 28 29 --gpus 0 1 2 3 --verify-seeds 4 --out runs/poor_anymal

With `--with-sparse`, the task's sparse start is retrained beside the finds too, and each find's HNS is given against
it: a search from a Eureka run's responses (Isaac-format files, which `envcoder auto --initial` converts) says both
how far it took the responses and where that is on Eureka's scale:

    python benchmarks/search.py hns --task Humanoid --starts PATH/iteration-0-responses --with-sparse \
        --search-seeds 0 1 --gpus 0 1 --out runs/hns_humanoid_eureka

`hns` stopped by Ctrl-C or `timeout -s INT` (a device call's time limit) leaves each search and each verify part at
its checkpoint; the same command continues them, keeps what finished, and verifies once every search has ended.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from envcoder.search.auto_settings import PROPOSERS

START = time.time()  # process start, as near as a script gets


def gap_closed(summary: dict, starts: set[str]) -> dict:
    """The final evaluation's best start, best find and task default, and the fraction of the gap closed."""
    sign = 1.0 if summary["higher_is_better"] else -1.0
    ranking = [r for r in summary["final_ranking"] if r["fitness_mean"] is not None]
    start = [r for r in ranking if r["name"] in starts]
    finds = [r for r in ranking if r["name"] not in starts and r["name"] != "task_default"]
    default = next((r for r in ranking if r["name"] == "task_default"), None)
    if not start or not finds or default is None:
        return {"error": "the final evaluation lacks a start, a find or the task default"}
    best_start = max(start, key=lambda r: sign * r["fitness_mean"])
    best_find = max(finds, key=lambda r: sign * r["fitness_mean"])
    gap = sign * (default["fitness_mean"] - best_start["fitness_mean"])
    closed = sign * (best_find["fitness_mean"] - best_start["fitness_mean"]) / gap if gap else None
    return {"best_start": best_start, "best_find": best_find, "task_default": default, "gap_closed": closed}


def fresh_seeds(results: list[dict]) -> dict[str, list[float]]:
    """Each candidate's final task fitness per seed over the `results.json` of several evaluations (diverged seeds
    left out); a candidate trained with the same seed twice is an error, since the parts would not be independent."""
    per_seed: dict[str, dict[int, float]] = {}
    for result in results:
        for group in result["groups"]:
            seeds = per_seed.setdefault(group["candidate"], {})
            if group["seed"] in seeds:
                raise ValueError(f"{group['candidate']} was trained twice with seed {group['seed']}: give each part "
                                 "its own seeds")
            seeds[group["seed"]] = group["task_fitness"]
    return {name: [v for _, v in sorted(seeds.items()) if v is not None and np.isfinite(v)]
            for name, seeds in per_seed.items()}


def gap_statistics(find: list[float], start: list[float], default: list[float], higher_is_better: bool,
                   samples: int = 4000, rng: np.random.Generator | None = None) -> dict:
    """The gap closed, `(start - find) / (start - default)` in the better direction, from the three candidates'
    per-seed fitness, with a 95% bootstrap interval (each candidate's seeds resampled on their own). The gap is
    defined only where the default beats the start in 95% of the resamples (`gap_defined`); the find's lead over the
    default is given either way."""
    rng = rng or np.random.default_rng(0)
    f, s, d = (np.asarray(x, dtype=np.float64) for x in (find, start, default))
    sign = 1.0 if higher_is_better else -1.0

    def closed(f_mean, s_mean, d_mean):
        gap = sign * (d_mean - s_mean)
        return np.where(gap > 0, sign * (f_mean - s_mean) / np.where(gap > 0, gap, 1.0), np.nan)

    means = [rng.choice(x, size=(samples, len(x))).mean(axis=1) for x in (f, s, d)]
    boot = closed(*means)
    low, high = np.nanpercentile(boot, [2.5, 97.5]) if np.isfinite(boot).any() else (np.nan, np.nan)
    better = sign * (means[0] - means[2])  # the find's lead over the default, in the better direction
    return {"gap_closed": float(closed(f.mean(), s.mean(), d.mean())), "ci_low": float(low), "ci_high": float(high),
            "gap_defined": bool(np.mean(sign * (means[2] - means[1]) > 0) >= 0.95),
            "find": float(f.mean()), "start": float(s.mean()), "default": float(d.mean()),
            "find_beats_default_by": float(sign * (f.mean() - d.mean())),
            "find_beats_default_ci": [float(x) for x in np.percentile(better, [2.5, 97.5])],
            "p_find_beats_default": float(np.mean(better > 0)),
            "seeds": {"find": len(f), "start": len(s), "default": len(d)}}


def mean_gap_statistics(finds: dict[str, list[float]], start: list[float], default: list[float],
                        higher_is_better: bool, samples: int = 4000) -> dict:
    """The mean gap closed over several searches' finds (one start, one default), with a 95% bootstrap interval
    that resamples the searches as well as each candidate's seeds: what the next search can expect."""
    rng = np.random.default_rng(0)
    names = sorted(finds)
    sign = 1.0 if higher_is_better else -1.0
    s, d = (np.asarray(x, dtype=np.float64) for x in (start, default))
    s_boot = rng.choice(s, size=(samples, len(s))).mean(axis=1)
    d_boot = rng.choice(d, size=(samples, len(d))).mean(axis=1)
    f_boot = np.stack([rng.choice(np.asarray(finds[n], dtype=np.float64), size=(samples, len(finds[n]))).mean(axis=1)
                       for n in names], axis=1)  # [samples, searches]
    which = rng.integers(0, len(names), size=(samples, len(names)))
    gap = (sign * (d_boot - s_boot))[:, None]
    closed = sign * (np.take_along_axis(f_boot, which, axis=1) - s_boot[:, None]) / np.where(gap > 0, gap, np.nan)
    boot = closed.mean(axis=1)
    p_gap = np.mean(sign * (d_boot - s_boot) > 0)
    if p_gap < 0.95:
        return {"error": f"the default beats the start in only {p_gap:.0%} of the resamples: no gap to close (see "
                         "each find against the default)"}
    point = [sign * (np.mean(finds[n]) - s.mean()) / (sign * (d.mean() - s.mean())) for n in names]
    low, high = np.nanpercentile(boot, [2.5, 97.5])
    median_low, median_high = np.nanpercentile(np.median(closed, axis=1), [2.5, 97.5])
    return {"mean_gap_closed": float(np.mean(point)), "ci_low": float(low), "ci_high": float(high),
            "median_gap_closed": float(np.median(point)), "median_ci": [float(median_low), float(median_high)],
            "per_search": dict(zip(names, map(float, point))),
            "searches": len(names), "at_least_80_percent": int(sum(p >= 0.8 for p in point))}


def pooled_references(fitness: dict[str, list[float]], pool: list[Path], task: str,
                      arguments: list[str], finds: dict[str, str] | None = None) -> dict[str, list[float]]:
    """`fitness` with the starts' and the task default's runs of other verifies (`pool`: their `--out` folders, the
    same task retrained with the same arguments) added: the references HNS divides by, measured again. A seed
    trained in two verifies counts twice (training on the GPU is not bitwise repeatable: archive/search.md § 23). A find
    (`finds`: this verify's, their source by name) that another verify retrained too, the same file under the same
    name, has its runs pooled as well: a second verify of the same searches on other seeds."""
    finds = finds or {}
    pooled = {name: list(values) for name, values in fitness.items()}
    for folder in pool:
        path = folder / "verify.json"
        if not path.is_file():
            raise ValueError(f"--pool {folder}: no verify.json there (give folders that `search.py verify` wrote)")
        other = json.loads(path.read_text())
        theirs = other.get("arguments", [])
        if other["task"] != task or theirs != arguments:
            raise ValueError(f"--pool {folder}: retrained {other['task']} with {' '.join(theirs)!r}, this verify "
                             f"{task} with {' '.join(arguments)!r}: pool verifies of one setting")
        for name, values in other["per_seed"].items():
            if name == "task_default" or name.startswith("start_") or _same_find(folder, name, finds):
                pooled.setdefault(name, []).extend(values)
    return pooled


def _same_find(folder: Path, name: str, finds: dict[str, str]) -> bool:
    """Whether the verify in `folder` retrained this verify's find `name` (the same source, which verify keeps as
    `functions/<name>.py`)."""
    path = folder / "functions" / f"{name}.py"
    return name in finds and path.is_file() and path.read_text() == finds[name]


def pooled_finds(join: list[Path], own: dict[str, str] | None = None) -> dict[str, tuple[dict, list[float]]]:
    """The searches of other verifies (`join`, checked by `pooled_references` to be of this setting), named
    `<their folder>/<find>`: their record and their runs (none where a kept start's runs were its start's), to join
    this verify's searches in the row over searches; not those that retrained one of this verify's finds (`own`: their
    source by name), whose runs `pooled_references` adds to that find's. A find that several of them retrained (the
    same file under the same name) is one search, under the first one's folder, with all of their runs."""
    finds, sources = {}, {}
    for folder in join:
        other = json.loads((folder / "verify.json").read_text())
        starts = [name for name in other["per_seed"] if name.startswith("start_")]
        for name, entry in other.get("searches", {}).items():
            if _same_find(folder, name, own or {}):
                continue
            runs = other["per_seed"].get(name, [])
            if not runs and not entry.get("runs_are_the_starts"):
                continue
            path = folder / "functions" / f"{name}.py"
            source = (name, path.read_text()) if path.is_file() else None
            earlier = next((key for key, seen in sources.items() if source and seen == source), None)
            if earlier:  # a second verify of the same search, on other seeds
                finds[earlier][0].setdefault("pooled_with", []).append(str(folder))
                finds[earlier][1].extend(runs)
                continue
            kept = {k: entry[k] for k in ("run", "gap_closed_in_its_final", "best_find_in_its_final")}
            kept |= {k: entry.get(k, False) for k in ("find_is_start", "runs_are_the_starts")}
            start = entry.get("start_name", starts[0] if len(starts) == 1 else None)  # one start: older files
            finds[f"{folder.name}/{name}"] = ({"verify": str(folder), "start_name": start} | kept, list(runs))
            sources[f"{folder.name}/{name}"] = source
    return finds


def _candidate_name(text: str) -> str:
    return re.sub(r"\W", "_", text).strip("_")


def verify(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="search.py verify", description="the searches' finds retrained on fresh "
                                     "seeds beside their best start and the task's default")
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="`search.py` output folders")
    parser.add_argument("--starts", type=Path, required=True, help="the folder of starting files the runs used")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=4, help="seeds per candidate in each part (default 4)")
    parser.add_argument("--gpus", nargs="+", default=None, metavar="GPU",
                        help="one evaluation at once on each of these GPUs, each with its own seeds (default: one "
                             "evaluation, on whatever JAX finds)")
    parser.add_argument("--seed", type=int, default=1000, help="first seed, away from the searches' (default 1000)")
    parser.add_argument("--report-only", action="store_true", help="recompute the report from the parts' results")
    parser.add_argument("--with-sparse", action="store_true",
                        help="retrain the task's sparse start beside them too, and give each find's HNS against it "
                             "(for searches from other starts: Eureka's responses, say)")
    parser.add_argument("--pool", type=Path, nargs="+", default=[], metavar="VERIFY",
                        help="other verifies' --out folders (same task, same arguments) whose start and default runs "
                             "join this one's: HNS and each find's lead over the default use them all")
    parser.add_argument("--join", type=Path, nargs="+", default=[], metavar="VERIFY",
                        help="as --pool, and these verifies' searches join this one's in the row over searches")
    args, rest = parser.parse_known_args(argv)
    rest = [a for a in rest if a != "--"]
    if args.report_only and not rest and (args.out / "verify.json").is_file():
        rest = json.loads((args.out / "verify.json").read_text()).get("arguments", [])
    runs = {}
    for run in args.runs:
        if not (run / "search.json").is_file() or not (run / "best.py").is_file():
            parser.error(f"{run} has no search.json and best.py: give the folders that `search.py --out` wrote")
        search = json.loads((run / "search.json").read_text())
        runs[_candidate_name(f"find_{run.parent.name}_{run.name}")] = (run, search)
    tasks = {search["task"] for _, search in runs.values()}
    if len(tasks) != 1:
        parser.error(f"the runs are of several tasks ({', '.join(sorted(tasks))}): verify one task at a time")
    task = tasks.pop()
    if not args.report_only:
        for run, search in runs.values():
            if not (args.starts / f"{search['best_start']['name'].removeprefix('init_')}.py").is_file():
                parser.error(f"{run}'s best start ({search['best_start']['name']}) has no file in {args.starts}")
        codes = _train_parts(task, runs, args, rest)
        if 130 in codes:
            print(f"interrupted: the parts under {args.out} stopped at their checkpoints; the same command "
                  "continues them", file=sys.stderr)
            return 130
        if any(codes):
            print(f"a part failed: see {args.out}/part_*.log", file=sys.stderr)
    return _report(task, runs, args.out, rest, args.pool, args.join)


def _train_parts(task: str, runs: dict, args, rest: list[str]) -> list[int]:
    """Each run's find (unless it is the start: its runs are then the start's), its best start and the task's
    default in one folder, trained by one `envcoder eval` per GPU at once, each with its own seeds; the parts' exit
    statuses (130: interrupted). A part that finished before is kept, and one cut short (Ctrl-C, a time limit) continues from
    its checkpoint (`envcoder eval --resume`)."""
    functions = args.out / "functions"
    functions.mkdir(parents=True, exist_ok=True)
    for name, (run, search) in runs.items():
        start = search["best_start"]["name"].removeprefix("init_")
        shutil.copyfile(args.starts / f"{start}.py", functions / f"start_{start}.py")
        if not _find_is_start(run, search, args.out):
            shutil.copyfile(run / "best.py", functions / f"{name}.py")
    if args.with_sparse:
        shutil.copyfile(SPARSE / f"{task.lower()}.py", functions / "sparse.py")
    parts = []
    for p, gpu in enumerate(args.gpus or [None]):
        env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {}))
        part = args.out / f"part_{p}"
        if (part / "results.json").is_file():  # finished in an earlier launch
            continue
        begun = (part / "config.json").is_file()  # cut short by Ctrl-C or a time limit: continue it
        fresh = ["--task", task, "--functions", str(functions), "--task-default", "--seeds", str(args.seeds),
                 "--seed", str(args.seed + p * args.seeds), "--out", str(part), "--no-tensorboard", *rest]
        command = [sys.executable, "-c", "from envcoder.cli import run; run()", "eval",
                   *(["--resume", str(part)] if begun else fresh)]
        with open(args.out / f"part_{p}.log", "a" if begun else "w") as log:
            parts.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
    previous = signal.signal(signal.SIGINT, lambda *_: None)  # Ctrl-C reaches the parts, which checkpoint and exit
    try:
        return [process.wait() for process in parts]
    finally:
        signal.signal(signal.SIGINT, previous)


def _report(task: str, runs: dict, out: Path, rest: list[str], pool: list[Path], join: list[Path]) -> int:
    """`verify.json` and a table from the parts' results (the references pooled with `pool`'s and `join`'s verifies,
    `join`'s searches beside this one's)."""
    results = [json.loads(path.read_text()) for path in sorted(out.glob("part_*/results.json"))]
    if not results:
        print(f"no part wrote results.json under {out}", file=sys.stderr)
        return 1
    higher = results[0]["higher_is_better"]
    own = fresh_seeds(results)
    entries = {name: {"run": str(run), "gap_closed_in_its_final": search.get("gap_closed"),
                      "best_find_in_its_final": search["best_find"]["name"],
                      "start_name": "start_" + search["best_start"]["name"].removeprefix("init_"),
                      "find_is_start": _find_is_start(run, search, out)}
               for name, (run, search) in runs.items()}
    unknown = [name for name in runs if name not in own and not entries[name]["find_is_start"]]
    if unknown:
        print(f"{', '.join(unknown)}: not among the candidates that {out}'s parts trained ({', '.join(sorted(own))}); "
              "a find is named after its run's folder and the one above it (find_<above>_<run>): give the runs under "
              "the paths they were verified with", file=sys.stderr)
    pool = [*pool, *(folder for folder in join if folder not in pool)]  # a verify's runs count once
    sources = {name: (run / "best.py").read_text() for name, (run, _) in runs.items()
               if not entries[name]["find_is_start"]}
    try:
        fitness = pooled_references(own, pool, task, rest, sources)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    report = {"task": task, "higher_is_better": higher, "arguments": rest, "parts": len(results),
              "per_seed": own, "pooled_from": [str(p) for p in pool], "joined": [str(p) for p in join],
              "finds_pooled": sorted(n for n in sources if len(fitness.get(n, [])) > len(own.get(n, []))),
              "searches": {}}
    by_start: dict[str, dict[str, list[float]]] = {}
    for name, entry in entries.items():  # a kept start is not trained again: its runs are the start's (HNS 0)
        if entry["find_is_start"] and name not in own and fitness.get(entry["start_name"]):
            fitness[name], entry["runs_are_the_starts"] = fitness[entry["start_name"]], True
    for name, (entry, values) in pooled_finds(join, sources).items():
        entries[name], fitness[name] = entry, values or fitness.get(entry["start_name"], [])
    for name, entry in entries.items():
        start = entry["start_name"]  # gap_statistics' "start" is its mean
        if fitness.get(name) and fitness.get(start) and fitness.get("task_default"):
            entry |= gap_statistics(fitness[name], fitness[start], fitness["task_default"], higher)
            by_start.setdefault(start, {})[name] = fitness[name]
        if fitness.get(name) and fitness.get("sparse") and fitness.get("task_default"):  # --with-sparse
            hns = gap_statistics(fitness[name], fitness["sparse"], fitness["task_default"], higher)
            entry["hns"] = {k: hns[k] for k in ("gap_closed", "ci_low", "ci_high", "gap_defined", "start")}
        report["searches"][name] = entry
    report["over_searches"] = {start: mean_gap_statistics(finds, fitness[start], fitness["task_default"], higher)
                               for start, finds in by_start.items()}
    for start, m in report["over_searches"].items():  # a start kept by its search is not a find that beats it
        beat = [n for n in by_start[start] if report["searches"][n].get("p_find_beats_default", 0.0) >= 0.95]
        m["beat_default_at_95"] = sum(not report["searches"][n].get("find_is_start") for n in beat)
        m["start_kept_beats_default_at_95"] = len(beat) - m["beat_default_at_95"]
    if len(by_start) > 1:  # searches from a folder of starts, each against the start that was best in it
        per_search = {n: e["gap_closed"] for n, e in report["searches"].items() if e.get("gap_defined")}
        report["over_all_starts"] = {"searches": len(per_search), "per_search": per_search,
                                     "at_least_80_percent": sum(v >= 0.8 for v in per_search.values())}
    (out / "verify.json").write_text(json.dumps(report, indent=1) + "\n")
    _print_report(report, fitness)
    return 0


def _find_is_start(run: Path, search: dict, out: Path) -> bool:
    """Whether a search kept its start (its final ranked the start first, so its `best.py` is the start): by its
    search.json, or, for runs from before it said so, by `best.py` against the start that this verify trained."""
    if "best_is_start" in search:
        return bool(search["best_is_start"])
    start = out / "functions" / f"start_{search['best_start']['name'].removeprefix('init_')}.py"
    return start.is_file() and (run / "best.py").read_text() == start.read_text()


def _print_report(report: dict, fitness: dict[str, list[float]]) -> None:
    """verify.json's table, then a line per start over the searches (the row of search.md's HNS table)."""
    if report["pooled_from"]:
        print(f"references pooled with {', '.join(report['pooled_from'])}: " + ", ".join(
            f"{name} {len(values)} runs" for name, values in fitness.items()
            if name == "task_default" or name.startswith("start_")))
    if report.get("finds_pooled"):
        print("finds those verifies retrained too, their runs pooled: " + ", ".join(
            f"{name} {len(fitness[name])} runs" for name in report["finds_pooled"]))
    print("| search | its final | fresh seeds: find | start | default | gap closed [95% CI] | "
          "find − default [95% CI], P(beats) |\n|---|---:|---:|---:|---:|---|---|")
    for name, e in report["searches"].items():
        claimed = f"{e['gap_closed_in_its_final']:.0%}" if e["gap_closed_in_its_final"] is not None else "–"
        if "gap_closed" in e:
            gap = (f"{e['gap_closed']:.0%} [{e['ci_low']:.0%}, {e['ci_high']:.0%}]" if e["gap_defined"] else
                   "none: the start is not separable from the default")
            kept = (" (best.py is the start: the search kept it" + ("; its runs are the start's)" if e.get(
                "runs_are_the_starts") else ")")) if e.get("find_is_start") else ""
            print(f"| {name}{kept} | {claimed} | {e['find']:.3f} | {e['start']:.3f} | {e['default']:.3f} | "
                  f"{gap} | {e['find_beats_default_by']:+.3f} "
                  f"[{e['find_beats_default_ci'][0]:+.3f}, {e['find_beats_default_ci'][1]:+.3f}], "
                  f"{e['p_find_beats_default']:.2f} |")
        else:
            print(f"| {name} | {claimed} | not measured (diverged or missing) | | | | |")
    for start, m in report["over_searches"].items():
        kept = m.get("start_kept_beats_default_at_95", 0)
        kept = f" (and {kept} whose best.py is the start, which beats it)" if kept else ""
        if "error" in m:
            print(f"over the searches from {start}: {m['error']}; {m['beat_default_at_95']} finds beat the default at "
                  f"P ≥ 0.95{kept}")
            continue
        print(f"over {m['searches']} searches from {start}: per search "
              f"{', '.join(f'{v:.2f}' for v in m['per_search'].values())}; median {m['median_gap_closed']:.2f} "
              f"[{m['median_ci'][0]:.2f}, {m['median_ci'][1]:.2f}], mean {m['mean_gap_closed']:.2f} "
              f"[{m['ci_low']:.2f}, {m['ci_high']:.2f}]; {m['at_least_80_percent']} at 0.80 or more; "
              f"{m['beat_default_at_95']} beat the default at P ≥ 0.95{kept}")
    with_hns = {n: e["hns"] for n, e in report["searches"].items() if "hns" in e}
    if with_hns:
        print("HNS against the sparse start retrained beside them (" + f"{next(iter(with_hns.values()))['start']:.3f}"
              + "): " + "; ".join(f"{n} {h['gap_closed']:.2f} [{h['ci_low']:.2f}, {h['ci_high']:.2f}]"
                                  + ("" if h["gap_defined"] else " (sparse and default not separable)")
                                  for n, h in with_hns.items()))
    if "over_all_starts" in report:
        m = report["over_all_starts"]
        print(f"over all {m['searches']} searches, each against the start that was best in it: "
              f"{m['at_least_80_percent']} at 0.80 or more")


SPARSE = Path(__file__).resolve().parent / "search_starts" / "sparse"

VERIFY_ARGS = {"default": "--envs-per-candidate 1024 --iterations 300",
               "humanoid": "--envs-per-candidate 4096 --iterations 300",
               "cartpole": "--envs-per-candidate 64 --iterations 20"}
"""`hns`' retraining budget by task (`envcoder eval`'s own arguments): the search's final's, 1,024 envs × 300
iterations, except where the sparse start and the task default are not separable there. The Humanoid's sparse reward
is ahead of its default at 1,024 envs (archive/search.md § 28) and its runs are bimodal (a run learns to run or does not);
at IsaacGymEnvs' 4,096 envs every run learns and the default is ahead (§ 29: 5.35 against 4.76 m/s, 6 seeds each,
P(default ahead) = 0.97), so its HNS is defined there. Cartpole's two reach the ceiling (1.0) by 30 iterations; at
64 envs × 20 the default is ahead (§ 31: 0.949 against 0.771, 32 seeds each)."""


def verify_arguments(task: str, given: str | None = None) -> list[str]:
    """The retraining's `envcoder eval` arguments for `task`: `given` (`--verify-args`), or `VERIFY_ARGS`'."""
    return shlex.split(given if given is not None else VERIFY_ARGS.get(task.lower(), VERIFY_ARGS["default"]))


def hns(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="search.py hns", description="one row of search.md's HNS table: searches "
                                     "from the task's sparse start (or --starts), one per GPU at a time, then their "
                                     "finds retrained on fresh seeds (`verify`) beside the best start and the task's "
                                     "default")
    parser.add_argument("--task", required=True)
    parser.add_argument("--starts", type=Path, default=None,
                        help="the searches' starting files, a folder of them or one file (default: the task's sparse "
                             "start, benchmarks/search_starts/sparse/<task>.py); from a folder of poor starts the row "
                             "is the gap closed per search")
    parser.add_argument("--search-seeds", type=int, nargs="+", required=True, metavar="S",
                        help="one search per seed (`envcoder auto --seed S`); a seed whose search ended is kept")
    parser.add_argument("--out", type=Path, required=True,
                        help="searches in <out>/search_S, the verify in <out>/verify")
    parser.add_argument("--gpus", nargs="+", default=None, metavar="GPU",
                        help="one search at a time on each of these GPUs, then one verify part on each (default: one "
                             "at a time, on whatever JAX finds)")
    parser.add_argument("--search-args", default="--budget 9", metavar="ARGS",
                        help="`envcoder auto`'s own arguments, one string (default: '--budget 9')")
    parser.add_argument("--verify-seeds", type=int, default=16,
                        help="fresh seeds per candidate in all, split evenly over --gpus (default 16)")
    parser.add_argument("--verify-args", default=None, metavar="ARGS",
                        help="`envcoder eval`'s own arguments for the retraining, one string (default: "
                             "'--envs-per-candidate 1024 --iterations 300'; the Humanoid's and Cartpole's: "
                             "VERIFY_ARGS)")
    parser.add_argument("--with-sparse", action="store_true", help="as verify's --with-sparse: with --starts, the "
                        "finds' HNS against the task's sparse start retrained beside them")
    parser.add_argument("--pool", type=Path, nargs="+", default=[], metavar="VERIFY", help="as verify's --pool")
    parser.add_argument("--join", type=Path, nargs="+", default=[], metavar="VERIFY", help="as verify's --join")
    args = parser.parse_args(argv)
    parts = len(args.gpus or [None])
    if args.verify_seeds % parts:
        parser.error(f"--verify-seeds {args.verify_seeds} does not split evenly over {parts} GPUs")
    start = args.starts or SPARSE / f"{args.task.lower()}.py"
    if args.starts is None and not start.is_file():
        parser.error(f"no sparse start for {args.task} in {SPARSE}: one of "
                     f"{', '.join(p.stem for p in sorted(SPARSE.glob('*.py')))}, or give --starts")
    if not (start.is_file() or start.is_dir() and any(start.glob("*.py"))):
        parser.error(f"--starts {start}: give a starting file or a folder of them (*.py)")
    _searches(args, start)
    done = [args.out / f"search_{s}" for s in args.search_seeds if (args.out / f"search_{s}" / "best.py").is_file()]
    if not done:
        print(f"no search ended with a find: see {args.out}/search_*.log", file=sys.stderr)
        return 1
    missing = sorted(set(args.search_seeds) - {int(d.name.removeprefix("search_")) for d in done})
    if missing:
        print(f"searches without a find (seeds {missing}): see their logs; verifying the others", file=sys.stderr)
    checked, names = args.out / "verify", {_candidate_name(f"find_{d.parent.name}_{d.name}") for d in done}
    again = (checked / "verify.json").is_file() and {name for name, entry in json.loads(
        (checked / "verify.json").read_text())["searches"].items() if "verify" not in entry}  # not --join's
    cut = {f.stem for f in (checked / "functions").glob("find_*.py")} if not again else set()  # a verify cut short
    if again and again != names or cut - names:
        print(f"{checked} holds a verify of other searches: move it away (or pass it to --pool) to retrain these",
              file=sys.stderr)
        return 2
    folder = start if start.is_dir() else start.parent
    return verify(["--runs", *map(str, done), "--starts", str(folder), "--seeds", str(args.verify_seeds // parts),
                   "--out", str(checked), *(["--gpus", *args.gpus] if args.gpus else []),
                   *(["--with-sparse"] if args.with_sparse else []),
                   *(["--pool", *map(str, args.pool)] if args.pool else []),
                   *(["--join", *map(str, args.join)] if args.join else []), *(["--report-only"] if again else []),
                   "--", *verify_arguments(args.task, args.verify_args)])


def _searches(args, start: Path) -> None:
    """`hns`' searches from `start`, one per seed of `--search-seeds` whose search has not ended before, one at a time
    on each GPU of `--gpus`, each into `<out>/search_S` with its log beside it; one that was cut short (Ctrl-C, a time
    limit) continues from where it stopped (`envcoder auto --resume`)."""
    args.out.mkdir(parents=True, exist_ok=True)
    waiting = [s for s in args.search_seeds if not (args.out / f"search_{s}" / "search.json").is_file()]

    def one_gpu(gpu: str | None) -> None:  # the next waiting seed until none is left
        while True:
            try:
                seed = waiting.pop(0)
            except IndexError:
                return
            env = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {}))
            begun = (args.out / f"search_{seed}" / "auto.json").is_file()  # cut short before: continue it
            with open(args.out / f"search_{seed}.log", "a" if begun else "w") as log:
                subprocess.run([sys.executable, __file__, "--task", args.task, "--starts", str(start), "--out",
                                str(args.out / f"search_{seed}"), "--",
                                *(["--resume"] if begun else ["--seed", str(seed), *shlex.split(args.search_args)])],
                               env=env, stdout=log, stderr=subprocess.STDOUT)
    workers = [threading.Thread(target=one_gpu, args=(gpu,)) for gpu in args.gpus or [None]]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def main() -> None:
    if sys.argv[1:2] == ["verify"]:
        sys.exit(verify(sys.argv[2:]))
    if sys.argv[1:2] == ["hns"]:
        sys.exit(hns(sys.argv[2:]))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("--starts", type=Path, required=True,
                        help="folder of deliberately poor starting files, or one file (a sparse start)")
    parser.add_argument("--proposer", choices=PROPOSERS, default="population")
    parser.add_argument("--out", type=Path, required=True)
    args, rest = parser.parse_known_args()
    rest = [a for a in rest if a != "--"]
    from envcoder.cli import main as envcoder

    resumed = "--resume" in rest  # a search that a device call's time limit cut short, continued in the next
    status = envcoder(["auto", "--resume", str(args.out)] if resumed else [
        "auto", "--task", args.task, "--initial", str(args.starts), "--proposer", args.proposer, "--out", str(args.out),
        *rest])
    wall_s = time.time() - START
    if not (args.out / "summary.json").exists():  # interrupted (its message says how to go on), or failed
        print(f"no search.json: the search did not finish (exit status {status}); `python {sys.argv[0]} --task "
              f"{args.task} --starts {args.starts} --out {args.out} -- --resume` continues it", file=sys.stderr)
        sys.exit(status or 1)
    summary = json.loads((args.out / "summary.json").read_text())
    starts = {f"init_{p.stem}" for p in ([args.starts] if args.starts.is_file() else args.starts.glob("*.py"))}
    result = {"task": args.task, "proposer": args.proposer, "arguments": rest, "status": status,
              "wall_s_from_process_start": wall_s, **gap_closed(summary, starts),
              "compile": [it.get("compile") for it in summary["iterations"]], "final_seeds": summary.get("final_seeds"),
              "task_default_verdict": (summary.get("task_default") or {}).get("text"),
              "best_is_start": (summary.get("best") or {}).get("name") in starts, "resumed": resumed}
    (args.out / "search.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result.get(k) for k in ("gap_closed", "error", "wall_s_from_process_start")} | {
        k: result[k]["name"] + f" {result[k]['fitness_mean']:.3f}" for k in ("best_start", "best_find", "task_default")
        if isinstance(result.get(k), dict)}, indent=1))
    sys.exit(status)


if __name__ == "__main__":
    main()
