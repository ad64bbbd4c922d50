"""`envcoder auto`'s summary in words (`summary.md`)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from envcoder.candidates import TASK_DEFAULT
from envcoder.runs.ranking import compare
from envcoder.runs.results import fitness_digits
from envcoder.text import plural


def finite_number(value) -> bool:
    """Whether `value` is a finite int or float (a fitness or AUC read back from JSON may be None or NaN)."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def summary_text(summary: dict, terminal: bool = False, run: str = "RUN") -> str:
    """summary.md's text; `terminal`: the shorter form `envcoder auto` prints at its end, without the diff, the
    population's paragraph and the table of iterations (each iteration's lines were printed as it ran). `run`: the
    search's run directory, in the commands that act on its answer."""
    better = "higher" if summary["higher_is_better"] else "lower"
    lines = [f"# envcoder auto: {summary['task']} — {summary['task_description']}", "",
             f"Proposer {summary['proposer']}; {_account(summary)}; task fitness `{summary['fitness']}` ({better} is "
             "better).", ""]
    best = summary["best"]
    if best is None:
        lines.append("No candidate could be trained: see iter_*/drafts.json for the reasons.")
    else:
        lines += [found_text(summary), ""]
        ci = f" (95% CI [{best['ci_low']:#.4g}, {best['ci_high']:#.4g}])" if best["seeds"] > 1 else ""
        lines.append(f"Best: **{best['name']}** (iteration {best['iteration'] + 1}), {summary['fitness']} "
                     f"{best['fitness_mean']:#.4g}{ci} over {plural(best['seeds'], 'seed')} in the final evaluation; "
                     f"its code is best.py.")
        for leader in summary.get("leaders_not_in_final") or []:
            lines += ["", f"{leader['name']}, which led iteration {leader['iteration'] + 1}, is not in the final "
                          f"under that name: {leader['why']}."]
        if summary.get("final_seeds"):
            lines += ["", f"Final evaluation: {summary['final_seeds']['verdict']}."]
        early = summary.get("episodes_end_early")
        if early:
            lines += ["", f"**Every policy fails early:** {early['candidate']}'s episodes last longest in the final "
                          f"evaluation, {early['episode_length']:.0f} of {early['max_episode_length']:,} steps on "
                          "average; the ranking compares policies that all fail the task at this budget. Train "
                          "longer (--train-iterations) or with more environments (--envs-per-candidate)."]
        commands = commands_lines(summary, run)
        if commands and not terminal:  # the terminal gets them as plain lines to copy (`run_auto`)
            lines += ["", "To watch a policy and read the final's report:", "", "```bash", *commands, "```"]
        lines += ["", "| rank | candidate | fitness | 95% CI | seeds | AUC |", "|---:|---|---:|---|---:|---:|"]
        ranking = summary["final_ranking"]
        digits = fitness_digits([r["fitness_mean"] for r in ranking])
        for i, r in enumerate(ranking, 1):
            auc = f"{r['auc']:.3f}" if finite_number(r.get("auc")) else "-"  # no training episode ended
            ci = f"[{r['ci_low']:.{digits}f}, {r['ci_high']:.{digits}f}]" if r["seeds"] > 1 else "-"
            lines.append(f"| {i} | {r['name']} | {r['fitness_mean']:.{digits}f} | {ci} | {r['seeds']} | {auc} |")
    readable = _readable_lines(summary.get("readable"))
    if terminal and "```diff" in readable:
        readable = readable[:readable.index("```diff") - 1] + ["", "The diff: summary.md."]
    lines += readable
    if terminal:
        return "\n".join(lines + ["", _calls_line(summary)]) + "\n"
    lines += _population_lines(summary)
    if summary["iterations"]:
        lines += ["", "| iteration | copies | valid / attempts | best | best fitness | programs compiled (s) | s |",
                  "|---|---|---|---|---|---|---|"]
    for it in summary["iterations"]:
        fit = f"{it['best_fitness']:#.4g}" if finite_number(it["best_fitness"]) else "-"
        compiled = it.get("compile") or {}
        compiles = f"{compiled['compiles']} ({compiled['seconds']:.1f})" if "compiles" in compiled else "-"
        rungs = [rung["compile"] for rung in it.get("halving", []) if "compiles" in rung["compile"]]
        if rungs:  # successive halving after a population run: programs reused, not compiled
            compiles += "; halving rungs " + ", ".join(f"{c['compiles']} ({c['seconds']:.1f})" for c in rungs)
        seconds = (f"{it['seconds']:.0f}" if it.get("seconds") is not None else "-") + _budget_note(it)
        lines.append(f"| {it['iteration'] + 1} | {it.get('copies') or '-'} | {it['valid']} / {it['attempts']} | "
                     f"{it['best'] or '-'} | {fit} | {compiles} | {seconds} |")
    return "\n".join(lines + ["", _calls_line(summary)]) + "\n"


