"""A whole public LLM run through `envcoder eval`: Eureka's responses as they are, one Eureka iteration per evaluation
or (`--together`) every iteration asked in one.

Reads a checkout of a Eureka run folder (for example nicholaschenai/eureka_artifacts' `eureka/2025-01-25_04-08-48`,
a Humanoid run of gpt-4o-2024-08-06: 16 responses × 5 iterations as `env_iter{i}_response{j}_rewardonly.py`, and
`eureka.log`) from the path you give; nothing of it is copied into this repository. For each iteration asked it runs,
as a user would and timed from launch,

    envcoder eval --task TASK --functions <that iteration's 16 reward files + the task's sparse start>
                  --task-default --seeds SEEDS

and prints one JSON line per iteration and a Markdown table: how many responses validate against the execute rate
that Eureka's log states, each response's fitness with its interval, where envcoder ranks the response that Eureka's
log names as the iteration's best, the wall clock from launch against the log's for the same responses, and the best
response's human-normalized score HNS = (best − sparse) / (default − sparse) on the run's own seeds. With
`--fresh-seeds N` it then retrains each iteration's best response and the one Eureka's log names best, beside the
sparse start and the task default, on N fresh seeds (from `--fresh-seed`, 1000) in one more `envcoder eval`: their
HNS and P(beats the default) on seeds that did not pick them.

    python benchmarks/eureka_run.py PATH/eureka/2025-01-25_04-08-48 --task Humanoid --eureka-iterations 0 --seeds 3
    python benchmarks/eureka_run.py PATH/eureka/2025-01-25_04-08-48 --task Humanoid --together --seeds 2 \
        -- --train-iterations 500      # the whole run, 80 responses, in one evaluation
    python benchmarks/eureka_run.py PATH/eureka/2025-01-30_14-32-06 --task Ant --together --seeds 2 \
        --fresh-seeds 8 -- --train-iterations 300   # and the bests again on 8 fresh seeds

`--fresh-picks run` retrains only the run's two picks (envcoder's best over all its iterations and Eureka's final
one), and `--fresh-args` gives the retraining its own budget (the Humanoid's default runs at 1,000 iterations of 256
envs, not at 300; a seed of its sparse reward may run there too, and then the two do not separate). HNS is reported
only where the task default beats the sparse start at P ≥ 0.95 in the same evaluation. An evaluation stopped by
Ctrl-C or `timeout -s INT` (a device call's time limit) saves its checkpoint; the same command with `--resume`
continues it, reads the evaluations that finished, and reports each one's wall clock as the sum of its launches'.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

SPARSE = Path(__file__).parent / "search_starts" / "sparse"
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+\]")


def log_facts(log: Path, iteration: int) -> dict:
    """What Eureka's log says of one iteration: its execute rate, its best response, and its wall clock (from the
    first response processed to the iteration's summary line)."""
    facts, start, end = {}, None, None
    for line in log.read_text(errors="replace").splitlines():
        stamp = STAMP.match(line)
        if stamp and f"Iteration {iteration}: Processing Code Run 0" in line:
            start = datetime.datetime.fromisoformat(stamp.group(1))
        if f"Iteration {iteration}: Max Success:" in line:
            end = datetime.datetime.fromisoformat(stamp.group(1)) if stamp else None
            rate = re.search(r"Execute Rate: ([0-9.]+)", line)
            facts["eureka_execute_rate"] = float(rate.group(1)) if rate else None
            best = re.search(r"Max Success: ([-0-9.]+)", line)
            facts["eureka_max_success"] = float(best.group(1)) if best else None
        found = re.search(rf"Iteration {iteration}: Best Generation ID: (\d+)", line)
        if found:
            facts["eureka_best"] = int(found.group(1))
        found = re.search(rf"Iteration {iteration}: Code Run (\d+) (successfully training|execution error)", line)
        if found:
            facts.setdefault("eureka_trains", []).append(int(found.group(1))) if found.group(2).startswith(
                "successfully") else None
    if start and end:
        facts["eureka_wall_s"] = (end - start).total_seconds()
    return facts


def evaluate(run: Path, task: str, iterations: list[int], seeds: int, out: Path, extra: list[str],
             resume: bool = False) -> dict:
    """One `envcoder eval` of the responses of `iterations` (with the task's sparse start and its default), as a user
    runs it, timed from launch."""
    responses = sorted(f for i in iterations for f in run.glob(f"env_iter{i}_response*_rewardonly.py"))
    return eval_files(responses, task, "iter" + "_".join(map(str, iterations)), seeds, out, extra, resume)


