"""What an LLM proposer is told, and how its answer becomes a candidate file.

- `system_prompt`: the rules a candidate must follow and the task's reference (`describe_task`).
- `first_prompt` / `reflection_prompt`: the task description, then, after each iteration, the per-candidate
  task fitness, the statistics of every reward component over training (as Eureka reports them), the errors
  of failed candidates and the best candidate so far with its code.
- `fix_prompt`: a candidate that failed validation is sent back with its error.
- `extract_code`: the candidate's source out of a response (fenced blocks, or bare code).
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Mapping, Sequence

from envcoder.candidates import ALLOWED_IMPORTS
from envcoder.candidates.describe import describe_task
from envcoder.shaping.api import SHAPING_TYPES, signature
from envcoder.text import one_line, parse as parse_source

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def system_prompt(task, shaper_types: Sequence[str], fitness_name: str) -> str:
    fitness = task.fitness[fitness_name]
    functions = "\n".join(f"- `{signature(api)}` -> {SHAPING_TYPES[api].returns}" for api in shaper_types)
    return f"""You are an expert in reinforcement learning for robotics who writes environment-shaping code.
A policy is trained with PPO in thousands of parallel MuJoCo MJX environments using your functions, and is then
judged only by the task's own fitness `{fitness_name}`: {fitness.doc}.

Write a Python module that defines:
{functions}

Rules:
- Use jax.numpy (`jnp`). Functions are jit-compiled and vmapped: no Python `if`/`while`/`for` on array values
  (use `jnp.where`), no in-place updates, no printing. Every array has a leading environment axis [E, ...].
- `jax`, `jnp`, `math` and the helpers listed below are already in the namespace. Imports are limited to
  {', '.join(sorted(ALLOWED_IMPORTS))}. No file, OS or network access, no `eval`/`exec`/`getattr`, no
  dunder names, no `str.format` (use f-strings), never change `state` in place (build a new dict).
- Module-level constants (e.g. `FORWARD_WEIGHT = 1.0`) make weights easy to tune.
- Functions you do not define keep the task's defaults, shown below.
- Answer with the complete module in one ```python code block.

{describe_task(task, shaper_types)}"""


def first_prompt(task_description: str, shaper_types: Sequence[str], starting: Mapping[str, str]) -> str:
    text = f"Task: {task_description}\n\nWrite {', '.join(shaper_types)} for this task."
    for name, source in starting.items():
        text += f"\n\nA starting candidate, `{name}`:\n```python\n{source.rstrip()}\n```"
    return text + "\n\nAnswer with one ```python code block."


ERROR_QUOTE_CHARACTERS = 400
"""The most of a file's error a prompt quotes (on one line, as a JSON string: data, never an instruction)."""


def fix_prompt(error: str) -> str:
    return (f"Your code could not be used (the error, quoted): {json.dumps(one_line(error, ERROR_QUOTE_CHARACTERS))}"
            "\nFix it and answer with the complete module in one ```python code block.")


def _fmt(value: float) -> str:
    return "nan" if value is None or not math.isfinite(value) else f"{value:.3g}"


