"""Candidates vs wall time and vs GPU memory, one process against one process per candidate (Anymal, H100).

Reads the JSON files that `scaling.py scale` and `scaling.py processes` wrote to docs/benchmarks/ (100 PPO
iterations × 256 envs per candidate) and draws the figure in the style of the original claim:

    python benchmarks/plot_scaling.py --docs docs/benchmarks
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

GPU_GIB = 79.6  # H100 80GB HBM3, as nvidia-smi reports it


def load(docs: Path) -> dict:
    scale = json.loads((docs / "scaling_anymal_100it.json").read_text())["rows"]
    processes = json.loads((docs / "one_process_per_candidate_anymal.json").read_text())["rows"]
    singles, concurrent = processes[0], processes[1:]
    one = {1: singles["single_process_cold_cache"]}
    one.update({r["one_process_same_candidates"]["groups"]: r["one_process_same_candidates"] for r in concurrent})
    one.update({r["groups"]: r for r in scale if "error" not in r})
    warm = singles["single_process_warm_cache"]["wall_s"]
    separate = {r["processes"]: r for r in concurrent}
    per_process_gib = max((r["gpu_memory_used_mib_peak"] - r["gpu_memory_used_mib_before"]) / 1024 / n
                          for n, r in separate.items())
    return {
        "one": {n: (r["wall_s"], r["peak_gpu_memory_gib"]) for n, r in sorted(one.items())},
        "separate": {n: (r["wall_s_all_processes"], (r["gpu_memory_used_mib_peak"] - r["gpu_memory_used_mib_before"]) / 1024)
                     for n, r in sorted(separate.items())},
        "sequential_one_s": warm, "per_process_gib": per_process_gib,
    }


def plot(data: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    one, separate = data["one"], data["separate"]
    fits = int(GPU_GIB / data["per_process_gib"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    n_one = list(one)
    left.plot(n_one, [one[n][0] for n in n_one], "o-", label="one process (envcoder)")
    left.plot(list(separate), [v[0] for v in separate.values()], "s-", label="one process per candidate, all at once")
    seq = [1, 8, 32, 128, 512, 1024]
    left.plot(seq, [n * data["sequential_one_s"] for n in seq], ":", c="gray",
              label=f"one process per candidate, one after another\n(n × {data['sequential_one_s']:.1f} s, measured once)")
    left.axvline(fits, c="tab:orange", lw=0.8, ls="--")
    left.text(fits * 1.08, 0.04, f"≈{fits} processes\nfill the GPU", color="tab:orange", fontsize=8,
              transform=left.get_xaxis_transform())
    left.set(xscale="log", yscale="log", xlabel="candidates (× 256 envs, 100 PPO iterations)",
             ylabel="wall time for all candidates (s)")
    left.legend(fontsize=8, loc="upper left")
    right.plot(n_one, [one[n][1] for n in n_one], "o-", label="one process (JAX peak)")
    right.plot(list(separate), [v[1] for v in separate.values()], "s-", label="one process per candidate (nvidia-smi)")
    ext = [max(separate), fits]
    right.plot(ext, [n * data["per_process_gib"] for n in ext], "--", c="tab:orange",
               label=f"{data['per_process_gib']:.2f} GiB per process, extrapolated")
    right.axhline(GPU_GIB, c="k", lw=0.8)
    right.text(1.1, GPU_GIB * 1.08, "H100 80 GB", fontsize=8)
    right.set(xscale="log", yscale="log", xlabel="candidates (× 256 envs)", ylabel="GPU memory (GiB)")
    right.legend(fontsize=8, loc="lower right")
    fig.suptitle("Anymal on one H100: all candidates in one process vs one process per candidate", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "benchmarks")
    args = parser.parse_args()
    data = load(args.docs)
    print(json.dumps({k: v for k, v in data.items()}, indent=1))
    plot(data, args.docs / "candidates_vs_time_memory.png")


if __name__ == "__main__":
    main()