def eval_files(responses: list[Path], task: str, label: str, seeds: int, out: Path, extra: list[str],
               resume: bool = False) -> dict:
    """`envcoder eval --task-default` of `responses` and the task's sparse start, timed from launch. With `resume`, an
    evaluation begun before (its folder there) continues from its last checkpoint (`envcoder eval --resume`), and one
    that finished is read as it is; its wall clock is the sum of its launches' (`<label>_launches.json`)."""
    folder, run_dir = out / f"{label}_inputs", out / label
    argv = ["envcoder", "eval", "--task", task, "--functions", str(folder), "--task-default", "--seeds", str(seeds),
            "--out", str(run_dir), "--no-tensorboard", *extra]
    resumed = resume and (run_dir / "config.json").exists()
    if not resumed:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for file in responses:
            shutil.copyfile(file, folder / file.name)
        shutil.copyfile(SPARSE / f"{task.lower()}.py", folder / "sparse.py")
        shutil.rmtree(run_dir, ignore_errors=True)
    walls = out / f"{label}_launches.json"  # each launch's seconds: the wall clock of a resumed evaluation is their sum
    launches = json.loads(walls.read_text()) if resumed and walls.exists() else []
    code = 0
    if not (resumed and (run_dir / "results.json").exists()):
        began = time.perf_counter()
        with open(out / f"{label}.log", "a" if resumed else "w") as log:
            code = wait_through_ctrl_c(["envcoder", "eval", "--resume", str(run_dir)] if resumed else argv, log)
        launches.append(round(time.perf_counter() - began, 1))
        walls.write_text(json.dumps(launches) + "\n")
    results = json.loads((run_dir / "results.json").read_text()) if (run_dir / "results.json").exists() else {}
    return {"responses": [f.stem for f in responses], "exit": code, "wall_s": round(sum(launches), 1),
            "launches": len(launches), "resumed": resumed,
            "command": " ".join(argv[:5] + ["DIR"] + argv[6:]),
            "rows": {row["name"]: row for row in results.get("ranking", [])},
            "win_probability": results.get("win_probability", {})}


def wait_through_ctrl_c(argv: list[str], log) -> int:
    """Run `argv` to its end, its output into `log`. A Ctrl-C (or `timeout -s INT`) reaches the command, which saves
    its checkpoint and exits; this waits for that instead of killing it, so that `--resume` can continue it."""
    previous = signal.signal(signal.SIGINT, lambda *_: None)  # a handler, not SIG_IGN: the child keeps Ctrl-C
    try:
        return subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT).returncode
    finally:
        signal.signal(signal.SIGINT, previous)


def fresh_picks(records: list[dict], per: str) -> list[str]:
    """The responses to retrain: each iteration's best (envcoder's ranking) and the one Eureka's log names best there
    (`per` "iteration"), or the run's: envcoder's best over every iteration (the highest fitness of the iterations'
    bests) and Eureka's, the best of the iteration with the log's highest success (`per` "run")."""
    def eureka(r: dict) -> str:
        return f"env_iter{r['iteration']}_response{r.get('eureka_best')}_rewardonly"
    if per == "run":
        ranked = [r for r in records if r.get("best_response")]
        mine = max(ranked, key=lambda r: r["fitness"][r["best_response"]][0])["best_response"] if ranked else None
        logged = [r for r in records if r.get("eureka_max_success") is not None and eureka(r) in r["fitness"]]
        theirs = eureka(max(logged, key=lambda r: r["eureka_max_success"])) if logged else None
        return list(dict.fromkeys(n for n in (mine, theirs) if n))
    names = []
    for r in records:
        names += [n for n in (r.get("best_response"), eureka(r)) if n and n in r["fitness"] and n not in names]
    return names


def gap(evaluation: dict) -> tuple[float | None, float | None, float | None]:
    """The sparse start's and the task default's fitness in `evaluation`, and P(the default beats the sparse start).
    HNS is defined only where that is 0.95 or more: at a budget where the two are not separable its denominator is
    noise (as `benchmarks/search.py`'s `gap_defined`)."""
    rows = evaluation["rows"]
    if "sparse" not in rows or "task_default" not in rows:
        return None, None, None
    p = evaluation["win_probability"].get("task_default", {}).get("sparse")
    return rows["sparse"]["fitness_mean"], rows["task_default"]["fitness_mean"], p