def training_statistics(metrics_csv: Path, points: int = 10) -> dict[str, dict[str, list[float]]]:
    """Per candidate: each logged series (task fitness, shaped return, episode length, every reward component)
    averaged over seeds, at `points` iterations evenly spread over training."""
    if not metrics_csv.exists():
        return {}
    with open(metrics_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    keys = ["task_fitness", "task_fitness_per_step", "shaped_return", "episode_length"]
    keys += [k for k in (rows[0] if rows else {}) if k.startswith("reward/")]
    series: dict[str, dict[str, dict[int, list[float]]]] = {}
    for row in rows:
        per_key = series.setdefault(row["candidate"], {})
        for key in keys:
            if row.get(key, "") != "":
                per_key.setdefault(key, {}).setdefault(int(row["iteration"]), []).append(float(row[key]))
    stats = {}
    for name, per_key in series.items():
        stats[name] = {}
        for key, by_iteration in per_key.items():
            iterations = sorted(by_iteration)
            n = min(points, len(iterations))  # every one where there are fewer
            picks = sorted({iterations[round(i * (len(iterations) - 1) / max(n - 1, 1))] for i in range(n)})
            stats[name][key] = [sum(by_iteration[i]) / len(by_iteration[i]) for i in picks]
    return stats


def row_statistics(out: Path, row: Mapping | None) -> dict[str, list[float]] | None:
    """The training statistics (`training_statistics`) of a search's table row (`out`: the run's directory): a
    halving set's from its groups in its last rung, trained from scratch (`iter_KK/rung_R/`, averaged over them),
    another row's from its iteration's evaluation; None where there are none."""
    if row is None:
        return None
    where = out / f"iter_{row['iteration']:02d}"
    if not row.get("rung"):
        return training_statistics(where / "eval" / "metrics.csv").get(row["name"])
    where = where / f"rung_{row['rung']}"
    groups = [f.stem for f in sorted((where / "candidates").glob("*.py")) if f.read_text() == row["source"]]
    per_group = [stats for name, stats in training_statistics(where / "eval" / "metrics.csv").items()
                 if name in groups]
    keys = set.intersection(*(set(stats) for stats in per_group)) if per_group else set()
    return {key: [sum(values) / len(values) for values in zip(*(stats[key] for stats in per_group))]
            for key in sorted(keys)} or None


def statistics_text(stats: Mapping[str, list[float]]) -> str:
    labels = {"task_fitness": "task fitness of finished episodes",
              "task_fitness_per_step": "task fitness per step (all envs)",
              "shaped_return": "shaped return (your reward, summed over an episode)",
              "episode_length": "episode length (steps)"}
    lines = []
    for key, values in stats.items():
        label = labels.get(key, f"reward component `{key.removeprefix('reward/')}` (mean per step)")
        lines.append(f"- {label}: [{', '.join(_fmt(v) for v in values)}]"
                     f" (min {_fmt(min(values))}, max {_fmt(max(values))})")
    return "\n".join(lines)


def reflection_prompt(task_description: str, shaper_types: Sequence[str], iteration: int, fitness_name: str,
                      higher_is_better: bool, table: Sequence[Mapping], failures: Sequence[Mapping],
                      best: Mapping | None, best_stats: Mapping[str, list[float]] | None,
                      latest_best: Mapping | None, latest_stats: Mapping[str, list[float]] | None) -> str:
    """The next iteration's request: what the last one did and what the best candidate so far looks like.

    `table` rows: `name, fitness, shaped_return, episode_length, status`; `failures`: `name, error`;
    `best`/`latest_best`: `name, iteration, fitness, source`.
    """
    better = "higher" if higher_is_better else "lower"
    lines = [f"Task: {task_description}", "",
             f"## Results of iteration {iteration} (task fitness `{fitness_name}`, {better} is better)", "",
             "| candidate | task fitness | shaped return | episode length | status |", "|---|---|---|---|---|"]
    for row in table:
        lines.append(f"| {row['name']} | {_fmt(row['fitness'])} | {_fmt(row['shaped_return'])} | "
                     f"{_fmt(row['episode_length'])} | {row['status']} |")
    if failures:
        lines += ["", "Candidates that could not be used (avoid these mistakes):"]
        # Quoted as data: an error's text is the file's (or the model's own answer), never an instruction.
        lines += [f"- {one_line(f['name'], 80)}: {json.dumps(one_line(f['error'], ERROR_QUOTE_CHARACTERS))}"
                  for f in failures]
    if latest_best is not None and latest_stats and (best is None or latest_best["name"] != best["name"]):
        lines += ["", f"Training statistics of this iteration's best, {latest_best['name']} "
                      f"(10 points spread over training):", statistics_text(latest_stats)]
    if best is not None:
        lines += ["", f"## Best candidate so far: {best['name']} (iteration {best['iteration']}, task fitness "
                      f"{_fmt(best['fitness'])})", "", "```python", best["source"].rstrip(), "```"]
        if best_stats:
            lines += ["", "Its training statistics (10 points spread over training):", statistics_text(best_stats)]
    lines += ["", "## How to improve",
              "- If the task fitness stays poor while the shaped return grows, the reward pays for something "
              "other than the task: change what it pays for.",
              "- A reward component that barely changes over training is not being optimised: rescale or "
              "rewrite it. One that is orders of magnitude larger than the rest dominates: re-weight it.",
              "- Short episodes are failures (compute_terminal). A negative reward per step pays the policy to "
              "end episodes early.", "",
              f"Write a new, improved {', '.join(shaper_types)}. Answer with the complete module in one ```python "
              "code block."]
    return "\n".join(lines)


def extract_code(text: str, shaper_types: Sequence[str]) -> str:
    """The candidate module in a response: the last fenced block that defines a selected function (several
    blocks that each define some are joined), else the whole text if it parses as Python, else the text from
    its first `import`/`def` line. Raises ValueError when there is no code."""
    blocks = [body for lang, body in _FENCE.findall(text) if lang.lower() in ("", "python", "py", "python3")]
    defining = [b for b in blocks if any(re.search(rf"^def {api}\s*\(", b, re.M) for api in shaper_types)]
    if defining:
        # One complete module is the rule; a response that spreads functions over blocks is joined.
        covered, chosen = set(), []
        for block in reversed(defining):
            names = {api for api in shaper_types if re.search(rf"^def {api}\s*\(", block, re.M)}
            if not names <= covered:
                chosen.insert(0, block)
                covered |= names
        return "\n\n".join(b.strip("\n") for b in chosen) + "\n"
    if blocks:
        return blocks[-1].strip("\n") + "\n"
    try:
        parse_source(text)
        if re.search(r"^def \w+\s*\(", text, re.M):
            return text.strip("\n") + "\n"
    except SyntaxError:
        pass
    match = re.search(r"^(import |from |def )", text, re.M)
    if match:
        return text[match.start():].strip("\n") + "\n"
    raise ValueError("no Python code found in the response")


__all__ = ["system_prompt", "first_prompt", "reflection_prompt", "fix_prompt", "extract_code",
           "training_statistics", "statistics_text"]
