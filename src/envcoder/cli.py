"""Command line: `envcoder eval` (train and rank candidates) and `envcoder tasks` (what a task offers)."""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

from envcoder.shaping.candidate import ALIASES, SHAPER_TYPES

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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="envcoder", description="Evaluate many RL environment-shaping candidates in one process.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    ev = sub.add_parser("eval", help="train every candidate of a directory and rank them by task fitness")
    ev.add_argument("--task", required=True, help="task name (see `envcoder tasks`)")
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
    ev.add_argument("--iterations", type=_positive_int, default=None,
                    help="PPO iterations (default: max_epochs of the resolved PPO settings, e.g. 60 for Cartpole)")
    ev.add_argument("--config", type=Path, default=None, metavar="FILE",
                    help="YAML file of PPO settings (rl_games names) applied over the task's "
                         "src/envcoder/tasks/configs/<task>.yaml; a run's ppo.yaml can be reused here")
    ev.add_argument("overrides", nargs="*", metavar="ppo.NAME=VALUE",
                    help="PPO setting overrides applied last, e.g. ppo.learning_rate=1e-3 ppo.units=[512,256]")
    ev.add_argument("--fitness", default=None,
                    help="the task fitness to rank by (default: the task's first; see `envcoder tasks --task T`)")
    ev.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    ev.add_argument("--seeds", type=_positive_int, default=1, help="independent seeds per candidate (default 1)")
    ev.add_argument("--out", type=Path, default=None, help="run directory to create (default runs/<task>-<time>)")

    tasks = sub.add_parser("tasks", help="list tasks, or describe one: state fields, defaults, fitness")
    tasks.add_argument("--task", default=None, help="task to describe")
    return parser


def _eval(args) -> int:
    import dataclasses
    import time

    from envcoder.rl.config import parse_overrides
    from envcoder.runs.evaluation import EvalSettings, NoValidCandidatesError, run_evaluation
    from envcoder.tasks import UnknownTaskError, get_task

    try:
        task = get_task(args.task)
    except UnknownTaskError as err:
        return _fail("eval", str(err))
    functions = args.functions or BUNDLED_FUNCTIONS / task.name.lower()
    out = args.out or Path("runs") / f"{task.name.lower()}-{time.strftime('%Y%m%d-%H%M%S')}"
    settings = EvalSettings(
        task=task.name, functions=functions, out=out, shaper_types=tuple(dict.fromkeys(args.shaper_types)),
        cross=args.cross, envs_per_candidate=args.envs_per_candidate,
        iterations=args.iterations, fitness=args.fitness, config_file=args.config,
        seeds=tuple(range(args.seed, args.seed + args.seeds)))
    try:
        settings = dataclasses.replace(settings, ppo=parse_overrides(args.overrides))
        run_evaluation(settings)
    except (FileNotFoundError, FileExistsError, NoValidCandidatesError, ValueError) as err:
        return _fail("eval", str(err))
    return 0


def _tasks(args) -> int:
    from envcoder.shaping.helpers import HELPERS
    from envcoder.tasks import TASKS, UnknownTaskError, get_task

    if args.task is None:
        for task in TASKS.values():
            print(f"{task.name:10s} {task.description}")
        return 0
    try:
        task = get_task(args.task)
    except UnknownTaskError as err:
        return _fail("tasks", str(err))
    print(f"# {task.name}: {task.description}\n")
    print(f"Control step: {task.substeps} physics steps; episodes end after {task.max_episode_length} control steps "
          "(a time-out) or when compute_terminal says so (a failure).\n")
    print("## State fields (the `state` mapping every shaping function receives)\n")
    for name, field in task.state_fields.items():
        print(f"- {name} {field.shape} ({field.units}): {field.meaning}")
    print("\n## Task fitness definitions (ground truth used for ranking; `--fitness NAME`, the first is the default)\n")
    for name, fitness in task.fitness.items():
        print(f"- {name}: {fitness.doc}")
    print("\n## Default shaping functions (a candidate overrides any of them)\n")
    for api in SHAPER_TYPES:
        print(inspect.getsource(task.defaults[api]))
    print("## Helpers in a candidate's namespace (besides jax, jnp and math)\n")
    for name, helper in HELPERS.items():
        doc = inspect.getdoc(helper) or ""
        print(f"- {name}{inspect.signature(helper)}: {doc}\n")
    print(f"## PPO settings ({task.config_file.name}, rl_games names)\n")
    for key, value in task.ppo_overrides.items():
        print(f"- {key}: {value}")
    return 0


def _fail(command: str, message: str) -> int:
    print(f"envcoder {command}: error: {message}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return {"eval": _eval, "tasks": _tasks}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
