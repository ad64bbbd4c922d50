"""The command line's options: `build_parser` (`envcoder.cli` runs the commands). Importing this module imports
no MuJoCo (see `envcoder.cli`)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from pathlib import Path

import envcoder
from envcoder.rl.config import ALGORITHMS
from envcoder.runs.ranking import RANK_BY
from envcoder.runs.schedule import SCHEDULES

BUNDLED_FUNCTIONS = Path(__file__).resolve().parent / "examples"
"""The example candidates shipped with the package (`envcoder/examples/<task>/`; `envcoder tasks` prints where)."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `envcoder eval: error: ...` and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _shaper_type(text: str) -> str:
    if "=" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is a setting override, not a shaper type; put overrides before "
                                         "--shaper-types")
    from envcoder.shaping.api import ALIASES, SHAPER_TYPES

    name = ALIASES.get(text, text)
    if name not in SHAPER_TYPES:
        raise argparse.ArgumentTypeError(f"unknown shaper type {text!r}; choose from {', '.join(SHAPER_TYPES)}")
    return name


def _initial_path(text: str) -> Path:
    if "=" in text and text.split(".")[0] in ALGORITHMS:
        raise argparse.ArgumentTypeError(f"{text!r} is a setting override, not a file; put overrides before --initial")
    return Path(text)


def _hosts(parser) -> None:
    """The processes of a multi-host run (`eval`). Not a setting of the run: --resume may continue it on others."""
    parser.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                        help="a multi-host run: process 0's address, or 'auto' to read it from the cluster's "
                             "environment (SLURM, Open MPI); every process runs the same command and process 0 writes "
                             "the run directory (the guide's page Many GPUs and clusters, docs/guide/gpus.md)")
    parser.add_argument("--num-processes", dest="num_processes", type=_positive_int, default=None, metavar="N",
                        help="processes of a multi-host run (with --coordinator HOST:PORT)")
    parser.add_argument("--process-id", dest="process_id", type=int, default=None, metavar="I",
                        help="this process's index, 0 to N-1 (with --coordinator HOST:PORT)")


def _setting(parser, settings_class, field: str, *flags, note: str = "", text: str | None = None, **kwargs) -> None:
    """An option for a field of a settings record (`EvalSettings`, `AutoSettings`): its destination is the field,
    its help the field's doc (`field_docs`) with `note` (what the command line adds), or `text` instead of the doc
    (a switch that turns the field off says so), its default the field's."""
    from envcoder.settings import field_docs

    default = next(f.default for f in dataclasses.fields(settings_class) if f.name == field)
    kwargs.setdefault("default", list(default) if isinstance(default, tuple) else
                      None if default is dataclasses.MISSING else default)
    shown = kwargs["default"]
    module = sys.modules[settings_class.__module__]
    sized = getattr(module, "SIZES", {})  # defaults by device kind, and what a task changes of them
    if field in sized.get("gpu", {}):
        by_task = getattr(module, "TASK_SIZES", {})

        def on(kind: str) -> str:
            value = sized[kind][field]
            tasks = [f"{task} {sizes[field]:,}" for task, sizes in by_task.get(kind, {}).items() if field in sizes]
            shown = f"{value:,}" if isinstance(value, int) else value
            return f"{shown} on a {kind.upper()}" + (f" ({', '.join(tasks)})" if tasks else "")
        note = " ".join(filter(None, (note, f"(default {on('gpu')}, {on('cpu')})")))
    elif not note and shown is not None and not isinstance(shown, (bool, list, dict)):
        note = f"(default {shown})"
    if flags[0].startswith("-"):
        kwargs["dest"] = field
    doc = text if text is not None else in_user_words(field_docs(settings_class)[field], module)
    parser.add_argument(*flags, help=" ".join(filter(None, (doc, note))).replace("%", "%%"), **kwargs)  # % formats