def hns(fitness: float, sparse: float, default: float, p_gap: float | None) -> float | None:
    """(fitness − sparse) / (default − sparse) where the default beats the sparse start at P ≥ 0.95, else None."""
    return (fitness - sparse) / (default - sparse) if p_gap is not None and p_gap >= 0.95 else None


def retrain(run: Path, task: str, records: list[dict], seeds: int, first_seed: int, out: Path,
            extra: list[str], per: str = "iteration", resume: bool = False) -> dict:
    """The responses `fresh_picks` names, retrained beside the sparse start and the task default on `seeds` fresh
    seeds from `first_seed`, in one `envcoder eval` (`extra`: its own arguments): their HNS on seeds that did not pick
    them."""
    names = fresh_picks(records, per)
    evaluation = eval_files([run / f"{n}.py" for n in names], task, "fresh", seeds, out,
                            [*extra, "--seed", str(first_seed)], resume)
    rows, wins = evaluation["rows"], evaluation["win_probability"]
    report = {"seeds": seeds, "first_seed": first_seed, "exit": evaluation["exit"], "wall_s": evaluation["wall_s"],
              "launches": evaluation["launches"], "command": evaluation["command"], "responses": {}}
    sparse, default, p_gap = gap(evaluation)
    if sparse is None:
        return report
    report["p_default_beats_sparse"] = p_gap
    for name in ("task_default", "sparse", *names):
        if name not in rows:
            report["responses"][name] = {"refused": True}
            continue
        row = rows[name]
        report["responses"][name] = {
            "fitness": [row["fitness_mean"], row["ci_low"], row["ci_high"]],
            "hns": hns(row["fitness_mean"], sparse, default, p_gap),
            "p_beats_default": wins.get(name, {}).get("task_default") if name != "task_default" else None,
            "picked_by": [f"envcoder, iteration {r['iteration']}" for r in records if r.get("best_response") == name]
            + [f"Eureka's log, iteration {r['iteration']}" for r in records
               if name == f"env_iter{r['iteration']}_response{r.get('eureka_best')}_rewardonly"]}
    return report


def iteration_record(run: Path, iteration: int, evaluation: dict) -> dict:
    """What one Eureka iteration's responses did in `evaluation`, beside what Eureka's log says of them."""
    rows = evaluation["rows"]
    prefix = f"env_iter{iteration}_"
    mine = [n for n in rows if n.startswith(prefix)]  # in envcoder's ranking order
    record = {"iteration": iteration, "responses": sum(n.startswith(prefix) for n in evaluation["responses"]),
              "exit": evaluation["exit"], "wall_s": evaluation["wall_s"], "launches": evaluation["launches"],
              "command": evaluation["command"],
              "validated": sorted(int(re.search(r"response(\d+)_", n).group(1)) for n in mine),
              **log_facts(run / "eureka.log", iteration)}
    record["fitness"] = {n: [rows[n].get("fitness_mean"), rows[n].get("ci_low"), rows[n].get("ci_high")]
                         for n in mine + [n for n in ("sparse", "task_default") if n in rows]}
    best = record.get("eureka_best")
    name = f"{prefix}response{best}_rewardonly" if best is not None else None
    record["eureka_best_rank"] = mine.index(name) + 1 if name in mine else None  # among this iteration's responses
    sparse, default, p_gap = gap(evaluation)
    if mine and sparse is not None:
        record["best_response"] = mine[0]
        record["p_default_beats_sparse"] = p_gap
        record["hns"] = hns(rows[mine[0]]["fitness_mean"], sparse, default, p_gap)
    return record


