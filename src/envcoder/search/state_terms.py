"""The terms that a task's state offers the offline search's `state` move (`envcoder.search.moves`), each with the
range its weight is drawn from, sized for the task."""

from __future__ import annotations

from typing import Mapping, Sequence

from envcoder.tasks.base import StateField

STATE_TERMS = (
    # (name, the state fields it reads, its expression, the range of its weight)
    ("alive", ("progress_buf",), "jnp.ones(state['progress_buf'].shape, jnp.float32)", (0.1, 10.0)),
    ("upright", ("root_states",), "1 - 2 * (state['root_states'][:, 4] ** 2 + state['root_states'][:, 5] ** 2)",
     (0.1, 10.0)),
    ("height", ("root_states",), "state['root_states'][:, 2]", (0.1, 10.0)),
    ("spin_cost", ("root_states",), "-jnp.sum(state['root_states'][:, 10:13] ** 2, axis=-1)", (1e-3, 1.0)),
    ("action_cost", ("actions",), "-jnp.sum(state['actions'] ** 2, axis=-1)", (1e-3, 1.0)),
    ("joint_speed_cost", ("dof_vel",), "-jnp.sum(state['dof_vel'] ** 2, axis=-1)", (1e-5, 1e-1)),
    ("effort_cost", ("torques",), "-jnp.sum(state['torques'] ** 2, axis=-1)", (1e-6, 1e-2)),
    ("heading", ("root_states", "targets"), "heading_and_up(state['root_states'], state['targets'])['heading_proj']",
     (0.1, 10.0)),
    ("power_cost", (("torques", "dof_vel"),), "-jnp.sum(jnp.abs(state['torques'] * state['dof_vel']), axis=-1)",
     (1e-5, 1e-2)),
    ("joint_limit_cost", (("dof_pos", "dof_limits_lower", "dof_limits_upper"),),
     "-jnp.sum(jnp.maximum(100 * jnp.abs(unscale(state['dof_pos'], state['dof_limits_lower'], "
     "state['dof_limits_upper'])) - 99, 0), axis=-1)", (0.01, 1.0)),
)
"""Terms that a task's state offers, for the `state` move: a per-step bonus for staying alive, the
torso's up axis pointing up (`root_states`' quaternion w, x, y, z: the z of its z axis) or its height, squared
costs, and where the state has a walk target, joint limits or torques and joint speeds of one shape, the terms of
Isaac Gym's locomotion rewards: the torso's forward axis towards the target (`heading_proj`), the mechanical power
`|torque · joint speed|` and joints in the last 1% of their range (0 below it, 1 at the limit); each term's weight
is drawn log-uniformly from its range (costs of squares of large numbers get small ones). Fields in a tuple of their
own (`(("torques", "dof_vel"),)`) are multiplied entry by entry: the term is offered where they have one shape (not
Cartpole's one force against its two joint speeds). An expression's own numbers are integers, so that a population
tunes the term's weight alone: the float literals of a function are constants it scales
(`envcoder.candidates.constants`), and `1.0 - 2.0 * tilt` had become `1.34 + 7.6 * tilt`, a reward for tilting."""


COST_SIZE = 2.0
"""The most that a cost drawn by the `state` move takes per step, its weight times its median size on the task's
sample states (a random policy's rollout: `envcoder.candidates.validate.rollout_states`). A cost's range of weights
is the same for every task, but its size is not: a Humanoid's summed squared torques are 55 times an Ant's (3.2e4
against 576 on the sample states), so the top of the effort cost's range charged a Humanoid 319 per step. Every
first child of a sparse Humanoid start whose costs took 2.5 per step or more fell at once (9 of 9), and none of 116
first children of sparse Ant starts with costs below 1.5 per step failed (docs/benchmarks/search.md). Where a
cost's top weight gives more than this, its range is scaled down to end there (its decades kept)."""


def state_terms(fields: Mapping[str, StateField], states: Mapping | None = None) -> list[list]:
    """The `STATE_TERMS` that a task's state (`fields`: its `state_fields`) offers, as `[name, expression, low,
    high]`: it has every field the term reads, those it multiplies entry by entry of one shape. With the task's
    sample states (`states`), each cost's range ends where it takes `COST_SIZE` per step (`term_sizes`)."""
    def offered(needs) -> bool:
        groups = [need if isinstance(need, tuple) else (need,) for need in needs]
        return all(all(f in fields for f in group) and len({fields[f].shape for f in group}) == 1 for group in groups)
    terms = [[name, expression, low, high] for name, needs, expression, (low, high) in STATE_TERMS if offered(needs)]
    sizes = term_sizes(terms, states) if states is not None else {}
    for term in terms:
        size = sizes.get(term[0], 0.0) if term[0].endswith("_cost") else 0.0
        if term[3] * size > COST_SIZE:
            scale = COST_SIZE / (term[3] * size)
            term[2], term[3] = float(format(term[2] * scale, ".3g")), float(format(term[3] * scale, ".3g"))
    return terms


def term_sizes(terms: Sequence[Sequence], states: Mapping) -> dict[str, float]:
    """`{name: the median of |term| over the environments of states}` of `terms` (`state_terms`' entries; their
    expressions are envcoder's own, evaluated here with the shaping helpers they call)."""
    import jax.numpy as jnp
    import numpy as np

    from envcoder.shaping.helpers import heading_and_up, unscale

    scope = {"jnp": jnp, "heading_and_up": heading_and_up, "unscale": unscale,
             "state": {k: jnp.asarray(v) for k, v in states.items()}}
    return {name: float(np.median(np.abs(np.asarray(eval(expression, scope))))) for name, expression, *_ in terms}


def sample_states(task) -> dict:
    """The task's sample states (`envcoder.candidates.samples.task_states`)."""
    from envcoder.candidates.samples import task_states

    return task_states(task)