def in_user_words(doc: str, module=None) -> str:
    """A settings field's doc (written for whoever reads the code) as an option's help: references to envcoder's
    code left out or replaced by what they hold (a constant's value, of envcoder's or of `module`, the settings'
    module), `None` said as the default it stands for. Other fields named in backquotes become their options
    (`options_named`, once every option is known)."""
    import importlib
    import re

    doc = re.sub(r"\s*\(`[\w.]+(?:\(\))?`'s `\w+`\)", "", doc)  # "(`module.function`'s `until`)"
    doc = re.sub(r",\s*`envcoder\.[\w.]+`\)", ")", doc)  # "(…, `envcoder.search.proposers.OfflineProposer`)"
    if module is not None:
        doc = re.sub(r"`([A-Z][A-Z_]+)`", lambda m: f"{getattr(module, m.group(1))}" if isinstance(
            getattr(module, m.group(1), None), (int, float)) else m.group(0), doc)

    def value_of(match) -> str:
        module, _, name = match.group(1).rpartition(".")
        try:
            value = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            return name.replace("_", " ")
        return f"{value:,}" if isinstance(value, int) else str(value)
    text = re.sub(r"\s*\((?:see )?`[A-Za-z_][\w.]*(?:\(\))?`\)", "", doc)  # "(`envcoder.runs.schedule`)"
    text = re.sub(r";?\s*see `[A-Z]\w*\.\w+`", "", text)  # "; see `EvalSettings.devices`"
    text = re.sub(r",? ?`(envcoder\.[\w.]+\.[A-Z][A-Z_]+)`", lambda m: " " + value_of(m), text)  # a constant
    text = re.sub(r"`envcoder\.[\w.]+`,?\s*", "", text)
    text = re.sub(r"`[A-Z]\w*Settings\.(\w+)`", lambda m: "--" + m.group(1).replace("_", "-"), text)
    text = re.sub(r"\bNone: ", "default: ", text)
    text = re.sub(r"\bNone (takes|follows)", r"by default it \1", text)
    text = text.replace("(default: ", "(by default ").replace("; default: ", "; by default ")
    return re.sub(r"\s+", " ", text).replace(" )", ")").replace("( ", "(").strip()


def options_named(parser) -> None:
    """In every option's help, a setting named in backquotes (`copies`, `budget_minutes`) as the option that sets
    it (--copies, --budget): the help speaks of what a user types."""
    import re

    flags = {a.dest: next((f for f in a.option_strings if f.startswith("--")), None) for a in parser._actions}
    for action in parser._actions:
        if action.help:
            action.help = re.sub(r"`(\w+)`", lambda m: flags.get(m.group(1)) or m.group(0), action.help)


def _run_options(parser, settings_class, command: str) -> None:
    """The options `eval` and `auto` share: what is trained, how, and within which limits."""
    option = functools.partial(_setting, parser, settings_class)
    option("task", "--task", note="Required unless --resume.")
    option("envs_per_candidate", "--envs-per-candidate", "--envs_per_candidate", type=_positive_int,
           **({"default": None, "note": "(default 256, or the --preset's)"} if command == "" else {}))
    option("preset", "--preset", metavar="NAME", note="e.g. --preset isaac.")
    option("algo", "--algo", choices=tuple(ALGORITHMS), note="`envcoder tasks` lists each task's (default ppo).")
    option("config_file", "--config", type=Path, metavar="FILE",
           note="(rl_games names, or a section per algorithm; a run's ppo.yaml can be reused here)")
    option("overrides", "overrides", nargs="*", metavar="ALGO.NAME=VALUE",
           note="Applied last, e.g. ppo.learning_rate=1e-3 ppo.units=[512,256].")
    option("fitness", "--fitness", note="See `envcoder tasks --task T`.")
    option("physics", "--physics", choices=("jax", "warp"), note="warp: MuJoCo Warp, CUDA GPUs, needs warp-lang.")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    option("validation_timeout_s", "--validation-timeout", type=float, metavar="S")
    option("validation_memory_gib", "--validation-memory", type=float, metavar="GIB", note="In GiB (default 4).")
    option("compile_timeout_s", "--compile-timeout", type=float, metavar="S")
    option("iteration_timeout_s", "--iteration-timeout", type=float, metavar="S")
    option("devices", "--devices", type=_positive_int, metavar="N")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"run directory to create (default runs/{command}<task>-<time>)")


