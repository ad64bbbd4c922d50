"""Command line: `envcoder eval` (train and rank candidates), `envcoder auto` (automatic shaping) and
`envcoder tasks` (what a task offers).

Importing this module imports no MuJoCo: `envcoder play --video` chooses MuJoCo's OpenGL backend first
(`envcoder.runs.gl`), and MuJoCo reads it once, when it is first imported."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import textwrap
from pathlib import Path

import envcoder
from envcoder.rl.config import ALGORITHMS
from envcoder.runs.schedule import FINAL_ENVS, SCHEDULES
from envcoder.runs.ranking import RANK_BY

BUNDLED_FUNCTIONS = Path(__file__).resolve().parents[2] / "user_functions"
"""The example candidates shipped in the source tree (`user_functions/<task>/`)."""


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
                             "the run directory (README: Many GPUs)")
    parser.add_argument("--num-processes", dest="num_processes", type=_positive_int, default=None, metavar="N",
                        help="processes of a multi-host run (with --coordinator HOST:PORT)")
    parser.add_argument("--process-id", dest="process_id", type=int, default=None, metavar="I",
                        help="this process's index, 0 to N-1 (with --coordinator HOST:PORT)")


def _setting(parser, settings_class, field: str, *flags, note: str = "", **kwargs) -> None:
    """An option for a field of a settings record (`EvalSettings`, `AutoSettings`): its destination is the field,
    its help the field's doc (`field_docs`) with `note` (what the command line adds), its default the field's."""
    from envcoder.runs.settings import field_docs

    default = next(f.default for f in dataclasses.fields(settings_class) if f.name == field)
    kwargs.setdefault("default", list(default) if isinstance(default, tuple) else
                      None if default is dataclasses.MISSING else default)
    shown = kwargs["default"]
    if not note and shown is not None and not isinstance(shown, (bool, list, dict)):
        note = f"(default {shown})"
    if flags[0].startswith("-"):
        kwargs["dest"] = field
    text = " ".join(filter(None, (field_docs(settings_class)[field], note)))
    parser.add_argument(*flags, help=text.replace("%", "%%"), **kwargs)  # argparse formats help with %


def _run_options(parser, settings_class, command: str) -> None:
    """The options `eval` and `auto` share: what is trained, how, and within which limits."""
    option = functools.partial(_setting, parser, settings_class)
    option("task", "--task", note="Required unless --resume.")
    option("envs_per_candidate", "--envs-per-candidate", "--envs_per_candidate", type=_positive_int)
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
    from envcoder.runs.settings import EvalSettings
    from envcoder.shaping.api import SHAPER_TYPES

    ev = add_parser("eval", help="train every candidate of a directory and rank them by task fitness")
    option = functools.partial(_setting, ev, EvalSettings)
    _run_options(ev, EvalSettings, "")
    option("functions", "--functions", type=Path, nargs="+", metavar="PATH",
           note="E.g. your own folder next to the bundled one (default: the bundled user_functions/<task>).")
    option("shaper_types", "--shaper-types", "--shaper_types", nargs="+", type=_shaper_type, metavar="TYPE",
           default=list(SHAPER_TYPES), note=f"Default: whichever of them a file defines ({', '.join(SHAPER_TYPES)}).")
    option("cross", "--cross", action="store_true", note="(5 reward × 3 observation files = 15 candidates)")
    option("task_default", "--task-default", action="store_true")
    option("rank_by", "--rank-by", choices=RANK_BY)
    option("seeds_until_separable", "--seeds-until-separable", type=_positive_int, metavar="N")
    option("iterations", "--iterations", type=_positive_int)
    option("schedule", "--schedule", choices=SCHEDULES)
    option("rungs", "--rungs", type=_positive_int)
    ev.add_argument("--seeds", type=_positive_int, default=1,
                    help="independent seeds per candidate: every candidate is trained once per seed (default 1)")
    option("tensorboard", "--no-tensorboard", action="store_false", note="Off with --no-tensorboard.")
    ev.add_argument("--wandb", action="store_true",
                    help="also log to Weights & Biases: one W&B run per candidate and seed, grouped by run directory "
                         "(needs `pip install wandb` and `wandb login`, or WANDB_MODE=offline)")
    ev.add_argument("--wandb-project", default="envcoder", metavar="NAME", help="W&B project (default envcoder)")
    _hosts(ev)
    ev.add_argument("--resume", type=Path, default=None, metavar="RUN",
                    help="continue an interrupted run from its last checkpoint (every save_frequency iterations), "
                         "with the settings it was started with; the result equals an uninterrupted run's")


def _auto_parser(add_parser) -> None:
    from envcoder.search.settings import PROPOSERS, AutoSettings
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
    option("iterations", "--iterations", type=_positive_int)
    option("retries", "--retries", type=int)
    option("initial", "--initial", nargs="+", type=_initial_path, default=None, metavar="PATH",
           note="Files or directories (offline default: the bundled user_functions/<task>).")
    option("train_iterations", "--train-iterations", type=_positive_int)
    option("schedule", "--schedule", choices=SCHEDULES)
    auto.add_argument("--seeds", type=_positive_int, default=1, help="seeds per candidate during the search (default 1)")
    option("final_seeds", "--final-seeds", type=_positive_int)
    option("final_max_seeds", "--final-max-seeds", type=_positive_int)
    option("rank_by", "--rank-by", choices=RANK_BY)
    option("final_top", "--final-top", type=_positive_int)
    option("final_envs_per_candidate", "--final-envs", type=_positive_int, metavar="N",
           note=f"(FINAL_ENVS = {FINAL_ENVS}, the full-budget ranking of docs/benchmarks/fidelity.md)")
    option("request_timeout_s", "--request-timeout", type=float, metavar="S")
    option("api_retries", "--api-retries", type=int)
    option("concurrency", "--concurrency", type=_positive_int)
    option("temperature", "--temperature", type=float, note="(default: the model's)")
    option("max_tokens", "--max-tokens", type=_positive_int)
    option("price", "--price", nargs=2, type=float, metavar=("IN", "OUT"))
    auto.add_argument("--resume", type=Path, default=None, metavar="RUN",
                      help="continue an interrupted run with its recorded settings; recorded LLM calls are not repeated")


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
    pl = add_parser("play", help="run a trained candidate's policy: episode statistics and a video")
    pl.add_argument("--run", type=Path, required=True, help="an `envcoder eval` run directory")
    pl.add_argument("--candidate", required=True, help="candidate name, as in the ranking")
    pl.add_argument("--seed", type=int, default=None, help="which seed's policy (default: the run's first)")
    pl.add_argument("--checkpoint", choices=("best", "last"), default="best",
                    help="best by task fitness during training (default) or the last")
    pl.add_argument("--episodes", type=_positive_int, default=1, help="deterministic episodes (default 1)")
    pl.add_argument("--video", type=Path, default=None,
                    help="write a video of the episodes, one after another: .mp4 (needs imageio-ffmpeg) or .gif")
    pl.add_argument("--width", type=_positive_int, default=480)
    pl.add_argument("--height", type=_positive_int, default=360)
    report = add_parser("report", help="write a run's report.html again (ranking, curves, components, failures)")
    report.add_argument("run", type=Path, help="an `envcoder eval` run directory")
    tasks = add_parser("tasks", help="list tasks, or describe one: state fields, defaults, fitness")
    tasks.add_argument("--task", default=None, help="task to describe")
    return parser


def _fields(settings_class, args) -> dict:
    """The options that are fields of `settings_class` (`_setting`'s), by field."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(settings_class) if hasattr(args, f.name)}


def _eval(args) -> int:
    import importlib.util
    import time

    from envcoder.rl.sharding import join_processes

    try:
        join_processes(args.coordinator, args.num_processes, args.process_id)  # before JAX starts its backend
    except ValueError as err:
        return _fail("eval", str(err))

    from envcoder.rl.config import parse_overrides
    from envcoder.runs import watchdog
    from envcoder.runs.evaluation import EvalSettings, NoValidCandidatesError, OutOfGPUMemoryError, run_evaluation
    from envcoder.runs.settings import settings_from_run
    from envcoder.candidates.sandbox import SandboxError
    from envcoder.tasks import UnknownTaskError, get_task

    if args.resume is not None:
        if args.task is not None or args.overrides:
            return _fail("eval", "--resume continues a run with the settings in RUN/config.json; give no --task, "
                                 "overrides or other options with it (but --devices and the multi-host options)")
        args.run_dir = args.resume
        watchdog.RESTART_ARGS = ["eval", "--resume", str(args.resume), *_device_args(args)]
        try:
            run_evaluation(dataclasses.replace(settings_from_run(args.resume), devices=args.devices), resume=True)
        except (FileNotFoundError, NoValidCandidatesError, OutOfGPUMemoryError, SandboxError, ValueError) as err:
            return _fail("eval", str(err))
        return 0
    if args.task is None:
        return _fail("eval", "--task is required (or --resume RUN)")
    try:
        task = get_task(args.task)
    except UnknownTaskError as err:
        return _fail("eval", str(err))
    functions = BUNDLED_FUNCTIONS / task.name.lower() if not args.functions else (
        args.functions[0] if len(args.functions) == 1 else tuple(args.functions))
    out = args.out or Path("runs") / f"{task.name.lower()}-{time.strftime('%Y%m%d-%H%M%S')}"
    settings = EvalSettings(**{
        **_fields(EvalSettings, args), "task": task.name, "functions": functions, "out": out,
        "shaper_types": tuple(dict.fromkeys(args.shaper_types)), "seeds": tuple(range(args.seed, args.seed + args.seeds)),
        "wandb_project": args.wandb_project if args.wandb else None, "overrides": {}})
    args.run_dir = out
    watchdog.RESTART_ARGS = ["eval", "--resume", str(out), *_device_args(args)]
    if args.wandb and importlib.util.find_spec("wandb") is None:
        return _fail("eval", "--wandb needs the wandb package: pip install wandb (or envcoder[wandb])")
    try:
        settings = dataclasses.replace(settings, algo=args.algo, overrides=parse_overrides(args.overrides, args.algo))
        run_evaluation(settings)
    except (FileNotFoundError, FileExistsError, NoValidCandidatesError, OutOfGPUMemoryError, SandboxError,
            ValueError) as err:
        return _fail("eval", str(err))
    return 0


def _start_validation(args) -> None:
    """Start the sandbox's workers before the command's own imports and setup, so that their start (imports, the
    task's sample rollout) runs beside those instead of after them (the README's Anymal job on an H100: its first
    trained iteration 4 s sooner on average, docs/benchmarks/throughput.md § 8). Only where cores are to spare:
    on a small machine the workers' start would slow the command's own, and a run whose verdicts are all cached
    needs none."""
    import os

    from envcoder.candidates.pool import default_workers, start_workers

    if (os.cpu_count() or 1) < 8:
        return
    if args.command == "auto":
        from envcoder.search.settings import AutoSettings
        count = AutoSettings.validation_workers  # its validator's, kept up for the whole run
    else:
        paths = [Path(p) for p in args.functions] if args.functions else [BUNDLED_FUNCTIONS / args.task.lower()]
        count = default_workers(sum(len(list(p.glob("*.py"))) if p.is_dir() else 1 for p in paths))
    if count > 0:
        start_workers(args.task, tuple(dict.fromkeys(args.shaper_types)), args.validation_memory_gib, count)


def _device_args(args) -> list[str]:
    """The options of `eval` that a resumed run takes again (the devices are not a setting of the run)."""
    return ["--devices", str(args.devices)] if getattr(args, "devices", None) else []


def _initial_files(paths, task, shaper_types) -> tuple[Path, ...]:
    """Files given to --initial (folders expanded), or, with none, the bundled files of the task that define one of
    `shaper_types`."""
    from envcoder.candidates import CandidateError, candidate_files, check_statically

    if paths:
        return tuple(candidate_files(paths))
    bundled = []
    for file in candidate_files(BUNDLED_FUNCTIONS / task.name.lower()):
        try:
            check_statically(file.read_text(), str(file), shaper_types)
            bundled.append(file)
        except CandidateError:
            pass
    return tuple(bundled)


def _auto(args) -> int:
    import time

    from envcoder.rl.config import parse_overrides
    from envcoder.runs import watchdog
    from envcoder.runs.evaluation import OutOfGPUMemoryError
    from envcoder.search.loop import AutoSettings, load_settings, run_auto
    from envcoder.search.proposers import ProposerError
    from envcoder.candidates.sandbox import SandboxError
    from envcoder.tasks import UnknownTaskError, get_task

    try:
        if args.resume is not None:
            if args.task is not None:
                return _fail("auto", "--resume continues a run with the settings in RUN/auto.json; give no --task "
                                     "or other options with it")
            args.run_dir = args.resume
            watchdog.RESTART_ARGS = ["auto", "--resume", str(args.resume), *_device_args(args)]
            run_auto(dataclasses.replace(load_settings(args.resume), devices=args.devices), resume=True)
            return 0
        if args.task is None:
            return _fail("auto", "--task is required (or --resume RUN)")
        task = get_task(args.task)
        initial = _initial_files(args.initial, task, args.shaper_types) if args.initial or not args.llm else ()
        out = args.out or Path("runs") / f"auto-{task.name.lower()}-{time.strftime('%Y%m%d-%H%M%S')}"
        settings = AutoSettings(**{
            **_fields(AutoSettings, args), "task": task.name, "out": out, "initial": initial,
            "shaper_types": tuple(dict.fromkeys(args.shaper_types)),
            "overrides": parse_overrides(args.overrides, args.algo), "price": tuple(args.price) if args.price else None})
        args.run_dir = out
        watchdog.RESTART_ARGS = ["auto", "--resume", str(out), *_device_args(args)]
        run_auto(settings)
    except (UnknownTaskError, ProposerError, SandboxError, OutOfGPUMemoryError, FileNotFoundError, FileExistsError,
            ValueError) as err:
        return _fail("auto", str(err))
    return 0


def _play(args) -> int:
    from envcoder.runs.play import play

    try:
        play(args.run, args.candidate, args.seed, args.checkpoint, args.episodes, args.video, args.width,
             args.height)
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        return _fail("play", str(err))
    return 0


def _report(args) -> int:
    from envcoder.runs.report import write_report

    if not (args.run / "results.json").exists():
        return _fail("report", f"{args.run}/results.json does not exist: not a finished `envcoder eval` run")
    print(write_report(args.run))
    return 0


def _tasks(args) -> int:
    from envcoder.rl.config import task_settings
    from envcoder.candidates.describe import describe_task
    from envcoder.tasks import TASKS, UnknownTaskError, get_task

    if args.task is None:
        for task in TASKS.values():  # wrapped to 100 columns, under the description
            lines = textwrap.wrap(f"{task.description} (--algo {'|'.join(task.algorithms)})", 100 - 17)
            print("\n".join(f"{task.name if i == 0 else '':16s} {line}" for i, line in enumerate(lines)))
        return 0
    try:
        task = get_task(args.task)
    except UnknownTaskError as err:
        return _fail("tasks", str(err))
    settings = {algo: task_settings(task, algo) for algo in task.algorithms}
    print(describe_task(task, settings=settings), end="")
    return 0


def _fail(command: str, message: str) -> int:
    print(f"envcoder {command}: error: {message}", file=sys.stderr)
    return 2


def _resume_hint(args) -> str:
    """What continues an interrupted run (`envcoder.runs.checkpoint.resume_hint`)."""
    from envcoder.runs.checkpoint import resume_hint

    run = getattr(args, "run_dir", None)
    return resume_hint(args.command, Path(run)) if args.command in ("eval", "auto") and run is not None else ""


def main(argv=None) -> int:
    """Every command ends with one clear line on an error (`--debug` shows the traceback instead)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["play"] and "--video" in argv:
        from envcoder.runs.gl import choose_gl_backend
        choose_gl_backend()  # before the parser's imports bring in MuJoCo
    args = build_parser().parse_args(argv)
    try:
        if args.command in ("eval", "auto", "play"):
            from envcoder.compile_cache import enable_compilation_cache
            enable_compilation_cache()
        if args.command in ("eval", "auto") and args.task and args.resume is None:
            _start_validation(args)
        return {"eval": _eval, "auto": _auto, "play": _play, "report": _report, "tasks": _tasks}[args.command](args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        sys.stdout.flush()  # the progress bar's last line first: printed after this one, it showed twice
        print(f"envcoder {args.command}: interrupted{_resume_hint(args)}", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - anything not foreseen: one line, not a traceback
        if args.debug:
            raise
        text = str(err).strip().split("\n")[0] or "(no message)"
        print(f"envcoder {args.command}: error: {type(err).__name__}: {text} (run again with --debug for the "
              "traceback)", file=sys.stderr)
        return 1


def run() -> None:
    """The `envcoder` command: `main`'s exit status. An interrupted run ends at once: a compile that JAX runs in a
    background thread would otherwise abort the interpreter's shutdown ("terminate called ...") and lose the 130."""
    status = main()
    if status == 130:
        import os

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    run()