def hns_text(record: dict, p_gap: float | None = None) -> str:
    """A record's HNS for the table, or why it is not defined."""
    if record.get("hns") is not None:
        return f"{record['hns']:.2f}"
    p_gap = record.get("p_default_beats_sparse", p_gap)
    return "-" if p_gap is None else f"not defined (P(default beats sparse) = {p_gap:.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a Eureka run folder (env_iter*_response*_rewardonly.py, eureka.log)")
    parser.add_argument("--task", required=True)
    parser.add_argument("--eureka-iterations", dest="iterations", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                        help="Eureka's iterations to evaluate, one `envcoder eval` each (default all five)")
    parser.add_argument("--together", action="store_true",
                        help="all the iterations asked in one `envcoder eval` (one budget, one ranking) instead of one "
                             "each")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("runs/eureka_run"))
    parser.add_argument("--fresh-seeds", type=int, default=0, metavar="N",
                        help="then retrain each iteration's best response and the one Eureka's log names best, beside "
                             "the sparse start and the task default, on N fresh seeds in one `envcoder eval`: their "
                             "HNS on seeds that did not pick them (default 0: not run)")
    parser.add_argument("--fresh-seed", type=int, default=1000, help="the fresh seeds' first (default 1000)")
    parser.add_argument("--fresh-picks", choices=("iteration", "run"), default="iteration",
                        help="retrain each iteration's two bests (envcoder's and Eureka's; default) or the run's: "
                             "envcoder's best over all the iterations and Eureka's best of its highest-success "
                             "iteration")
    parser.add_argument("--fresh-args", default=None, metavar="ARGS",
                        help="the retraining's own `envcoder eval` arguments, one string (default: those after `--`), "
                             "for a budget at which the sparse start and the task default separate")
    parser.add_argument("--resume", action="store_true",
                        help="continue the evaluations an earlier launch with the same --out began (interrupted by "
                             "Ctrl-C or `timeout -s INT`) from their checkpoints, and read the finished ones")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)  # after `--`: more `envcoder eval` options
    args, extra = parser.parse_args(argv[:cut]), argv[cut + 1:]
    args.out.mkdir(parents=True, exist_ok=True)
    groups = [args.iterations] if args.together else [[i] for i in args.iterations]
    records = []
    for group in groups:
        evaluation = evaluate(args.run, args.task, group, args.seeds, args.out, extra, args.resume)
        if evaluation["exit"] == 130:
            sys.exit(f"interrupted: the evaluation of iterations {group} stopped at its checkpoint; continue it "
                     "with the same command and --resume")
        for iteration in group:
            records.append(iteration_record(args.run, iteration, evaluation))
            print(json.dumps(records[-1]), flush=True)
        order = list(evaluation["rows"])
        print(json.dumps({"iterations": group, "ranking": order, "wall_s": evaluation["wall_s"]}), flush=True)
    print("\n| iteration | validate (envcoder / Eureka's execute rate) | Eureka's best: envcoder's rank in its iteration | "
          "best response | "
          "HNS | wall clock: envcoder from launch / Eureka's log |")
    print("|---|---|---|---|---|---|")
    for r in records:
        rate = r.get("eureka_execute_rate")
        print(f"| {r['iteration']} | {len(r['validated'])}/{r['responses']} / {rate} | {r.get('eureka_best_rank')} | "
              f"{r.get('best_response')} | {hns_text(r)} | {r['wall_s']:.0f} s / {r.get('eureka_wall_s')} s |")
    if args.together:
        log_wall = sum(r.get("eureka_wall_s") or 0 for r in records)
        print(f"\nOne evaluation of iterations {', '.join(map(str, args.iterations))}: {records[0]['wall_s']:.0f} s from "
              f"launch; Eureka's log: {log_wall:.0f} s for the same responses (the table's wall clocks are the whole "
              "evaluation's)")
    if args.fresh_seeds:
        fresh_extra = shlex.split(args.fresh_args) if args.fresh_args is not None else extra
        fresh = retrain(args.run, args.task, records, args.fresh_seeds, args.fresh_seed, args.out, fresh_extra,
                        args.fresh_picks, args.resume)
        if fresh["exit"] == 130:
            sys.exit("interrupted: the retraining on fresh seeds stopped at its checkpoint; continue it with the same "
                     "command and --resume")
        print(json.dumps({"fresh": fresh}), flush=True)
        print(f"\nRetrained on {fresh['seeds']} fresh seeds (from {fresh['first_seed']}), {fresh['wall_s']:.0f} s from "
              "launch:\n\n| file | picked by | fitness [95% CI] | HNS | P(beats task default) |\n|---|---|---|---|---|")
        for name, r in fresh["responses"].items():
            if "fitness" in r:
                mean, low, high = r["fitness"]
                p_beats = "-" if r["p_beats_default"] is None else f"{r['p_beats_default']:.2f}"
                print(f"| {name} | {'; '.join(r['picked_by']) or '-'} | {mean:.3g} [{low:.3g}, {high:.3g}] | "
                      f"{hns_text(r, fresh.get('p_default_beats_sparse'))} | {p_beats} |")
    sys.exit(0)


if __name__ == "__main__":
    main()