def _eval_parser(add_parser) -> None:
    from envcoder.runs.eval_settings import EvalSettings
    from envcoder.shaping.api import SHAPER_TYPES

    ev = add_parser("eval", help="train every candidate of a directory and rank them by task fitness")
    option = functools.partial(_setting, ev, EvalSettings)
    _run_options(ev, EvalSettings, "")
    option("functions", "--functions", type=Path, nargs="+", metavar="PATH",
           note="E.g. your own folder next to the bundled one (default: the bundled examples of the task, "
                "envcoder/examples/<task>).")
    option("shaper_types", "--shaper-types", "--shaper_types", nargs="+", type=_shaper_type, metavar="TYPE",
           default=list(SHAPER_TYPES), note=f"Default: whichever of them a file defines ({', '.join(SHAPER_TYPES)}).")
    option("cross", "--cross", action="store_true", note="(5 reward × 3 observation files = 15 candidates)")
    option("task_default", "--task-default", action="store_true")
    option("rank_by", "--rank-by", choices=RANK_BY)
    option("seeds_until_separable", "--seeds-until-separable", type=_positive_int, metavar="N")
    option("train_iterations", "--train-iterations", "--iterations", type=_positive_int,
           note="(--iterations is its older name, kept)")
    option("evaluation_envs", "--evaluation-envs", type=_positive_int, metavar="N")
    option("schedule", "--schedule", choices=SCHEDULES)
    option("rungs", "--rungs", type=_positive_int)
    ev.add_argument("--seeds", type=_positive_int, default=1,
                    help="independent seeds per candidate: every candidate is trained once per seed (default 1)")
    option("tensorboard", "--no-tensorboard", action="store_false",
           text="Write no TensorBoard event files (by default one set per candidate and seed, in <out>/tensorboard/).")
    ev.add_argument("--wandb", action="store_true",
                    help="also log to Weights & Biases: one W&B run per candidate and seed, grouped by run directory "
                         "(needs `pip install wandb` and `wandb login`, or WANDB_MODE=offline)")
    ev.add_argument("--wandb-project", default="envcoder", metavar="NAME", help="W&B project (default envcoder)")
    _hosts(ev)
    ev.add_argument("--resume", type=Path, default=None, metavar="RUN",
                    help="continue an interrupted run from its last checkpoint (every save_frequency iterations), "
                         "with the settings it was started with; the result equals an uninterrupted run's")


