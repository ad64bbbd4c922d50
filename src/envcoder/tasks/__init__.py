"""Task registry: `get_task("Cartpole")`."""

import difflib

from envcoder.tasks import ant, anymal, cartpole, humanoid
from envcoder.tasks.base import Fitness, StateField, Task

TASKS = {task.name: task for task in (cartpole.TASK, cartpole.DISCRETE_TASK, ant.TASK, anymal.TASK, humanoid.TASK)}


class UnknownTaskError(ValueError):
    pass


def get_task(name: str) -> Task:
    """The registered task called `name` (case-insensitive)."""
    by_lower = {key.lower(): task for key, task in TASKS.items()}
    if name.lower() not in by_lower:
        close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
        hint = f"did you mean {by_lower[close[0]].name!r}? " if close else ""
        raise UnknownTaskError(f"unknown task {name!r}; {hint}known tasks: {', '.join(sorted(TASKS))}")
    return by_lower[name.lower()]


__all__ = ["TASKS", "Task", "StateField", "Fitness", "get_task", "UnknownTaskError"]