def _calls_line(summary: dict) -> str:
    """What the proposer's calls cost."""
    if summary.get("offline"):
        return (f"Proposer calls: {summary['proposer_calls']} ({summary['failed_calls']} failed), offline: no model, "
                "no tokens, no cost.")
    cost = "unknown (no list price for this model; pass --price)" if summary["cost_usd"] is None \
        else f"${summary['cost_usd']:.2f}"
    return (f"Proposer calls: {summary['proposer_calls']} ({summary['failed_calls']} failed); tokens in "
            f"{summary['input_tokens']:,}, out {summary['output_tokens']:,}; estimated cost {cost}.")


def found_text(summary: dict) -> str:
    """The summary's first answer, "was anything found": the best file against the best starting file and against
    the task default in the final evaluation, each with its interval; where the best is a starting file unchanged,
    that no proposal beat it."""
    found, best = summary.get("found") or {}, summary["best"]
    default = (summary.get("task_default") or {}).get("text", "The task default was not in the final evaluation.")
    kind = found.get("kind")
    if kind == "start":
        return (f"**Nothing found beyond the starting files:** the best is {best['name']}, a starting file unchanged; "
                f"no proposal beat it in the final evaluation. {default}")
    what = (f"the starting file {found['start_file']} with constants the search tuned" if kind == "tuned"
            else f"proposed in iteration {best['iteration'] + 1}")
    starts = (found.get("against_start") or {}).get("text") or "There was no starting file to compare it with."
    if beats_references(summary):
        return f"**Found: {best['name']}**, {what}. {starts} {default}"
    return (f"**No find beats both the best starting file and the task default with P(beats) ≥ {FOUND_P:g}:** the "
            f"best of the search is {best['name']}, {what}. {starts} {default}")


FOUND_P = 0.9
"""The probability with which a find must beat the best starting file and the task default in the final evaluation
for the summary to say it was found."""


def beats_references(summary: dict) -> bool:
    """Whether the best file beats the best starting file (where there was one) and the task default in the final
    evaluation with P(beats) ≥ `FOUND_P` each."""
    references = [summary.get("task_default")] + ([(summary.get("found") or {}).get("against_start")]
                                                  if (summary.get("found") or {}).get("against_start") else [])
    return all(r is not None and (r.get("p_beats") or 0.0) >= FOUND_P for r in references)


def commands_lines(summary: dict, run: str) -> list[str]:
    """The commands that act on the search's answer: `envcoder play` for the best file and for the best starting
    file of the final evaluation (`RUN` is the search's run directory: play and report take it as it is), and
    `envcoder report`."""
    lines = []
    start = ((summary.get("found") or {}).get("against_start") or {}).get("name")
    for label, name in (("the best file", (summary.get("best") or {}).get("name")), ("the best starting file", start)):
        if name:
            lines.append(f"envcoder play {run} --candidate {name} --video {run}/videos/{name}.gif   # {label}")
    return lines + [f"envcoder report {run}   # the final evaluation's report.html"] if lines else []


