"""A whole public LLM run through `envcoder eval`: Eureka's responses as they are, one Eureka iteration per evaluation.

Reads a checkout of a Eureka run folder (for example nicholaschenai/eureka_artifacts' `eureka/2025-01-25_04-08-48`,
a Humanoid run of gpt-4o-2024-08-06: 16 responses × 5 iterations as `env_iter{i}_response{j}_rewardonly.py`, and
`eureka.log`) from the path you give; nothing of it is copied into this repository. For each iteration asked it runs,
as a user would and timed from launch,

    envcoder eval --task TASK --functions <that iteration's 16 reward files + the task's sparse start>
                  --task-default --seeds SEEDS

and prints one JSON line per iteration and a Markdown table: how many responses validate against the execute rate
that Eureka's log states, each response's fitness with its interval, where envcoder ranks the response that Eureka's
log names as the iteration's best, the wall clock from launch against the log's for the same responses, and the best
response's human-normalized score HNS = (best − sparse) / (default − sparse) on the run's own seeds (a fresh-seed
retrain is `envcoder eval --functions BEST --seeds N` again).

    python benchmarks/eureka_run.py PATH/eureka/2025-01-25_04-08-48 --task Humanoid --eureka-iterations 0 --seeds 3
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shutil
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


def run_iteration(run: Path, task: str, iteration: int, seeds: int, out: Path, extra: list[str]) -> dict:
    folder = out / f"iter{iteration}_inputs"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    responses = sorted(run.glob(f"env_iter{iteration}_response*_rewardonly.py"))
    for file in responses:
        shutil.copyfile(file, folder / file.name)
    shutil.copyfile(SPARSE / f"{task.lower()}.py", folder / "sparse.py")
    run_dir = out / f"iter{iteration}"
    shutil.rmtree(run_dir, ignore_errors=True)
    argv = ["envcoder", "eval", "--task", task, "--functions", str(folder), "--task-default", "--seeds", str(seeds),
            "--out", str(run_dir), "--no-tensorboard", *extra]
    began = time.perf_counter()
    with open(out / f"iter{iteration}.log", "w") as log:
        code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - began
    results = json.loads((run_dir / "results.json").read_text()) if (run_dir / "results.json").exists() else {}
    rows = {row["name"]: row for row in results.get("ranking", [])} if results else {}
    trained = sorted(int(re.search(r"response(\d+)_", n).group(1)) for n in rows if n.startswith("env_iter"))
    record = {"iteration": iteration, "responses": len(responses), "exit": code, "wall_s": round(wall, 1),
              "validated": trained, "command": " ".join(argv[:5] + ["DIR"] + argv[6:]),
              **log_facts(run / "eureka.log", iteration)}
    record["fitness"] = {name: [row.get("fitness_mean"), row.get("ci_low"), row.get("ci_high")]
                         for name, row in rows.items()}
    order = [name for name in rows]
    best = record.get("eureka_best")
    name = f"env_iter{iteration}_response{best}_rewardonly" if best is not None else None
    record["eureka_best_rank"] = order.index(name) + 1 if name in order else None
    responses_ranked = [n for n in order if n.startswith("env_iter")]
    if responses_ranked and "sparse" in rows and "task_default" in rows:
        top, sparse, default = (rows[responses_ranked[0]]["fitness_mean"], rows["sparse"]["fitness_mean"],
                                rows["task_default"]["fitness_mean"])
        record["best_response"] = responses_ranked[0]
        record["hns"] = (top - sparse) / (default - sparse) if default != sparse else None
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a Eureka run folder (env_iter*_response*_rewardonly.py, eureka.log)")
    parser.add_argument("--task", required=True)
    parser.add_argument("--eureka-iterations", dest="iterations", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                        help="Eureka's iterations to evaluate, one `envcoder eval` each (default all five)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("runs/eureka_run"))
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)  # after `--`: more `envcoder eval` options
    args, extra = parser.parse_args(argv[:cut]), argv[cut + 1:]
    args.out.mkdir(parents=True, exist_ok=True)
    records = []
    for iteration in args.iterations:
        record = run_iteration(args.run, args.task, iteration, args.seeds, args.out, extra)
        records.append(record)
        print(json.dumps(record), flush=True)
    print("\n| iteration | validate (envcoder / Eureka's execute rate) | Eureka's best: envcoder's rank | best response | "
          "HNS | wall clock: envcoder from launch / Eureka's log |")
    print("|---|---|---|---|---|---|")
    for r in records:
        rate = r.get("eureka_execute_rate")
        print(f"| {r['iteration']} | {len(r['validated'])}/{r['responses']} / {rate} | {r.get('eureka_best_rank')} | "
              f"{r.get('best_response')} | {r.get('hns')} | {r['wall_s']:.0f} s / {r.get('eureka_wall_s')} s |")
    sys.exit(0)


if __name__ == "__main__":
    main()
