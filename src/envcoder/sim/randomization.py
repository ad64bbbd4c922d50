"""Per-environment physics: the fields a `sample_physics` candidate may randomize, and what each one changes.

`sample_physics(key, params)` runs once per environment at every reset and returns some of `FIELDS`, each
broadcastable to the field's shape (a scalar `mass` scales every body). Fields it leaves out keep their neutral
value, and a run in which no candidate randomizes anything steps the task's model exactly as before. Model
fields are applied to one environment's `mjx.Model` inside the vmapped step (MJX batches a model field that is
traced per environment); the others are the learner's (pushes, observation noise, action latency).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

MAX_ACTION_LATENCY = 4
"""The most control steps an action may be delayed by (`action_latency` is clipped to it)."""


@dataclasses.dataclass(frozen=True)
class PhysicsField:
    """One randomizable quantity of an environment."""

    size: str
    """What the field's shape is per environment: "" (a scalar), "3", "nbody", "nu" or "nv"."""
    neutral: float
    """The value that changes nothing."""
    units: str
    meaning: str


FIELDS: Mapping[str, PhysicsField] = {
    "friction": PhysicsField("", 1.0, "-", "scale of the sliding and torsional friction of every contact"),
    "mass": PhysicsField("nbody", 1.0, "-", "scale of each body's mass and inertia (a scalar scales all bodies)"),
    "com_offset": PhysicsField("3", 0.0, "m", "added to the centre of mass of the first body (the base), body frame"),
    "motor_strength": PhysicsField("nu", 1.0, "-", "scale of each actuator's force (its gain, and a position "
                                                   "actuator's stiffness and damping)"),
    "joint_damping": PhysicsField("nv", 0.0, "N·m·s/rad", "damping added to every joint (not the free joint)"),
    "gravity": PhysicsField("3", 0.0, "m/s²", "added to the gravity vector (world frame)"),
    "push_velocity": PhysicsField("", 0.0, "m/s", "largest velocity kick of a push: every `push_interval` steps the "
                                                  "base's horizontal velocity changes by a uniform draw in ±this"),
    "push_interval": PhysicsField("", 0.0, "steps", "control steps between pushes (0: never; rounded)"),
    "observation_noise": PhysicsField("", 0.0, "-", "standard deviation of Gaussian noise added to every entry of "
                                                    "the policy's observation (before normalization)"),
    "action_latency": PhysicsField("", 0.0, "steps", f"control steps by which the motors receive the policy's "
                                                     f"action late (rounded; at most {MAX_ACTION_LATENCY})"),
}
"""Every field `sample_physics` may return, by name."""

MODEL_FIELDS = ("friction", "mass", "com_offset", "motor_strength", "joint_damping", "gravity")
"""The fields that change the physics model; the rest act in the learner."""


def field_shape(name: str, mj_model: mujoco.MjModel) -> tuple[int, ...]:
    """The shape of field `name` for one environment of `mj_model`."""
    size = FIELDS[name].size
    return () if not size else (int(size),) if size.isdigit() else (int(getattr(mj_model, size)),)


def complete(fields: Mapping[str, jax.Array], names, mj_model: mujoco.MjModel, lead: tuple[int, ...]) -> dict:
    """`fields` (arrays with leading axes `lead`) broadcast to their full shapes, with every field of `names`
    that they lack at its neutral value: the same structure for every candidate of a run."""
    out = {}
    for name in names:
        shape = lead + field_shape(name, mj_model)
        if name in fields:
            value = jnp.asarray(fields[name], jnp.float32)
            missing = len(shape) - value.ndim  # a per-environment scalar applies to every entry
            value = value.reshape(value.shape[:len(lead)] + (1,) * missing + value.shape[len(lead):])
            out[name] = jnp.broadcast_to(value, shape)
        else:
            out[name] = jnp.full(shape, FIELDS[name].neutral, jnp.float32)
    return out