def _budget_note(it: dict) -> str:
    """The iteration table's words on what `--budget` cut of an iteration ("" where nothing)."""
    cut = []
    if it.get("stopped_by_budget_after"):
        cut.append(f"stopped its training after {plural(it['stopped_by_budget_after'], 'iteration')}")
    if it.get("halving_rungs_skipped_by_budget"):
        cut.append(f"skipped {plural(it['halving_rungs_skipped_by_budget'], 'halving rung')}")
    return f" (--budget {' and '.join(cut)})" if cut else ""


def _population_lines(summary: dict) -> list[str]:
    """The summary's paragraph on a population, random or seeds search's copies and halving rungs."""
    population = summary.get("population")
    if not population:
        return []
    kind = population.get("search") or ("population" if population["interval"] else "random")  # older runs
    lines = ["", {
        "population": f"Population-based training: {population['copies']} copies trained; "
                      f"{population['takeovers']} takeovers in {population['exploit_steps']} exploit steps ("
                      + ("every iteration" if population["interval"] == 1 else
                         f"every {population['interval']} iterations") + ").",
        "random": f"Random search: {population['copies']} copies with random constants trained; no exploit step.",
        "seeds": f"Seeds search: {population['copies']} copies trained, each with its file's constants as written; "
                 "no exploit step."}[kind]]
    rungs = max((len(it.get("halving", [])) for it in summary["iterations"]), default=0)
    if rungs and kind == "seeds":
        lines[-1] += (f" Then {plural(rungs, 'rung')} of successive halving: each file trained again from scratch "
                      "with new seeds in all its groups, ranked by the mean over its seeds.")
    elif rungs:
        own = " (the population's and its own as proposed)" if kind == "population" else ""
        lines[-1] += (f" Then {plural(rungs, 'rung')} of successive halving: each file's best constants{own} "
                      "trained again from scratch in the groups of those dropped, ranked by the mean over their "
                      "seeds.")
    return lines


def _readable_lines(readable: dict | None) -> list[str]:
    """What summary.md says of `best_readable.py` (`envcoder.search.readable.readable_find`)."""
    if not readable:
        return []
    if readable.get("file") is None:
        return ["", f"No best_readable.py and no diff: {readable['why']}."]
    checked = ("checked in the sandbox to be the same program" if readable["same_program"] else
               "NOT the same program in the sandbox's check: train best.py, which is the file that was ranked")
    how = ("written flat (helpers inlined, names kept" if readable.get("inlined", True) else
           "as it reads (flat already: nothing to inline, the start's quotes")
    lines = ["", f"`{readable['file']}` is best.py {how}; {checked}; its constants to 4 significant digits, best.py "
                 "holds them as they trained)."]
    if readable.get("start") and not readable["diff"].strip():
        lines += ["", f"best.py is the best starting file, {readable['start']}, as written: no diff."]
    elif readable.get("start"):
        lines += ["", f"Against the best starting file, {readable['start']}: {readable['change']}.", "",
                  "```diff", readable["diff"].rstrip("\n"), "```"]
    else:
        lines += ["", "No diff: the search had no starting file (give --initial FILE to start from one)."]
    return lines


def _account(summary: dict) -> str:
    """What the search trained, counted from its run directories (`trained_groups`)."""
    files = summary.get("files") or {}
    text = (f"{plural(files.get('valid', 0), 'candidate file')} ({files.get('proposed', 0)} proposed, "
            f"{files.get('starting', 0)} starting) over {plural(len(summary['iterations']), 'iteration')}")
    trained = summary.get("trained") or {}
    stages = [f"{trained[key]} in {label}" for key, label in (
        ("search", "the search's evaluations"), ("halving", "its halving rungs"), ("final", "the final evaluation"))
        if trained.get(key)]
    return text + (f"; groups trained: {', '.join(stages)}" if stages else "")


