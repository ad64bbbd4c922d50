"""Task registry: `get_task("Cartpole")`."""

from envcoder.tasks import ant, anymal, cartpole, humanoid
from envcoder.tasks.base import Fitness, StateField, Task

TASKS = {task.name: task for task in (cartpole.TASK, cartpole.DISCRETE_TASK, ant.TASK, anymal.TASK, humanoid.TASK)}


class UnknownTaskError(ValueError):
    pass


def get_task(name: str) -> Task:
    """The registered task called `name` (case-insensitive)."""
    by_lower = {key.lower(): task for key, task in TASKS.items()}
    if name.lower() not in by_lower:
        raise UnknownTaskError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    return by_lower[name.lower()]


__all__ = ["TASKS", "Task", "StateField", "Fitness", "get_task", "UnknownTaskError"]