def _auto_parser(add_parser) -> None:
    from envcoder.search.auto_settings import PROPOSERS, AutoSettings
    from envcoder.shaping.api import SHAPER_TYPES

    auto = add_parser("auto", help="automatic shaping: a proposer (LLM or offline search) writes candidates, "
                                   "envcoder evaluates them all at once, feeds statistics back and iterates")
    option = functools.partial(_setting, auto, AutoSettings)
    _run_options(auto, AutoSettings, "auto-")
    option("task_description", "--task-description", "--task_description")
    option("shaper_types", "--shaper-types", "--shaper_types", nargs="+", type=_shaper_type, metavar="TYPE",
           note=f"(default compute_reward; {', '.join(SHAPER_TYPES)})")
    option("llm", "--llm", metavar="MODEL", note="e.g. gpt-4o or claude-sonnet-4-5")
    option("proposer", "--proposer", choices=PROPOSERS)
    option("copies", "--copies", type=_positive_int)
    option("halving_rungs", "--halving-rungs", type=int, metavar="N")
    option("provider", "--provider", choices=("openai", "anthropic"), note="(OPENAI_API_KEY or ANTHROPIC_API_KEY)")
    option("base_url", "--base-url", "--base_url", note="e.g. http://localhost:8000/v1")
    option("candidates_per_iteration", "--candidates-per-iteration", type=_positive_int)
    option("iterations", "--search-iterations", "--iterations", type=_positive_int,
           note="(--iterations is its shorter name, kept; training iterations are --train-iterations)")
    option("budget_minutes", "--budget", type=float, metavar="MINUTES")
    option("retries", "--retries", type=int)
    option("initial", "--initial", nargs="+", type=_initial_path, default=None, metavar="PATH",
           note="Files or directories (offline default: the bundled examples of the task, envcoder/examples/<task>).")
    option("train_iterations", "--train-iterations", type=_positive_int)
    option("schedule", "--schedule", choices=SCHEDULES)
    auto.add_argument("--seeds", type=_positive_int, default=1, help="seeds per candidate during the search (default 1)")
    option("final_seeds", "--final-seeds", type=_positive_int)
    option("final_max_seeds", "--final-max-seeds", type=_positive_int)
    option("rank_by", "--rank-by", choices=RANK_BY)
    option("final_top", "--final-top", type=_positive_int)
    option("final_envs_per_candidate", "--final-envs", type=_positive_int, metavar="N")
    option("request_timeout_s", "--request-timeout", type=float, metavar="S")
    option("api_retries", "--api-retries", type=int)
    option("concurrency", "--concurrency", type=_positive_int)
    option("temperature", "--temperature", type=float, note="(default: the model's)")
    option("max_tokens", "--max-tokens", type=_positive_int)
    option("price", "--price", nargs=2, type=float, metavar=("IN", "OUT"))
    auto.add_argument("--resume", type=Path, default=None, metavar="RUN",
                      help="continue an interrupted run with its recorded settings; recorded LLM calls are not repeated")
    auto.add_argument("--trust-run-settings", action="store_true",
                      help="with --resume: send the requests (and the API key) to the server RUN/auto.json names, "
                           "without --base-url naming it again")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true",
                        help="on an error, show Python's traceback instead of the one-line message")
    parser = _Parser(prog="envcoder", description="Evaluate many RL environment-shaping candidates in one process.")
    parser.add_argument("--version", action="version", version=f"envcoder {envcoder.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def add_parser(name, **kwargs):
        return sub.add_parser(name, parents=[common], **kwargs)

    _eval_parser(add_parser)
    _auto_parser(add_parser)
    for command in ("eval", "auto"):
        options_named(sub.choices[command])
    pl = add_parser("play", help="run a trained candidate's policy: episode statistics and a video")
    pl.add_argument("run", type=Path, nargs="?", default=None,
                    help="an `envcoder eval` run directory, or an `envcoder auto` one (its final evaluation)")
    pl.add_argument("--run", dest="run_option", type=Path, default=None, metavar="RUN", help="the same as RUN")
    pl.add_argument("--candidate", required=True, help="candidate name, as in the ranking")
    pl.add_argument("--seed", type=int, default=None, help="which seed's policy (default: the run's first)")
    pl.add_argument("--checkpoint", choices=("best", "last"), default="best",
                    help="best by task fitness during training (default) or the last")
    pl.add_argument("--episodes", type=_positive_int, default=1, help="deterministic episodes (default 1)")
    pl.add_argument("--video", type=Path, default=None,
                    help="write a video of the episodes, one after another: .mp4 (needs imageio-ffmpeg) or .gif")
    pl.add_argument("--trajectory", type=Path, default=None,
                    help="write the episodes' joint positions to this .npz for your own analysis: qpos [steps, "
                         "episodes, nq] at the start of each control step (MuJoCo's order) and each episode's length "
                         "(the steps after it belong to the next episode)")
    pl.add_argument("--width", type=_positive_int, default=480, help="the video's width in pixels (default 480)")
    pl.add_argument("--height", type=_positive_int, default=360, help="the video's height in pixels (default 360)")
    report = add_parser("report", help="write a run's report.html again (ranking, curves, components, failures)")
    report.add_argument("run", type=Path, nargs="?", default=None,
                        help="an `envcoder eval` run directory, or an `envcoder auto` one (its final evaluation)")
    report.add_argument("--run", dest="run_option", type=Path, default=None, metavar="RUN", help="the same as RUN")
    tasks = add_parser("tasks", help="list tasks, or describe one: state fields, defaults, fitness")
    tasks.add_argument("--task", default=None, help="task to describe: a name, or the path of a task file")
    tasks.add_argument("--check", default=None, metavar="FILE",
                       help="check a task file one is writing (or a task's name): its model, state fields, "
                            "compute_torque's size, its reset, its fitness and its default shaping, a line per problem")
    tasks.add_argument("--isaac", action="store_true",
                       help="the names a reward written for Isaac Gym may take on the task (its IsaacGymEnvs class's "
                            "attributes at reward time), in Isaac's conventions, and what of torch runs")
    convert = add_parser("convert", help="make a native candidate of a reward written for Isaac Gym (IsaacGymEnvs / "
                                         "Eureka format), checked to give the same reward")
    convert.add_argument("file", type=Path, help="a reward file (.py), an IsaacGymEnvs task file, or an LLM answer "
                                                 "(.txt) with the reward in a fenced code block")
    convert.add_argument("--task", required=True, help="the task it was written for (Cartpole, Ant, Humanoid, Anymal, "
                                                       "or a task file whose Task has isaac_names)")
    convert.add_argument("-o", "--output", type=Path, default=None, help="write it to this file (default: print it)")
    return parser
