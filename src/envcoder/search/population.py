"""`envcoder auto --proposer population`: population-based training over the starting files' constants, in one
run (`envcoder.runs.population`), then the winners written as plain files.

The population has the budget of the generational search it replaces (`candidates_per_iteration × iterations`
groups, each trained `train_iterations`), shared evenly among the starting files: copy 0 of a file is the file
itself, the others start from its constants each multiplied by up to 30× either way (`INITIAL_DECADES`; signs
kept, zeros stay zero). A file
whose constants cannot be data (it needs one as a Python number) joins with one copy. At the end every copy's
constants are those its group trained with last; a winner is written out with them, and the final evaluation trains
it from scratch next to the starting files and the task's default, because a researcher takes away a fixed file.
"""

from __future__ import annotations

import ast

import numpy as np

from envcoder.candidates.constants import lift_constants, with_constants

INITIAL_DECADES = 1.5
"""A copy's starting constants are the file's each multiplied by `10 ** U(-INITIAL_DECADES, INITIAL_DECADES)`: a
weight or a kernel width 100× off is within reach of the first copies."""


def seed_population(initial: dict[str, str], size: int, seed: int) -> dict[str, str]:
    """`{copy name: source}`: `size` copies (at least two per file) of the starting files `initial`
    (`{name: source}`), copy 0 the file itself."""
    rng = np.random.default_rng(seed)
    per_file = max(2, size // max(1, len(initial)))
    copies = {}
    for name, source in initial.items():
        try:
            _, constants, _ = lift_constants(ast.parse(source))
        except SyntaxError:
            constants = {}
        tunable = {k: v for k, v in constants.items() if v != 0.0}
        for k in range(per_file if tunable else 1):
            values = {c: v * float(10.0 ** rng.uniform(-INITIAL_DECADES, INITIAL_DECADES))
                      for c, v in tunable.items()} if k else {}
            copies[f"{name}-{k}"] = with_constants(source, values) if values else source
    return copies


def population_rows(results, record: dict | None, sources: dict[str, str], higher_is_better: bool,
                    iteration: int = 0) -> list[dict]:
    """The search's table rows of a population run: each copy with its fitness in the run's final evaluation and
    its source with the constants that its best group trained with last (`record`: the run's `population.json`)."""
    final = (record or {}).get("final_constants", {})
    diverged = {g.candidate for g in results.groups if g.diverged_at_iteration is not None}
    sign = 1.0 if higher_is_better else -1.0
    rows = []
    for r in results.ranking:
        groups = sorted((g for g in results.group_rows(r.name) if np.isfinite(g.task_fitness)),
                        key=lambda g: -sign * g.task_fitness)
        label = f"{r.name}#{groups[0].seed}" if groups else None
        values = {key.split(":", 1)[1]: value for key, value in final.get(label, {}).items()}
        source = sources[r.name]
        rows.append({"name": r.name, "fitness": r.fitness_mean, "auc": r.auc if np.isfinite(r.auc) else None,
                     "shaped_return": r.shaped_return, "episode_length": r.episode_length,
                     "status": "diverged" if r.name in diverged else "ok",
                     "source": with_constants(source, values) if values else source, "iteration": iteration})
    return rows