def delayed(actions, past, latency):
    """`(the action the motors get, the new action history)` of a step under a randomized `action_latency`
    (`latency [G, E]`): the action of that many steps ago. `actions [G, E, A]`, `past [G, E, MAX_ACTION_LATENCY, A]`:
    the actions of the steps before, the latest first."""
    history = jnp.concatenate([actions[:, :, None], past], axis=2)
    steps = jnp.clip(jnp.round(latency), 0, MAX_ACTION_LATENCY).astype(jnp.int32)
    return jnp.take_along_axis(history, steps[..., None, None], axis=2)[:, :, 0], history[:, :, :-1]


def pushed(qvel, physics: Mapping[str, jax.Array], progress, key, dofs: tuple[int, ...]):
    """`qvel [G, E, nv]` after this step's randomized pushes (`push_interval`, `push_velocity`): a push changes the
    velocity of `dofs` (`ModelRandomizer.push_dofs`) at once. `progress [G, E]`: each episode's steps before this
    one; `key [G, 2]`: the step's randomness."""
    interval = jnp.round(physics["push_interval"]).astype(jnp.int32)
    now = (interval > 0) & ((progress + 1) % jnp.maximum(interval, 1) == 0)
    kick = jax.vmap(lambda k: jax.random.uniform(k, (progress.shape[1], len(dofs)), minval=-1.0, maxval=1.0))(
        jax.vmap(lambda k: jax.random.fold_in(k, 0x9054))(key))
    kick = kick * physics["push_velocity"][..., None] * now[..., None]
    return qvel.at[..., dofs[0]:dofs[-1] + 1].add(kick)


class ModelRandomizer:
    """Applies the model fields of one environment to an `mjx.Model`."""

    def __init__(self, mj_model: mujoco.MjModel):
        self.mj_model = mj_model
        # ancestors[i, j] = 1 where body j is in the subtree of body i: subtree masses from body masses.
        nbody = mj_model.nbody
        ancestors = np.eye(nbody, dtype=np.float32)
        for body in range(nbody - 1, 0, -1):
            ancestors[mj_model.body_parentid[body]] += ancestors[body]
        self._ancestors = jnp.asarray(ancestors)
        free = mj_model.jnt_type == mujoco.mjtJoint.mjJNT_FREE
        dof_free = np.zeros(mj_model.nv, bool)
        for joint in np.flatnonzero(free):
            dof_free[mj_model.jnt_dofadr[joint]:mj_model.jnt_dofadr[joint] + 6] = True
        self._joint_dofs = jnp.asarray(~dof_free, jnp.float32)
        # The dofs a push moves: a free base's horizontal velocity, else the first joint's.
        first = mj_model.jnt_dofadr[0] if mj_model.njnt else 0
        self.push_dofs = (first, first + 1) if mj_model.njnt and free[0] else (first,)

    def apply(self, model, physics: Mapping[str, jax.Array]):
        """`model` with the model fields of `physics` (one environment's values) applied."""
        changes = {}
        if "friction" in physics:
            scale = physics["friction"]
            changes["geom_friction"] = model.geom_friction.at[:, :2].multiply(scale)
            changes["pair_friction"] = model.pair_friction.at[:, :3].multiply(scale)
        if "mass" in physics:
            scale = physics["mass"]
            mass = model.body_mass * scale
            changes.update(body_mass=mass, body_inertia=model.body_inertia * scale[:, None],
                           body_subtreemass=self._ancestors @ mass)
        if "com_offset" in physics and self.mj_model.nbody > 1:
            changes["body_ipos"] = model.body_ipos.at[1].add(physics["com_offset"])
        if "motor_strength" in physics:
            scale = physics["motor_strength"][:, None]
            changes["actuator_gainprm"] = model.actuator_gainprm.at[:, :1].multiply(scale)
            changes["actuator_biasprm"] = model.actuator_biasprm.at[:, 1:3].multiply(scale)
        if "joint_damping" in physics:
            changes["dof_damping"] = model.dof_damping + physics["joint_damping"] * self._joint_dofs
        if "gravity" in physics:
            changes["opt"] = model.opt.replace(gravity=model.opt.gravity + physics["gravity"])
        return model.replace(**changes) if changes else model
