"""Where tasks come from: `get_task("Cartpole")`, `get_task("path/to/my_task.py")`.

A task is one `Task` record (`envcoder.tasks.base`). The registered ones are the `envcoder.tasks` entry points of
installed packages, envcoder's own five among them (pyproject.toml); a package of tasks declares its own the same
way:

    [project.entry-points."envcoder.tasks"]
    Hopper = "my_robots.hopper:TASK"

A task file is a Python file that defines one `Task` (named `TASK`, or the only one): `--task path/to/my_task.py`.
Its model file may be written relative to the file. The file is the user's own code, trusted like a config (it is
imported, as a package's task is); the candidates that shape it stay in the sandbox. A task read from a file is
known by its path (`Task.key`) to the run's records and the sandbox's workers, and by its name in this process.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import importlib
import importlib.util
from importlib.metadata import entry_points
from pathlib import Path

from envcoder.tasks.base import Fitness, IsaacName, StateField, Task, action_field

BUILT_IN = {
    "Cartpole": "envcoder.tasks.cartpole:TASK",
    "CartpoleDiscrete": "envcoder.tasks.cartpole:DISCRETE_TASK",
    "Ant": "envcoder.tasks.ant:TASK",
    "Anymal": "envcoder.tasks.anymal:TASK",
    "Humanoid": "envcoder.tasks.humanoid:TASK",
}
"""envcoder's own tasks, as its entry points declare them: used where envcoder runs from a source folder that was
not installed (no entry points to read)."""

GROUP = "envcoder.tasks"
"""The entry-point group that registers tasks."""


class UnknownTaskError(ValueError):
    pass


def registered() -> dict[str, str]:
    """Every registered task's name and where it is (`module:attribute`): the `envcoder.tasks` entry points, and
    envcoder's own tasks where its own entry points are not installed."""
    found = {ep.name: ep.value for ep in entry_points(group=GROUP)}
    return {**{name: found.pop(name, where) for name, where in BUILT_IN.items()}, **dict(sorted(found.items()))}


_LOADED: dict[str, Task] = {}
"""The tasks loaded in this process, by lower-case name and, for a task file, by its resolved path too."""


def _from_entry(name: str, where: str) -> Task:
    module, _, attribute = where.partition(":")
    task = getattr(importlib.import_module(module), attribute)
    if not isinstance(task, Task):
        raise UnknownTaskError(f"the entry point {name} = {where!r} ({GROUP}) is not a Task but a {type(task).__name__}")
    return task


def is_task_file(name: str) -> bool:
    """Whether `--task name` names a file rather than a registered task."""
    return name.endswith(".py") or "/" in name or "\\" in name


def load_task_file(path: str | Path) -> Task:
    """The one `Task` that the Python file `path` defines (its `TASK`, else its only `Task`), with its model file
    resolved against the file's folder and `source` set; `UnknownTaskError` that says what is wrong otherwise."""
    path = Path(path).expanduser().resolve()
    if str(path) in _LOADED:
        return _LOADED[str(path)]
    if not path.is_file():
        raise UnknownTaskError(f"task file {str(path)!r} does not exist: give a task's name (envcoder tasks lists "
                               "them) or the path of a Python file that defines a Task")
    module_name = f"envcoder_task_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - the user's file: what went wrong, where
        raise UnknownTaskError(f"task file {path} could not be imported: {type(err).__name__}: {err}") from err
    tasks = {name: value for name, value in vars(module).items() if isinstance(value, Task)}
    task = tasks.get("TASK") or (next(iter(tasks.values())) if len(tasks) == 1 else None)
    if task is None:
        what = f"defines {len(tasks)} Tasks ({', '.join(tasks)})" if tasks else "defines no Task"
        raise UnknownTaskError(f"task file {path} {what}: name the one to use TASK "
                               "(TASK = Task(name=..., model_file=..., ...), from envcoder.tasks)")
    if task.name.lower() in {name.lower() for name in registered()}:
        raise UnknownTaskError(f"task file {path} names its task {task.name!r}, a registered task's name (envcoder "
                               "tasks lists them): give it a name of its own")
    model = Path(task.model_file)
    task = dataclasses.replace(task, model_file=model if model.is_absolute() else path.parent / model, source=path)
    _LOADED[str(path)] = _LOADED[task.name.lower()] = task
    return task


def get_task(name: str) -> Task:
    """The task called `name` (case-insensitive; a registered task, or one a task file of this process defined), or
    the task that the file `name` defines (`load_task_file`)."""
    if name.lower() in _LOADED:
        return _LOADED[name.lower()]
    if is_task_file(name):
        return load_task_file(name)
    entries = registered()
    by_lower = {key.lower(): key for key in entries}
    if name.lower() not in by_lower:
        close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
        hint = f"did you mean {by_lower[close[0]]!r}? " if close else ""
        raise UnknownTaskError(f"unknown task {name!r}; {hint}known tasks: {', '.join(sorted(entries))} (or the path "
                               "of a task file)")
    key = by_lower[name.lower()]
    task = _from_entry(key, entries[key])
    _LOADED[name.lower()] = _LOADED[task.name.lower()] = task
    return task


MODEL_SUFFIXES = (".xml", ".stl", ".obj", ".msh", ".png")
"""The files of a task file's model folder that its fingerprint covers: MJCF, meshes, height fields, textures."""


def fingerprint(task: Task) -> str:
    """A hash of what a task read from a file is made of: the file, its model and the model folder's other model files
    (`MODEL_SUFFIXES`, not in subfolders); "" for a package's task (its package's code covers it). The sample states,
    the sandbox's verdicts and the trace cache are keyed by it, so that an edited task or model is made again."""
    if task.source is None:
        return ""
    model = Path(task.model_file)
    files = [Path(task.source), *sorted({model, *(p for p in model.parent.iterdir() if p.suffix in MODEL_SUFFIXES)})]
    stats = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in files if p.is_file())
    return _fingerprint(stats)


@functools.lru_cache(maxsize=64)
def _fingerprint(stats: tuple) -> str:
    """The hash of the files `stats` names (read again only where one's time or size changed)."""
    digest = hashlib.sha256()
    for path, _, _ in stats:
        digest.update(Path(path).name.encode() + b"\0" + Path(path).read_bytes())
    return digest.hexdigest()[:32]


def all_tasks() -> dict[str, Task]:
    """Every registered task, by name."""
    return {name: get_task(name) for name in registered()}


def task_files() -> list[Task]:
    """The tasks this process read from files (`load_task_file`)."""
    return list({id(task): task for key, task in _LOADED.items() if task.source is not None}.values())


def __getattr__(name: str):
    if name == "TASKS":  # every registered task, loaded when asked for
        return all_tasks()
    raise AttributeError(name)


__all__ = ["Task", "StateField", "Fitness", "IsaacName", "action_field", "get_task", "load_task_file", "all_tasks",
           "registered", "UnknownTaskError", "is_task_file", "fingerprint", "task_files"]
