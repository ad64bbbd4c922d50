"""Command line: `envcoder eval` (train and rank candidates), `envcoder auto` (automatic shaping) and
`envcoder tasks` (what a task offers).

Importing this module imports no MuJoCo: `envcoder play --video` chooses MuJoCo's OpenGL backend first
(`envcoder.runs.gl`), and MuJoCo reads it once, when it is first imported."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from pathlib import Path

from envcoder.cli_parser import BUNDLED_FUNCTIONS, build_parser


def _fields(settings_class, args) -> dict:
    """The options that are fields of `settings_class` (`_setting`'s), by field."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(settings_class) if hasattr(args, f.name)}


def _eval(args) -> int:
    import importlib.util
    import time

    from envcoder.rl.config import parse_overrides
    from envcoder.runs.evaluation import EvalSettings, NoValidCandidatesError, OutOfGPUMemoryError, run_evaluation
    from envcoder.runs.job import Plan
    from envcoder.runs.eval_settings import settings_from_run
    from envcoder.candidates.sandbox import SandboxError
    from envcoder.tasks import UnknownTaskError, get_task

    if args.resume is not None:
        if args.task is not None or args.overrides:
            return _fail("eval", "--resume continues a run with the settings in RUN/config.json; give no --task, "
                                 "overrides or other options with it (but --devices and the multi-host options)")
        args.run_dir = args.resume
        try:
            settings = settings_from_run(args.resume)
            if _finished(args.resume, settings):
                return 0
            run_evaluation(dataclasses.replace(settings, devices=args.devices), resume=True,
                           restart=_restart("eval", args.resume, args))
        except (FileNotFoundError, FileExistsError, NoValidCandidatesError, OutOfGPUMemoryError, SandboxError,
                ValueError) as err:
            return _fail("eval", str(err))
        return 0
    if args.task is None:
        return _fail("eval", "--task is required (or --resume RUN)")
    try:
        task = get_task(args.task)
    except UnknownTaskError as err:
        return _fail("eval", str(err))
    if not args.functions and task.source is not None:
        return _fail("eval", f"{task.source} is a task file: give the candidates to train with --functions DIR "
                             "(envcoder ships examples for its own tasks only)")
    functions = BUNDLED_FUNCTIONS / task.name.lower() if not args.functions else (
        args.functions[0] if len(args.functions) == 1 else tuple(args.functions))
    out = args.out or Path("runs") / f"{task.name.lower()}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        preset = task.preset(args.preset) if args.preset is not None else {}
    except ValueError as err:
        return _fail("eval", str(err))
    envs = args.envs_per_candidate or preset.get("envs_per_candidate") or EvalSettings.envs_per_candidate
    settings = EvalSettings(**{
        **_fields(EvalSettings, args), "envs_per_candidate": envs, "task": task.key, "functions": functions, "out": out,
        "shaper_types": tuple(dict.fromkeys(args.shaper_types)), "seeds": (args.seed,),
        "wandb_project": args.wandb_project if args.wandb else None, "overrides": {}})
    args.run_dir = out
    if args.wandb and importlib.util.find_spec("wandb") is None:
        return _fail("eval", "--wandb needs the wandb package: pip install wandb (or envcoder[wandb])")
    try:
        plan = Plan.of(dataclasses.replace(settings, algo=args.algo,
                                           overrides=parse_overrides(args.overrides, args.algo)))
        plan.check_sizes(seeds=args.seeds)  # before the seeds are listed: --seeds 100000000 is refused at once
        run_evaluation(plan.with_settings(seeds=tuple(range(args.seed, args.seed + args.seeds))),
                       restart=_restart("eval", out, args))
    except (FileNotFoundError, FileExistsError, NoValidCandidatesError, OutOfGPUMemoryError, SandboxError,
            ValueError) as err:
        return _fail("eval", str(err))
    return 0


def _start_validation(args) -> None:
    """Start the sandbox's workers before the command's own imports and setup, so that their start (imports, the
    sample states, the task's own functions compiled) runs beside those instead of after them: the first trained
    iteration comes seconds sooner (docs/benchmarks/throughput.md). Only
    where cores are to spare: on a small machine the workers' start would slow the command's own, and a run whose
    verdicts are all cached needs none."""
    import os

    from envcoder.candidates.pool import default_workers, start_workers

    if (os.cpu_count() or 1) < 8:
        return
    from envcoder.tasks import is_task_file

    task = str(Path(args.task).resolve()) if is_task_file(args.task) else args.task  # as the run names it
    if args.command == "auto":
        from envcoder.search.auto_settings import AutoSettings
        count = AutoSettings.validation_workers  # its validator's, kept up for the whole run
    else:
        paths = [Path(p) for p in args.functions] if args.functions else [BUNDLED_FUNCTIONS / args.task.lower()]
        count = default_workers(sum(len(list(p.glob("*.py"))) if p.is_dir() else 1 for p in paths))
    if count > 0:
        start_workers(task, tuple(dict.fromkeys(args.shaper_types)), args.validation_memory_gib, count)


def _restart(command: str, run: Path, args) -> list[str]:
    """The arguments that continue the run in `run` (`envcoder.runs.watchdog.restart`): `COMMAND --resume RUN`
    with this process's device option (the devices are not a setting of the run)."""
    return [command, "--resume", str(run), *(["--devices", str(args.devices)] if args.devices else [])]


def _initial_files(paths, task, shaper_types) -> tuple[Path, ...]:
    """Files given to --initial (folders expanded), or, with none, the bundled files of the task that define one of
    `shaper_types`."""
    from envcoder.candidates import CandidateError, candidate_files, check_statically

    if paths:
        return tuple(candidate_files(paths))
    bundled = []
    if not (BUNDLED_FUNCTIONS / task.name.lower()).is_dir() or task.source is not None:
        return ()  # a task file's: none bundled
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
            settings = load_settings(args.resume)
            given = args.base_url
            if settings.base_url is not None and not args.trust_run_settings and given != settings.base_url:
                return _fail("auto", f"{args.resume}/auto.json sends the model's requests, with your API key, to "
                                     f"{settings.base_url!r}{f', not {given!r}' if given else ''}: resume with "
                                     f"--base-url {settings.base_url} to confirm it, or --trust-run-settings")
            run_auto(dataclasses.replace(settings, devices=args.devices), resume=True,
                     restart=_restart("auto", args.resume, args))
            return 0
        if args.task is None:
            return _fail("auto", "--task is required (or --resume RUN)")
        task = get_task(args.task)
        if args.preset is not None:
            task.preset(args.preset)  # a name it lacks: refused before anything is written
        initial = _initial_files(args.initial, task, args.shaper_types) if args.initial or not args.llm else ()
        out = args.out or Path("runs") / f"auto-{task.name.lower()}-{time.strftime('%Y%m%d-%H%M%S')}"
        settings = AutoSettings(**{
            **_fields(AutoSettings, args), "task": task.key, "out": out, "initial": initial,
            "shaper_types": tuple(dict.fromkeys(args.shaper_types)),
            "overrides": parse_overrides(args.overrides, args.algo), "price": tuple(args.price) if args.price else None})
        args.run_dir = out
        run_auto(settings, restart=_restart("auto", out, args))
    except (UnknownTaskError, ProposerError, SandboxError, OutOfGPUMemoryError, FileNotFoundError, FileExistsError,
            ValueError) as err:
        return _fail("auto", str(err))
    return 0


def _run_of(command: str, args) -> Path | None:
    """The `envcoder eval` run that `RUN` (or `--run RUN`) names: itself, or an `envcoder auto` run's final
    evaluation (`RUN/final/eval`), which trained its finds and starts again from scratch."""
    run = args.run if args.run is not None else args.run_option
    if run is None:
        _fail(command, f"name the run: envcoder {command} RUN (an `envcoder eval` or `envcoder auto` run directory)")
        return None
    final = run / "final" / "eval"
    return final if not (run / "results.json").exists() and (final / "results.json").exists() else run


def _play(args) -> int:
    from envcoder.runs.play import play

    run = _run_of("play", args)
    if run is None:
        return 2
    try:
        play(run, args.candidate, args.seed, args.checkpoint, args.episodes, args.video, args.width, args.height,
             trajectory=args.trajectory)
    except (FileNotFoundError, ValueError, RuntimeError) as err:
        return _fail("play", str(err))
    return 0


def _report(args) -> int:
    from envcoder.runs.report import write_report

    run = _run_of("report", args)
    if run is None:
        return 2
    if not (run / "results.json").exists():
        return _fail("report", f"{run}/results.json does not exist: not a finished `envcoder eval` run, nor an "
                               "`envcoder auto` run with a final evaluation")
    print(write_report(run))
    return 0


def _tasks(args) -> int:
    from envcoder.rl.config import task_settings
    from envcoder.candidates.describe import describe_task
    from envcoder.tasks import UnknownTaskError, all_tasks, get_task

    if args.check is not None:
        return _check_task(args.check)
    if args.task is None:
        for task in all_tasks().values():  # wrapped to 100 columns, under the description
            lines = textwrap.wrap(f"{task.description} (--algo {'|'.join(task.algorithms)})", 100 - 17)
            print("\n".join(f"{task.name if i == 0 else '':16s} {line}" for i, line in enumerate(lines)))
        return 0
    try:
        task = get_task(args.task)
    except UnknownTaskError as err:
        return _fail("tasks", str(err))
    if args.isaac:
        from envcoder.candidates.isaac import describe_isaac
        print(describe_isaac(task), end="")
        return 0
    settings = {algo: task_settings(task, algo) for algo in task.algorithms}
    print(describe_task(task, settings=settings, presets=task.presets), end="")
    return 0


def _convert(args) -> int:
    """`envcoder convert FILE --task T`: the native candidate made of a reward written for Isaac Gym, made in the jail
    and checked there, with the original, to give the same reward and components on the task's sample states."""
    import shutil
    import tempfile

    from envcoder.candidates import CandidateError, read_source
    from envcoder.candidates.isaac import check_conversion, starting_text
    from envcoder.candidates.prepare import sandboxed_candidates
    from envcoder.runs.eval_settings import EvalSettings
    from envcoder.candidates.samples import task_states
    from envcoder.candidates.sandbox import JailedError, SandboxValidator
    from envcoder.tasks import UnknownTaskError, get_task

    try:
        task = get_task(args.task)
        source = read_source(args.file)
    except (UnknownTaskError, CandidateError) as err:
        return _fail("convert", str(err))
    if args.output is not None and args.output.resolve() == args.file.resolve():
        return _fail("convert", f"-o {args.output} is the file to convert: write the native file elsewhere")
    with SandboxValidator(task.key, ("compute_reward",)) as validator, tempfile.TemporaryDirectory() as folder:
        try:
            text = validator.jailed(starting_text, source=source, file=str(args.file), task=task.key)
        except JailedError as err:
            return _fail("convert", str(err))
        if text == source:
            return _fail("convert", f"{args.file} is already a native candidate (its compute_reward takes the "
                                    "state): nothing to convert")
        original = Path(folder) / f"isaac{args.file.suffix}"
        shutil.copyfile(args.file, original)
        (Path(folder) / "native.py").write_text(text)
        settings = EvalSettings(task=task.key, functions=Path(folder), out=Path(folder) / "unused",
                                shaper_types=("compute_reward",), envs_per_candidate=1)
        candidates, failures = sandboxed_candidates(settings, task, validator)
    if failures:
        return _fail("convert", failures[0].error.replace(str(original), str(args.file)).replace(
            str(Path(folder) / "native.py"), "the converted file"))
    states = task_states(task)
    by_name = {c.name: c for c in candidates}
    why = check_conversion(by_name["isaac"], by_name["native"], task, states)
    if why is not None:
        return _fail("convert", f"the converted file does not give the original's reward: {why} (an envcoder bug: "
                                "please report it with the file)")
    if args.output is None:
        print(text, end="")
    else:
        try:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(text)
        except OSError as err:
            return _fail("convert", f"cannot write {args.output}: {err.strerror or err}")
        print(f"wrote {args.output}: {task.name}'s reward from {args.file}, the same reward and components on "
              f"{len(next(iter(states.values())))} sample states", file=sys.stderr)
    return 0


def _check_task(name: str) -> int:
    """`envcoder tasks --check FILE`: a line per problem of the task (`envcoder.candidates.task_check`), status 2 where there
    is one; else what was checked."""
    from envcoder.tasks import UnknownTaskError, get_task
    from envcoder.candidates.task_check import check_task

    try:
        task = get_task(name)
    except UnknownTaskError as err:
        return _fail("tasks", str(err))
    problems = check_task(task)
    where = task.source or task.name
    if problems:
        print(f"{where}: {len(problems)} problem(s) in task {task.name}:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    print(f"{where}: task {task.name} is ready: its model loads, its {len(task.state_fields)} state fields are as "
          f"declared, compute_torque fits the model's actuators, a reset is free of collisions, its fitness "
          f"({', '.join(task.fitness)}) reads the state, and its default shaping passes the candidates' checks")
    return 0


def _finished(run: Path, settings) -> bool:
    """Whether `run` is a finished `eval` run (its results written, its rounds of seeds too); if so, its results
    are printed again for `eval --resume`, with nothing trained or evaluated."""
    from envcoder.runs.results import RunResults, print_results
    from envcoder.text import console as text_console, shown

    if not (run / "results.json").exists():
        return False
    results = RunResults.read(run)
    if settings.seeds_until_separable is not None and results.seed_rounds is None:
        return False  # its rounds of added seeds go on
    console = text_console()
    console.print(f"{shown(run)} is finished: nothing to resume. Its results:", highlight=False)
    print_results(console, results)
    return True


def _fail(command: str, message: str) -> int:
    from envcoder.text import one_line

    print(f"envcoder {command}: error: {one_line(message)}", file=sys.stderr)
    return 2


def _resume_hint(args) -> str:
    """What continues an interrupted run (`envcoder.runs.checkpoint.resume_hint`)."""
    from envcoder.runs.checkpoint import resume_hint

    run = getattr(args, "run_dir", None)
    return resume_hint(args.command, Path(run)) if args.command in ("eval", "auto") and run is not None else ""


def main(argv=None) -> int:
    """Every command ends with one clear line on an error (`--debug` shows the traceback instead)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv in (["--version"], ["-V"]):  # at once: the parser's imports take a second or more
        import envcoder
        print(f"envcoder {envcoder.__version__}")
        return 0
    if argv[:1] == ["play"] and "--video" in argv:
        from envcoder.runs.gl import choose_gl_backend
        choose_gl_backend()  # before the parser's imports bring in MuJoCo
    args = build_parser().parse_args(argv)
    try:
        if args.command == "eval":
            from envcoder.rl.sharding import join_processes
            try:  # before anything starts JAX's backend: the compilation cache's setup, the sandbox's workers
                join_processes(args.coordinator, args.num_processes, args.process_id)
            except ValueError as err:
                return _fail("eval", str(err))
        if args.command in ("eval", "auto", "play"):
            from envcoder.compile_cache import enable_compilation_cache
            enable_compilation_cache()
        if args.command in ("eval", "auto") and args.task and args.resume is None:
            _start_validation(args)
        return {"eval": _eval, "auto": _auto, "play": _play, "report": _report, "tasks": _tasks,
                "convert": _convert}[args.command](args)
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
    """The `envcoder` command: `main`'s exit status. A command that fails or is interrupted ends at once, after its
    exit handlers (the sandbox's workers are stopped): a compile that JAX runs in a background thread, or device
    buffers still held after an out-of-memory error, would otherwise crash the interpreter's shutdown
    ("terminate called ...", or a segmentation fault on a GPU) and lose the status. XLA's slow-compile alarms are
    kept off the terminal while JAX compiles (`envcoder.alarms`)."""
    if sys.argv[1:2] in (["eval"], ["auto"]):
        from envcoder.alarms import hide_xla_alarms
        hide_xla_alarms()
    status = main()
    if status != 0:
        import atexit
        import os

        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    run()
