"""A ranking flag: candidates whose own `compute_torque` decides the motor command without the policy (the file's
controller, not a trained policy, earns its fitness), measured on the task's sample states."""

from __future__ import annotations

OWN_CONTROL_SHARE = 0.5
"""A candidate's `compute_torque` whose policy decides less than this share of what the task's own mapping lets it
decide (`policy_share`) is flagged in the ranking: the file's own controller earns its fitness, not a policy."""


def policy_share(torque, task, action_dim: int, params=None) -> float | None:
    """How much of the motor command the policy's action decides under `torque` (a `compute_torque`: a program of
    the worker's, or the task's own function), on the task's sample states: half the command's change from action
    -1 to +1 over that and the command at action 0 (1: all of it, as a torque that scales the action; near 0: a file
    that balances the pole itself with 0.01 N per unit of action). None where the task has no sample states here."""
    import jax.numpy as jnp
    import numpy as np

    from envcoder.candidates.load import api_callable
    from envcoder.candidates.samples import task_states

    states = task_states(task, make=False)  # the validation's workers made them
    if states is None or task.discrete:
        return None
    envs = len(next(iter(states.values())))
    batched = getattr(torque, "group_batched", False)
    fields = {k: jnp.asarray(v)[None] if batched else jnp.asarray(v) for k, v in states.items()}
    if "actions" in fields:
        fields["actions"] = jnp.zeros(fields["actions"].shape[:-1] + (action_dim,), jnp.float32)

    def command(value: float):
        action = jnp.full(((1,) if batched else ()) + (envs, action_dim), value, jnp.float32)
        if batched:
            return np.asarray(torque({k: jnp.full((1,), v, jnp.float32) for k, v in (params or {}).items()},
                                     action, fields))
        return np.asarray(api_callable("compute_torque", torque)(action, fields))
    swing = np.abs(command(1.0) - command(-1.0)).mean() / 2
    rest = np.abs(command(0.0)).mean()
    return float(swing / (swing + rest)) if swing + rest > 0 else None


def _sample_action_dim(task) -> int:
    """The width of the task's own action: its sample states' `actions` (rolled out under its own shaping)."""
    from envcoder.candidates.samples import task_states

    states = task_states(task, make=False) or {}
    return int(states["actions"].shape[-1]) if "actions" in states else 1


def own_control(candidates, task) -> dict[str, dict]:
    """`{name: {"policy_share", "task_share"}}` of each candidate whose own `compute_torque` leaves the policy less
    than `OWN_CONTROL_SHARE` of the task's own mapping's share (`policy_share`)."""
    mine = [c for c in candidates if "compute_torque" in c.functions and c.action_dim]
    own = task.defaults.get("compute_torque")
    if not mine or own is None:
        return {}
    task_share = policy_share(own, task, _sample_action_dim(task))
    if not task_share:
        return {}
    flagged = {}
    for candidate in mine:
        share = policy_share(candidate.functions["compute_torque"], task, candidate.action_dim,
                             candidate.function_params.get("compute_torque"))
        if share is not None and share < OWN_CONTROL_SHARE * task_share:
            flagged[candidate.name] = {"policy_share": share, "task_share": task_share}
    return flagged