def search_record(out: Path, records: list[dict], history: list[dict], results, head: dict) -> dict:
    """summary.json's record of the search in `out` (`records`: its iterations' `iteration.json`; `history`: every
    evaluated candidate; `results`: the final evaluation's, or None), after `head` (task, proposer, fitness, ...);
    `best` and `task_default` are None until the caller names the best file."""
    calls = [json.loads(p.read_text()) for p in sorted((out / "llm").glob("*.json"))]
    costs = [c["cost_usd"] for c in calls]
    iterations = [{k: r[k] for k in ("iteration", "best", "attempts", "valid")} | {
        "best_fitness": next((h["fitness"] for h in history if h["name"] == r["best"] and h["status"] == "ok"), None),
        "compile": r.get("compile", {}), "halving": r.get("halving", []), "copies": r.get("copies"),
        **{key: r.get(key) for key in ("seconds", "stopped_by_budget_after", "halving_rungs_skipped_by_budget")}}
        for r in records]
    return {
        **head, "iterations": iterations, "files": files_count(records), "trained": trained_groups(out),
        "proposer_calls": len(calls), "failed_calls": sum(1 for c in calls if c["error"]),
        "input_tokens": sum(c["input_tokens"] for c in calls), "output_tokens": sum(c["output_tokens"] for c in calls),
        "cost_usd": None if any(c is None for c in costs) else sum(costs),
        "final_ranking": [dataclasses.asdict(r) for r in results.ranking] if results else [],
        "final_seeds": results.seed_rounds if results else None,
        "episodes_end_early": results.episodes_end_early if results else None, "best": None, "task_default": None}


def files_count(records: list[dict]) -> dict[str, int]:
    """The candidate files that the iterations (`iteration.json` records) validated: valid, starting, proposed."""
    valid, starting = sum(r["valid"] for r in records), sum(r.get("starting", 0) for r in records)
    return {"valid": valid, "starting": starting, "proposed": valid - starting}


def trained_groups(out: Path) -> dict[str, int]:
    """The groups (one candidate file or copy, one seed) that each stage of the search in `out` trained, read
    from its evaluations' results.json: the iterations' own, their halving rungs' and the final's."""
    def count(pattern: str) -> int:
        return sum(len(json.loads(p.read_text()).get("groups", [])) for p in sorted(out.glob(pattern)))
    return {"search": count("iter_*/eval/results.json"), "halving": count("iter_*/rung_*/eval/results.json"),
            "final": count("final/eval/results.json")}


def environments_trained(folder: Path) -> float:
    """The environments that the evaluations under `folder` trained: each one's groups × its envs per group, in
    the share of its iterations that it trained where `--budget` stopped it (timings' "out_of_time")."""
    total = 0.0
    for results in sorted(folder.glob("**/eval/results.json")):
        config, record = json.loads((results.parent / "config.json").read_text()), json.loads(results.read_text())
        timings, share = record.get("timings", {}), 1.0
        iterations = config.get("train_iterations", config.get("iterations"))  # (the older name)
        if timings.get("out_of_time") and iterations:
            share = timings["stopped_after_iteration"] / iterations
        total += len(record.get("groups", [])) * config.get("envs_per_candidate", 0) * share
    return total


def measured(iter_dir: Path) -> dict:
    """What an iteration's `iteration.json` records of its evaluations, for `--budget`: the environments they
    trained (`environments_trained`), their training seconds (`training_seconds`), where `--budget` stopped its
    own evaluation's training, after how many of its iterations (`stopped_by_budget_after`), and the halving rungs
    that would have ended past it (`halving_rungs_skipped_by_budget`)."""
    record = {"environments": environments_trained(iter_dir), "training_seconds": training_seconds(iter_dir)}
    results, skipped = iter_dir / "eval" / "results.json", iter_dir / "rungs_skipped.json"
    timings = json.loads(results.read_text()).get("timings", {}) if results.exists() else {}
    if timings.get("out_of_time"):
        record["stopped_by_budget_after"] = timings["stopped_after_iteration"]
    if skipped.exists():
        record["halving_rungs_skipped_by_budget"] = json.loads(skipped.read_text())["rungs"]
    return record


def training_seconds(folder: Path) -> list[float]:
    """The seconds that each evaluation under `folder` trained after its first training iteration (which holds its
    compilation), in the order of their folders: an iteration's own evaluation (its population run), then its halving
    rungs'."""
    seconds = []
    for results in sorted(folder.glob("**/eval/results.json")):
        timings = json.loads(results.read_text()).get("timings", {})
        seconds.append(max(timings.get("total_s", 0.0) - timings.get("first_iteration_s", 0.0), 0.0))
    return seconds


