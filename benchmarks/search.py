"""How much of the gap to the task's default reward a search closes from deliberately poor starting rewards.

    python benchmarks/search.py --task Anymal --starts benchmarks/search_starts/anymal --proposer population \
        --out runs/search_anymal -- --candidates-per-iteration 12 --iterations 1 --copies 4 --train-iterations 300

Runs `envcoder auto` (the arguments after `--` are its own) with `--proposer` population, offline, or one of the
two baselines (jitter: constant jitter alone; random: random constants, no exploit step) from the starting files,
then reads its final evaluation, which trains the finds, every starting file (a population or random search) or
the best one, and `task_default`
side by side with the same seeds: the gap closed is `(best start - best find) / (best start - task default)` in the
fitness's better direction (1.0: the find is as good as the task's default; above 1: better). Writes
`<out>/search.json` with the numbers, the wall-clock seconds from process start and the compile seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from envcoder.search.settings import PROPOSERS

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True)
    parser.add_argument("--starts", type=Path, required=True, help="folder of deliberately poor starting files")
    parser.add_argument("--proposer", choices=PROPOSERS, default="population")
    parser.add_argument("--out", type=Path, required=True)
    args, rest = parser.parse_known_args()
    rest = [a for a in rest if a != "--"]
    from envcoder.cli import main as envcoder

    status = envcoder(["auto", "--task", args.task, "--initial", str(args.starts), "--proposer", args.proposer,
                       "--out", str(args.out), *rest])
    wall_s = time.time() - START
    summary = json.loads((args.out / "summary.json").read_text())
    starts = {f"init_{p.stem}" for p in args.starts.glob("*.py")}
    result = {"task": args.task, "proposer": args.proposer, "arguments": rest, "status": status,
              "wall_s_from_process_start": wall_s, **gap_closed(summary, starts),
              "compile": [it.get("compile") for it in summary["iterations"]], "final_seeds": summary.get("final_seeds"),
              "task_default_verdict": (summary.get("task_default") or {}).get("text")}
    (args.out / "search.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result.get(k) for k in ("gap_closed", "error", "wall_s_from_process_start")} | {
        k: result[k]["name"] + f" {result[k]['fitness_mean']:.3f}" for k in ("best_start", "best_find", "task_default")
        if isinstance(result.get(k), dict)}, indent=1))
    sys.exit(status)


if __name__ == "__main__":
    main()
