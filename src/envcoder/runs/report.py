"""The run report `report.html`: one self-contained page (PNG plots by matplotlib, embedded) with the ranked
table and its confidence intervals, the task-fitness and shaped-return curves of every candidate, each
candidate's reward-component breakdown, the candidates left out or diverged with their reasons, and links
to videos made by `envcoder play` (`<run>/videos/*.mp4` or `.gif`).

Written at the end of every `envcoder eval`; `envcoder report RUN` writes it again.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from pathlib import Path

from envcoder.atomic import write_atomically

MAX_CURVES = 12
"""Candidates drawn in the curve plots (the best by rank); the table lists all."""


def _series(rows: list[dict], key: str) -> dict[str, tuple[list[int], list[float]]]:
    """Per candidate: (iterations, mean over seeds of `key`), skipping iterations where no seed has a value."""
    per: dict[str, dict[int, list[float]]] = {}
    for row in rows:
        if row.get(key, "") != "":
            per.setdefault(row["candidate"], {}).setdefault(int(row["iteration"]), []).append(float(row[key]))
    return {name: (sorted(v), [sum(v[i]) / len(v[i]) for i in sorted(v)]) for name, v in per.items()}


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _curves(rows, names, key, ylabel, title):
    import matplotlib.pyplot as plt

    series = _series(rows, key)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    drawn = [name for name in names if name in series]  # a candidate with no finished episode has no curve
    for name in drawn:
        ax.plot(*series[name], label=name, linewidth=1.4)
    ax.set(xlabel="PPO iteration", ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    src = _png(fig)
    plt.close(fig)
    return src


def _components(rows, names):
    """Mean of each reward component over the last quarter of training, per candidate (stacked bars)."""
    import matplotlib.pyplot as plt

    keys = sorted(k for k in (rows[0] if rows else {}) if k.startswith("reward/"))
    if not keys:
        return None
    last = max(int(r["iteration"]) for r in rows)
    tail = [r for r in rows if int(r["iteration"]) >= last * 3 // 4]
    values = {name: {k: _mean([float(r[k]) for r in tail if r["candidate"] == name and r[k] != ""]) for k in keys}
              for name in names}
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(names) + 1.5))
    positive, negative = [0.0] * len(names), [0.0] * len(names)
    colors = plt.get_cmap("tab20")
    for i, key in enumerate(keys):
        widths = [values[n][key] if math.isfinite(values[n][key]) else 0.0 for n in names]
        lefts = [p if w >= 0 else q for w, p, q in zip(widths, positive, negative)]
        ax.barh(names, widths, left=lefts, color=colors(i % 20), label=key.removeprefix("reward/"))
        positive = [p + max(w, 0) for w, p in zip(widths, positive)]
        negative = [q + min(w, 0) for w, q in zip(widths, negative)]
    ax.axvline(0, color="black", linewidth=0.8)
    ax.invert_yaxis()
    ax.set(xlabel="mean per step over the last quarter of training",
           title="Reward components (only those a candidate logs)")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    src = _png(fig)
    plt.close(fig)
    return src


def _mean(values):
    return sum(values) / len(values) if values else float("nan")


def _fmt(value, digits=3):
    return "–" if value is None or (isinstance(value, float) and not math.isfinite(value)) else f"{value:.{digits}f}"


def _diverged(results: dict) -> dict[str, list[tuple[int, int]]]:
    """Per candidate, `(seed, iteration)` of each of its groups that diverged."""
    diverged = {}
    for g in results["groups"]:
        if g.get("diverged_at_iteration") is not None:
            diverged.setdefault(g["candidate"], []).append((g["seed"], g["diverged_at_iteration"]))
    return diverged


def _ranking_html(results: dict) -> str:
    """The ranked table, and what not to conclude from it."""
    from envcoder.runs.ranking import beats_next
    from envcoder.runs.results import RunResults

    e, ranking, diverged = html.escape, results["ranking"], _diverged(results)
    table = ["<table><tr><th>rank</th><th class=name>candidate</th><th>task fitness</th><th>95% CI</th><th>seeds</th>"
             "<th>AUC (learning speed)</th><th>best in training</th><th>P(beats next)</th><th>shaped return</th>"
             "<th>episode length</th>"
             "<th>status</th></tr>"]
    record = RunResults.from_json(results)
    win = beats_next(record.ranking, record.win_probability, record.higher_is_better, record.rank_by)
    for i, r in enumerate(ranking, 1):
        ci = f"[{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]" if r["seeds"] > 1 else "–"
        status = ", ".join(f"seed {s} diverged at iteration {it}" for s, it in diverged.get(r["name"], [])) or "ok"
        if r.get("eliminated_at") is not None:
            status = f"dropped by halving after iteration {r['eliminated_at']} (training episodes' fitness); " + status
        following = ranking[i]["name"] if i < len(ranking) else None
        beats = win.get(r["name"], {}).get(following)
        table.append(f"<tr><td>{i}</td><td class=name>{e(r['name'])}</td><td>{_fmt(r['fitness_mean'])}</td>"
                     f"<td class=ci>{ci}</td><td>{r['seeds']}</td><td>{_fmt(r.get('auc'))}</td>"
                     f"<td>{_fmt(r.get('training_best'))}</td>"
                     f"<td>{_fmt(beats, 2)}</td>"
                     f"<td>{_fmt(r['shaped_return'], 2)}</td>"
                     f"<td>{_fmt(r['episode_length'], 0)}</td><td class=status>{e(status)}</td></tr>")
    table.append("</table>")
    unseparated, tied = record.not_separable_from_best, record.tied_with_best
    notes = (f"<p>Not separable from the best at 95%: {e(', '.join(unseparated))}.</p>" if unseparated else "")
    if any(r["seeds"] == 1 for r in ranking):
        notes += "<p>95% CI and P(beats next) –: one seed (<code>--seeds 2</code> or more gives them).</p>"
    if any(_fmt(r.get(key)) == "–" for r in ranking for key in ("auc", "training_best")):
        notes += ("<p>AUC and best in training –: no training episode ended (episodes outlast training: train "
                  "longer).</p>")
    if tied:
        notes += (f"<p>Tied with the best on task fitness, so ranked by learning speed (AUC: the mean training "
                  f"fitness over the iterations): {e(', '.join(tied))}.</p>")
    if any(b is not None for b in record.fitness_bounds):
        notes += "<p>95% intervals are clipped to the fitness's range [{}, {}].</p>".format(
            *("" if b is None else f"{b:g}" for b in record.fitness_bounds))
    if record.seed_rounds:
        notes += f"<p>{e(record.seed_rounds['verdict'])}.</p>"
    early = results.get("episodes_end_early")
    if early:
        notes += (f"<p><b>Every policy fails early:</b> {e(early['candidate'])}'s episodes last longest, "
                  f"{early['episode_length']:.0f} of {early['max_episode_length']:,} steps on average; the ranking "
                  "compares policies that all fail the task at this budget.</p>")
    improving = results.get("best_still_improving")
    if improving and improving["improving"]:
        notes += (f"<p><b>Still improving:</b> the best candidate's training fitness went from "
                  f"{_fmt(improving['earlier_mean'])} to {_fmt(improving['later_mean'])} over iterations "
                  f"{improving['from_iteration']}–{improving['to_iteration']}; longer training may change the "
                  "ranking.</p>")
    return "".join(table) + notes


def _left_out_html(results: dict) -> str:
    """The candidates left out before training and the groups that diverged, with their reasons."""
    e = html.escape
    failed = "".join(f"<li><b>{e(f['name'])}</b>: <code>{e(f['error'])}</code></li>"
                     for f in results.get("failures", []))
    failed += "".join(f"<li><b>{e(name)}</b>: seed {s} diverged at iteration {it} (non-finite rewards, "
                      "observations, actions or parameters); it kept its last finite policy</li>"
                      for name, seeds in _diverged(results).items() for s, it in seeds)
    return f"<ul>{failed}</ul>" if failed else "<p>None.</p>"


def _videos_html(run: Path) -> str:
    """The run's videos (`envcoder play --video RUN/videos/NAME.gif`, which writes this report again), shown: a GIF
    as a picture, an .mp4 as a video with controls, each under its name."""
    e = html.escape
    videos = sorted(v for v in (run / "videos").glob("*") if v.suffix.lower() in (".mp4", ".gif")) if (
        run / "videos").is_dir() else []
    shown = "".join(
        f'<figure><img src="videos/{e(v.name)}" alt="{e(v.stem)}"><figcaption>{e(v.name)}</figcaption></figure>'
        if v.suffix.lower() == ".gif" else
        f'<figure><video controls src="videos/{e(v.name)}"></video><figcaption>{e(v.name)}</figcaption></figure>'
        for v in videos)
    return shown or ("<p>None yet: <code>envcoder play --run RUN --candidate NAME --video RUN/videos/NAME.gif</code> "
                     "makes one and shows it here.</p>")


def write_report(run: str | Path) -> Path:
    """Write `<run>/report.html` from the run's records; returns its path."""
    run = Path(run)
    results = json.loads((run / "results.json").read_text())
    config = json.loads((run / "config.json").read_text())
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    names = [r["name"] for r in results["ranking"]]
    shown = names[:MAX_CURVES]
    better = "higher" if results["higher_is_better"] else "lower"
    e = html.escape
    fitness_png = _curves(rows, shown, "task_fitness", results["fitness"],
                          f"Task fitness of finished episodes ({better} is better), mean over seeds")
    return_png = _curves(rows, shown, "shaped_return", "shaped return", "Shaped return (each candidate's own reward)")
    components_png = _components(rows, names)
    timings = results.get("timings", {})
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>envcoder: {e(results['task'])} run report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 76em; color: #222; padding: 0 1em; }}
table {{ border-collapse: collapse; margin: 1em 0; width: 100%; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 0.3em 0.5em; text-align: right; }}
th {{ background: #f3f3f3; font-weight: 600; }} td.name, th.name, td.status {{ text-align: left; }}
td.name {{ font-family: monospace; overflow-wrap: anywhere; min-width: 10em; }} td.status {{ min-width: 8em; }}
td.ci {{ white-space: nowrap; }}
img {{ max-width: 100%; display: block; margin: 1em 0; }}
code {{ white-space: pre-wrap; }} .meta {{ color: #666; }}
</style></head><body>
<h1>{e(results['task'])}: {len(names)} candidates ranked by task fitness</h1>
<p class=meta>Fitness <b>{e(results['fitness'])}</b>: {e(results['fitness_doc'])}.<br>
{config['envs_per_candidate']} envs per candidate and seed, {config.get('train_iterations', config.get('iterations'))} training iterations, seeds
{e(str(config['seeds']))}; {e(config['versions']['device'])}, JAX {e(config['versions']['jax'])}, MuJoCo
{e(config['versions']['mujoco'])}; total {_fmt(timings.get('total_s'), 0)} s.</p>
<h2>Ranking</h2>
<p>Each policy is evaluated deterministically over one full episode per environment after training.</p>
{_ranking_html(results)}
<h2>Learning curves</h2>
<img alt="task fitness curves" src="{fitness_png}">
<img alt="shaped return curves" src="{return_png}">
{f'<h2>Reward components</h2><img alt="reward components" src="{components_png}">' if components_png else ''}
<h2>Left out or diverged</h2>
{_left_out_html(results)}
<h2>Videos</h2>
{_videos_html(run)}
</body></html>
"""
    path = run / "report.html"
    write_atomically(path, page)
    return path