def evaluation_table(iteration: int, variants: dict[str, str], results) -> tuple[list, list]:
    """An iteration's table (a row per candidate of `variants`, `{name: source}`, with its results in `results`, a
    `RunResults` or None) and the candidates that its evaluation left out."""
    ranking = {r.name: r for r in results.ranking} if results else {}
    diverged = {g.candidate for g in results.groups if g.diverged_at_iteration is not None} if results else set()
    eval_failures = {f.name: f.error for f in results.failures} if results else {}
    table, failures = [], []
    for name, source in variants.items():
        r = ranking.get(name)
        status = ("diverged" if name in diverged else "ok") if r else "left out"
        if r and r.eliminated_at is not None and status == "ok":  # its fitness: training episodes'
            status = f"dropped by halving after iteration {r.eliminated_at}"
        if r is None:
            failures.append({"name": name, "error": eval_failures.get(name, "not evaluated")})
        table.append({"name": name, "fitness": r.fitness_mean if r else None,
                      "auc": r.auc if r and math.isfinite(r.auc) else None,
                      "shaped_return": r.shaped_return if r else None,
                      "episode_length": r.episode_length if r else None, "status": status,
                      "source": source, "iteration": iteration})
    return table, failures


def against_default(results, best, higher_is_better: bool) -> dict | None:
    """The best file `best` (a `Ranked`) against the task's default shaping in the final evaluation `results`
    (`against`)."""
    return against(results, best, TASK_DEFAULT, "the task default", higher_is_better)


def against(results, best, other: str, label: str, higher_is_better: bool) -> dict | None:
    """The best file `best` (a `Ranked`) against the candidate `other` of the final evaluation `results` (`label`:
    what it is, in words: "the task default"), `envcoder.runs.ranking.compare`, with the sentence the summary
    shows; None where `other` is not in it."""
    default = next((r for r in results.ranking if r.name == other), None)
    if default is None:
        return None
    verdict = compare(best, default, higher_is_better)
    low, high = results.fitness_bounds
    clipped = ""
    if verdict["ci"] and low is not None and high is not None:  # a difference of two values in [low, high]
        width = high - low
        inside = [min(max(v, -width), width) for v in verdict["ci"]]
        clipped = f", clipped to ±{width:g}" if inside != verdict["ci"] else ""
        verdict["ci"] = inside
    amount = f"{abs(verdict['difference']):.4g}"
    interval = f" [95% CI {verdict['ci'][0]:.4g}, {verdict['ci'][1]:.4g}{clipped}]" if verdict["ci"] else ""
    p = f"P(beats) = {verdict['p_beats']:.2f}" if verdict["p_beats"] is not None else "one seed: P(beats) unknown"
    if verdict["beats"]:
        text = f"{best.name} beats {label} by {amount}{interval} ({p})."
    elif verdict["difference"] == 0 and (verdict["ci"] or [0, 0]) == [0, 0]:
        text = (f"{best.name} ties {label} ({default.fitness_mean:.4g} over every seed of both); it learns "
                f"{'faster' if _faster(best, default, higher_is_better) else 'no faster'} (AUC {best.auc:.3g} against "
                f"{default.auc:.3g}).")
    else:
        direction = "better" if verdict["difference"] > 0 else "worse" if verdict["difference"] < 0 else "no different"
        text = f"{best.name} is not shown to beat {label}: it is {direction} by {amount}{interval} ({p})."
    return {**verdict, "name": other, "fitness_mean": default.fitness_mean, "ci_low": default.ci_low,
            "ci_high": default.ci_high, "seeds": default.seeds, "text": text}


def _faster(a, b, higher_is_better: bool) -> bool:
    """Whether `a`'s learning speed (AUC) is better than `b`'s."""
    return (a.auc > b.auc) if higher_is_better else (a.auc < b.auc)
