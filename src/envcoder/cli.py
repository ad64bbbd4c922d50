"""Command line: `envcoder eval` (train and rank candidates), `envcoder auto` (automatic shaping) and
`envcoder tasks` (what a task offers)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envcoder.rl.config import ALGORITHMS
from envcoder.runs.schedule import FINAL_ENVS, SCHEDULES
from envcoder.shaping.api import ALIASES, SHAPER_TYPES

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
    name = ALIASES.get(text, text)
    if name not in SHAPER_TYPES:
        raise argparse.ArgumentTypeError(f"unknown shaper type {text!r}; choose from {', '.join(SHAPER_TYPES)}")
    return name


def _initial_path(text: str) -> Path:
    if "=" in text and text.split(".")[0] in ALGORITHMS:
        raise argparse.ArgumentTypeError(f"{text!r} is a setting override, not a file; put overrides before --initial")
    return Path(text)


def _limits(parser, what: str) -> None:
    """The sandbox's and the watchdog's limits (`eval` and `auto`)."""
    parser.add_argument("--validation-timeout", dest="validation_timeout_s", type=float, default=120.0, metavar="S",
                        help="wall-clock seconds each step of a candidate's sandboxed validation (loading the file; "
                             "tracing, compiling or running one function) may take (default 120)")
    parser.add_argument("--validation-memory", dest="validation_memory_gib", type=float, default=4.0, metavar="GIB",
                        help="memory limit of a validation process in GiB (default 4)")
    parser.add_argument("--compile-timeout", dest="compile_timeout_s", type=float, default=1800.0, metavar="S",
                        help=f"seconds {what} compile may take before the run is ended, naming the candidates "
                             "whose code hung it (default 1800)")
    parser.add_argument("--iteration-timeout", dest="iteration_timeout_s", type=float, default=600.0, metavar="S",
                        help="seconds one training iteration may run on the device before the run is ended "
                             "(default 600)")


def _devices(parser, hosts: bool = True) -> None:
    """Where the groups train: devices of this machine (`eval` and `auto`), and with `hosts` the processes of a
    multi-host run (`eval`). None of these is a setting of the run: --resume may continue it on other devices."""
    parser.add_argument("--devices", type=_positive_int, default=None, metavar="N",
                        help="shard the candidates' groups over N devices (default: all that JAX sees, over all "
                             "processes of a multi-host run); more than one needs --physics jax")
    if not hosts:
        return
    parser.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                        help="a multi-host run: process 0's address, or 'auto' to read it from the cluster's "
                             "environment (SLURM, Open MPI); every process runs the same command and process 0 writes "
                             "the run directory (README: Many GPUs)")
    parser.add_argument("--num-processes", dest="num_processes", type=_positive_int, default=None, metavar="N",
                        help="processes of a multi-host run (with --coordinator HOST:PORT)")
    parser.add_argument("--process-id", dest="process_id", type=int, default=None, metavar="I",
                        help="this process's index, 0 to N-1 (with --coordinator HOST:PORT)")


def _start_processes(args) -> None:
    """Join a multi-host run (`jax.distributed.initialize`) when --coordinator is given."""
    if args.coordinator is None:
        if args.num_processes is not None or args.process_id is not None:
            raise ValueError("--num-processes and --process-id belong to a multi-host run: give --coordinator too")
        return
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU processes (tests) talk through gloo
    if args.coordinator == "auto":
        jax.distributed.initialize()
    else:
        if args.num_processes is None or args.process_id is None:
            raise ValueError("--coordinator HOST:PORT needs --num-processes and --process-id (or --coordinator auto "
                             "under SLURM or Open MPI)")
        if not 0 <= args.process_id < args.num_processes:
            raise ValueError(f"--process-id {args.process_id} is not between 0 and --num-processes - 1 "
                             f"({args.num_processes - 1})")
        jax.distributed.initialize(args.coordinator, num_processes=args.num_processes, process_id=args.process_id)
    # What is not sharded over the run's mesh (the model, validation samples) stays on this process's devices.
    jax.config.update("jax_default_device", jax.local_devices()[0])


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true",
                        help="on an error, show Python's traceback instead of the one-line message")
    parser = _Parser(prog="envcoder", description="Evaluate many RL environment-shaping candidates in one process.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def add_parser(name, **kwargs):
        return sub.add_parser(name, parents=[common], **kwargs)

    ev = add_parser("eval", help="train every candidate of a directory and rank them by task fitness")
    ev.add_argument("--task", default=None, help="task name (see `envcoder tasks`); required unless --resume")
    ev.add_argument("--functions", type=Path, default=None,
                    help="directory of candidate .py files (default: the bundled user_functions/<task>)")
    ev.add_argument("--shaper-types", "--shaper_types", dest="shaper_types", nargs="+", type=_shaper_type,
                    default=list(SHAPER_TYPES), metavar="TYPE",
                    help=f"functions taken from the candidate files (default: whichever of them a file defines); "
                         f"the others use the task's defaults ({', '.join(SHAPER_TYPES)})")
    ev.add_argument("--cross", action="store_true",
                    help="evaluate the product of files across --shaper-types (5 reward × 3 observation files = 15 "
                         "candidates) instead of one candidate per file")
    ev.add_argument("--envs-per-candidate", "--envs_per_candidate", dest="envs_per_candidate", type=_positive_int,
                    default=256, help="parallel environments per candidate and seed (default 256)")
    ev.add_argument("--algo", choices=tuple(ALGORITHMS), default="ppo",
                    help="training algorithm of every candidate: ppo (continuous or discrete actions), dqn (discrete) "
                         "or sac (continuous); `envcoder tasks` lists each task's (default ppo)")
    ev.add_argument("--iterations", type=_positive_int, default=None,
                    help="training iterations (default: max_epochs of the resolved settings, e.g. 60 for Cartpole)")
    ev.add_argument("--schedule", choices=SCHEDULES, default="flat",
                    help="flat: every candidate trains for every iteration; halving: successive halving, the worse "
                         "half of the candidates stops at the end of each rung and the survivors get its "
                         "environments (default flat)")
    ev.add_argument("--rungs", type=_positive_int, default=None,
                    help="rungs of --schedule halving (default 4; fewer where the candidates halve to one sooner)")
    ev.add_argument("--config", type=Path, default=None, metavar="FILE",
                    help="YAML file of the algorithm's settings (rl_games names; or with a section per algorithm) "
                         "applied over the task's src/envcoder/tasks/configs/<task>.yaml; a run's ppo.yaml can be "
                         "reused here")
    ev.add_argument("overrides", nargs="*", metavar="ALGO.NAME=VALUE",
                    help="setting overrides applied last, e.g. ppo.learning_rate=1e-3 ppo.units=[512,256]")
    ev.add_argument("--fitness", default=None,
                    help="the task fitness to rank by (default: the task's first; see `envcoder tasks --task T`)")
    ev.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    ev.add_argument("--seeds", type=_positive_int, default=1, help="independent seeds per candidate (default 1)")
    ev.add_argument("--out", type=Path, default=None, help="run directory to create (default runs/<task>-<time>)")
    ev.add_argument("--no-tensorboard", dest="tensorboard", action="store_false",
                    help="skip the TensorBoard event files (one run per candidate and seed in <out>/tensorboard/)")
    ev.add_argument("--wandb", action="store_true",
                    help="also log to Weights & Biases: one W&B run per candidate and seed, grouped by run directory "
                         "(needs `pip install wandb` and `wandb login`, or WANDB_MODE=offline)")
    ev.add_argument("--wandb-project", default="envcoder", metavar="NAME", help="W&B project (default envcoder)")
    ev.add_argument("--physics", choices=("jax", "warp"), default=None,
                    help="physics engine: jax (MJX, the default) or warp (MuJoCo Warp, CUDA GPUs, needs warp-lang)")
    _limits(ev, "the training iteration's")
    _devices(ev)
    ev.add_argument("--resume", type=Path, default=None, metavar="RUN",
                    help="continue an interrupted run from its last checkpoint (every save_frequency iterations), "
                         "with the settings it was started with; the result equals an uninterrupted run's")

    auto = add_parser("auto", help="automatic shaping: a proposer (LLM or offline search) writes candidates, "
                                        "envcoder evaluates them all at once, feeds statistics back and iterates")
    auto.add_argument("--task", default=None, help="task name (see `envcoder tasks`)")
    auto.add_argument("--task-description", "--task_description", dest="task_description", default=None,
                      help="what the robot should do, in words (default: the task's own description)")
    auto.add_argument("--shaper-types", "--shaper_types", dest="shaper_types", nargs="+", type=_shaper_type,
                      default=["compute_reward"], metavar="TYPE",
                      help=f"functions the proposer writes (default compute_reward; {', '.join(SHAPER_TYPES)})")
    auto.add_argument("--llm", default=None, metavar="MODEL",
                      help="model that proposes candidates, e.g. gpt-4o or claude-sonnet-4-5 (default: the offline "
                           "proposer, which mutates the constants of the best candidates and needs no network)")
    auto.add_argument("--provider", choices=("openai", "anthropic"), default=None,
                      help="API of --llm (default: from the model name; OPENAI_API_KEY or ANTHROPIC_API_KEY)")
    auto.add_argument("--base-url", "--base_url", dest="base_url", default=None,
                      help="an OpenAI-compatible server (vLLM, Ollama, ...), e.g. http://localhost:8000/v1")
    auto.add_argument("--candidates-per-iteration", dest="candidates_per_iteration", type=_positive_int, default=8,
                      help="candidates proposed and evaluated together per iteration (default 8)")
    auto.add_argument("--iterations", type=_positive_int, default=3, help="search iterations (default 3)")
    auto.add_argument("--retries", type=int, default=2,
                      help="times a candidate that fails validation is sent back to be fixed (default 2)")
    auto.add_argument("--initial", nargs="+", type=_initial_path, default=None, metavar="PATH",
                      help="starting candidate files or directories: evaluated first, shown to an LLM, mutated by "
                           "the offline proposer (offline default: the bundled user_functions/<task>)")
    auto.add_argument("--envs-per-candidate", "--envs_per_candidate", dest="envs_per_candidate",
                      type=_positive_int, default=256, help="parallel environments per candidate (default 256)")
    auto.add_argument("--train-iterations", dest="train_iterations", type=_positive_int, default=None,
                      help="PPO iterations per evaluation (default: the resolved settings' max_epochs)")
    auto.add_argument("--schedule", choices=SCHEDULES, default="flat",
                      help="budget of each search iteration's evaluation: flat trains every candidate to the end; "
                           "halving drops the worse half halfway and gives their environments to the survivors "
                           "(default flat; the final evaluation is flat)")
    auto.add_argument("--algo", choices=tuple(ALGORITHMS), default="ppo",
                      help="training algorithm of the evaluations (default ppo)")
    auto.add_argument("--config", type=Path, default=None, metavar="FILE",
                      help="YAML file of the algorithm's settings")
    auto.add_argument("overrides", nargs="*", metavar="ALGO.NAME=VALUE", help="setting overrides, e.g. "
                                                                              "ppo.learning_rate=1e-3")
    auto.add_argument("--fitness", default=None, help="the task fitness to optimise (default: the task's first)")
    auto.add_argument("--physics", choices=("jax", "warp"), default=None,
                      help="physics engine of the evaluations: jax or warp (default as for eval)")
    auto.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    auto.add_argument("--seeds", type=_positive_int, default=1, help="seeds per candidate during the search (default 1)")
    auto.add_argument("--final-seeds", dest="final_seeds", type=_positive_int, default=2,
                      help="seeds of the final re-evaluation of the best candidates (default 2)")
    auto.add_argument("--final-top", dest="final_top", type=_positive_int, default=3,
                      help="how many of the best candidates the final evaluation re-trains (default 3)")
    auto.add_argument("--final-envs", dest="final_envs", type=_positive_int, default=None, metavar="N",
                      help=f"envs per candidate of the final evaluation (default {FINAL_ENVS} on a GPU, the full-budget "
                           "ranking of docs/benchmarks/fidelity.md; on a CPU --envs-per-candidate's)")
    _limits(auto, "an evaluation's")
    _devices(auto, hosts=False)
    auto.add_argument("--request-timeout", dest="request_timeout_s", type=float, default=120.0, metavar="S",
                      help="seconds before an LLM request is retried (default 120)")
    auto.add_argument("--api-retries", dest="api_retries", type=int, default=4,
                      help="retries with backoff of a failed LLM request, by the SDK (default 4)")
    auto.add_argument("--concurrency", type=_positive_int, default=4, help="LLM requests in flight (default 4)")
    auto.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the model's)")
    auto.add_argument("--max-tokens", dest="max_tokens", type=_positive_int, default=4096,
                      help="longest response in tokens (default 4096)")
    auto.add_argument("--price", nargs=2, type=float, default=None, metavar=("IN", "OUT"),
                      help="USD per million input and output tokens, for the cost estimate of an unlisted model")
    auto.add_argument("--out", type=Path, default=None, help="run directory to create (default runs/auto-<task>-<time>)")
    auto.add_argument("--resume", type=Path, default=None, metavar="RUN",
                      help="continue an interrupted run with its recorded settings; recorded LLM calls are not repeated")

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


def _eval(args) -> int:
    import dataclasses
    import importlib.util
    import time

    try:
        _start_processes(args)  # before anything that may start JAX's backend
    except ValueError as err:
        return _fail("eval", str(err))

    from envcoder.rl.config import parse_overrides
    from envcoder.runs.evaluation import (EvalSettings, NoValidCandidatesError, OutOfGPUMemoryError, run_evaluation,
                                         settings_from_run)
    from envcoder.candidates.sandbox import SandboxError
    from envcoder.tasks import UnknownTaskError, get_task

    if args.resume is not None:
        if args.task is not None or args.overrides:
            return _fail("eval", "--resume continues a run with the settings in RUN/config.json; give no --task, "
                                 "overrides or other options with it (but --devices and the multi-host options)")
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
    functions = args.functions or BUNDLED_FUNCTIONS / task.name.lower()
    out = args.out or Path("runs") / f"{task.name.lower()}-{time.strftime('%Y%m%d-%H%M%S')}"
    settings = EvalSettings(
        task=task.name, functions=functions, out=out, shaper_types=tuple(dict.fromkeys(args.shaper_types)),
        cross=args.cross, envs_per_candidate=args.envs_per_candidate, schedule=args.schedule, rungs=args.rungs,
        iterations=args.iterations, fitness=args.fitness, config_file=args.config, tensorboard=args.tensorboard,
        wandb_project=args.wandb_project if args.wandb else None, physics=args.physics,
        seeds=tuple(range(args.seed, args.seed + args.seeds)), validation_timeout_s=args.validation_timeout_s,
        validation_memory_gib=args.validation_memory_gib, compile_timeout_s=args.compile_timeout_s,
        iteration_timeout_s=args.iteration_timeout_s, devices=args.devices)
    if args.wandb and importlib.util.find_spec("wandb") is None:
        return _fail("eval", "--wandb needs the wandb package: pip install wandb (or envcoder[wandb])")
    try:
        settings = dataclasses.replace(settings, algo=args.algo, overrides=parse_overrides(args.overrides, args.algo))
        run_evaluation(settings)
    except (FileNotFoundError, FileExistsError, NoValidCandidatesError, OutOfGPUMemoryError, SandboxError,
            ValueError) as err:
        return _fail("eval", str(err))
    return 0


def _candidate_files(paths, task, shaper_types) -> tuple[Path, ...]:
    """Files given to --initial (directories expanded), or, with none, the bundled files of the task that
    define one of `shaper_types`."""
    from envcoder.candidates import CandidateError, check_statically

    def expand(path: Path):
        if path.is_dir():
            return sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
        if not path.is_file():
            raise FileNotFoundError(f"--initial: {str(path)!r} does not exist")
        return [path]

    if paths:
        return tuple(f for path in paths for f in expand(path))
    bundled = []
    for file in expand(BUNDLED_FUNCTIONS / task.name.lower()):
        try:
            check_statically(file.read_text(), str(file), shaper_types)
            bundled.append(file)
        except CandidateError:
            pass
    return tuple(bundled)


def _auto(args) -> int:
    import dataclasses
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
            run_auto(dataclasses.replace(load_settings(args.resume), devices=args.devices), resume=True)
            return 0
        if args.task is None:
            return _fail("auto", "--task is required (or --resume RUN)")
        task = get_task(args.task)
        initial = _candidate_files(args.initial, task, args.shaper_types) if args.initial or not args.llm else ()
        out = args.out or Path("runs") / f"auto-{task.name.lower()}-{time.strftime('%Y%m%d-%H%M%S')}"
        settings = AutoSettings(
            task=task.name, out=out, task_description=args.task_description,
            shaper_types=tuple(dict.fromkeys(args.shaper_types)), llm=args.llm, provider=args.provider,
            base_url=args.base_url, candidates_per_iteration=args.candidates_per_iteration,
            iterations=args.iterations, retries=args.retries, envs_per_candidate=args.envs_per_candidate,
            train_iterations=args.train_iterations, seeds=args.seeds, schedule=args.schedule,
            final_seeds=args.final_seeds, final_top=args.final_top, final_envs_per_candidate=args.final_envs,
            seed=args.seed, initial=initial, config_file=args.config,
            algo=args.algo, overrides=parse_overrides(args.overrides, args.algo), fitness=args.fitness,
            physics=args.physics,
            validation_timeout_s=args.validation_timeout_s, validation_memory_gib=args.validation_memory_gib,
            compile_timeout_s=args.compile_timeout_s, iteration_timeout_s=args.iteration_timeout_s,
            devices=args.devices, request_timeout_s=args.request_timeout_s, api_retries=args.api_retries,
            concurrency=args.concurrency,
            temperature=args.temperature, max_tokens=args.max_tokens, price=tuple(args.price) if args.price else None)
        run_auto(settings)
    except (UnknownTaskError, ProposerError, SandboxError, OutOfGPUMemoryError, FileNotFoundError, FileExistsError,
            ValueError) as err:
        return _fail("auto", str(err))
    return 0


def _play(args) -> int:
    import os
    import shutil

    # MuJoCo picks its OpenGL backend when it is first imported: EGL on a GPU machine, else OSMesa.
    os.environ.setdefault("MUJOCO_GL", "egl" if shutil.which("nvidia-smi") else "osmesa")
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
        for task in TASKS.values():
            print(f"{task.name:16s} {task.description} (--algo {'|'.join(task.algorithms)})")
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


def main(argv=None) -> int:
    """Every command ends with one clear line on an error (`--debug` shows the traceback instead)."""
    args = build_parser().parse_args(argv)
    try:
        if args.command in ("eval", "auto", "play"):
            from envcoder.compile_cache import enable_compilation_cache
            enable_compilation_cache()
        return {"eval": _eval, "auto": _auto, "play": _play, "report": _report, "tasks": _tasks}[args.command](args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        hint = (f"; `envcoder {args.command} --resume RUN` continues the run from its last checkpoint"
                if args.command in ("eval", "auto") else "")
        print(f"envcoder {args.command}: interrupted{hint}", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - anything not foreseen: one line, not a traceback
        if args.debug:
            raise
        text = str(err).strip().split("\n")[0] or "(no message)"
        print(f"envcoder {args.command}: error: {type(err).__name__}: {text} (run again with --debug for the "
              "traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
