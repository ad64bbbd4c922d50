"""The reference a candidate's author needs (a person at `envcoder tasks --task T`, or an LLM proposer in
its prompt): state fields, fitness definitions, the default shaping code and the helpers."""

from __future__ import annotations

import inspect
from typing import Sequence

from envcoder.shaping.api import FALLBACKS, SHAPER_TYPES, signature
from envcoder.candidates.policy import ALLOWED_IMPORTS
from envcoder.shaping import curriculum as curriculum_module
from envcoder.shaping.curriculum import CURRICULUM_METRICS
from envcoder.shaping.helpers import HELPERS
from envcoder.sim.randomization import FIELDS


def describe_task(task, shaper_types: Sequence[str] = SHAPER_TYPES, settings: dict[str, dict] | None = None,
                  presets: dict[str, dict] | None = None) -> str:
    """Markdown: the task's control timing, state fields, fitness definitions, the default source of
    `shaper_types`, the helpers in a candidate's namespace and (with `settings`: algorithm -> its settings of the
    task) its training settings, and (with `presets`: `Task.presets`) its named budgets."""
    lines = [f"# {task.name}: {task.description}", "",
             f"Control step: {task.substeps} physics steps; episodes end after {task.max_episode_length} control "
             "steps (a time-out) or when compute_terminal says so (a failure).", "",
             "## State fields (the `state` mapping every shaping function receives)", ""]
    lines += [f"- {name} {field.shape} ({field.units}): {field.meaning}" for name, field in task.state_fields.items()]
    lines += ["", "## Task fitness definitions (ground truth used for ranking; `--fitness NAME`, the first is the "
              "default)", ""]
    lines += [f"- {name}: {fitness.doc}" for name, fitness in task.fitness.items()]
    lines += ["", "## Default shaping functions (a candidate overrides any of them)", ""]
    for api in shaper_types:
        if api in task.defaults:
            lines += [default_source(task.defaults[api], api), ""]
        elif api in FALLBACKS:
            lines += [f"# {signature(api)}: none by default; the {FALLBACKS[api]} function serves (a critic without "
                      "observations of its own reads the actor's)", ""]
    if "sample_physics" in shaper_types or "curriculum" in shaper_types:
        lines += ["## Physics fields (what `sample_physics(key, params)` may return for one environment; a scalar "
                  "applies to every entry)", ""]
        lines += [f"- {name} [{field.size or 'scalar'}] ({field.units}, neutral {field.neutral:g}): {field.meaning}"
                  for name, field in FIELDS.items()]
        paragraphs = inspect.getdoc(curriculum_module).split("\n\n")
        lines += ["", paragraphs[1].replace("\n", " ") + f" `metrics` holds {', '.join(CURRICULUM_METRICS)}.", "",
                  *paragraphs[2:], ""]
    lines += ["## Helpers in a candidate's namespace (besides jax, jnp and math)", ""]
    for name, helper in HELPERS.items():
        lines += [f"- {name}{inspect.signature(helper)}: {inspect.getdoc(helper) or ''}", ""]
    lines += [f"Modules a candidate may import: {', '.join(sorted(ALLOWED_IMPORTS))}.", ""]
    for algo, values in (settings or {}).items():  # the task's training settings per algorithm
        lines += [f"## {algo.upper()} settings (`--algo {algo}`; {task.config_file.name}, rl_games names)", ""]
        lines += [f"- {key}: {value}" for key, value in values.items()] or [
            f"{task.config_file.name} sets none: the defaults of `--algo {algo}` apply"]
        lines += [""]
    for name, preset in (presets or {}).items():
        lines += [f"## Preset `{name}` (`--preset {name}`)", "", " ".join(str(preset.get("about", "")).split()), ""]
        if preset.get("envs_per_candidate"):
            lines += [f"- envs_per_candidate: {preset['envs_per_candidate']} (where --envs-per-candidate is not given)"]
        for algo, values in preset.items():
            if isinstance(values, dict) and algo not in ("no_counterpart",):
                lines += [f"- {algo}.{key}: {value}" for key, value in values.items()]
        if preset.get("no_counterpart"):
            lines += ["", "Settings of the original with no counterpart here:", ""]
            lines += [f"- {key}: {why}" for key, why in preset["no_counterpart"].items()]
        lines += [""]
    return "\n".join(lines).rstrip() + "\n"


def default_source(function, api: str) -> str:
    """A task's default shaping function as a candidate file would hold it: named as its shaping type, after the
    module-level constants it reads (`MAX_PUSH_FORCE = 10.0`), so that the text works when copied."""
    source = inspect.getsource(function).rstrip()
    if function.__name__ != api:
        source = source.replace(f"def {function.__name__}(", f"def {api}(", 1)
    constants = {name: value for name, value in inspect.getclosurevars(function).globals.items()
                 if isinstance(value, (int, float)) and not isinstance(value, bool)}
    return "".join(f"{name} = {value!r}\n" for name, value in sorted(constants.items())) + (
        "\n" if constants else "") + source


__all__ = ["default_source", "describe_task", "signature"]
