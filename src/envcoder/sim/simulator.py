"""MJCF loading and physics stepping with substeps, on MuJoCo MJX.

The functions here act on one environment; the trainer vmaps them over all environments of all
candidates at once (`[G * E]`), so physics is one batched computation whatever the candidates are.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Sequence

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

# MJX tries to import its optional Warp backend and prints an error when it is absent; envcoder uses
# the JAX backend only, so that message is noise for our users.
with contextlib.redirect_stdout(io.StringIO()):
    from mujoco import mjx


class Simulator:
    """One MJCF model on the accelerator, stepped `substeps` physics steps per control step."""

    def __init__(self, model_file: str | Path, substeps: int):
        self.model_file = Path(model_file)
        self.mj_model = mujoco.MjModel.from_xml_path(str(self.model_file))
        self.model = mjx.put_model(self.mj_model)
        self.substeps = substeps
        self._data0 = mjx.make_data(self.model)
        ctrl_limited = self.mj_model.actuator_ctrllimited.astype(bool)
        ranges = self.mj_model.actuator_ctrlrange
        self._ctrl_low = jnp.asarray(np.where(ctrl_limited, ranges[:, 0], -np.inf), jnp.float32)
        self._ctrl_high = jnp.asarray(np.where(ctrl_limited, ranges[:, 1], np.inf), jnp.float32)

    @property
    def control_dt(self) -> float:
        """Seconds of simulated time per control step."""
        return float(self.mj_model.opt.timestep) * self.substeps

    @property
    def qpos0(self) -> jnp.ndarray:
        """The reference pose `[nq]`: the MJCF keyframe named `home` if there is one, else the model's qpos0."""
        key = mujoco.mj_name2id(self.mj_model, mujoco.mjtObj.mjOBJ_KEY, "home")
        qpos = self.mj_model.key_qpos[key] if key >= 0 else self.mj_model.qpos0
        return jnp.asarray(qpos, dtype=jnp.float32)

    def clip_ctrl(self, ctrl: jnp.ndarray) -> jnp.ndarray:
        """`ctrl [..., nu]` clipped to the actuators' control ranges (what the physics applies)."""
        return jnp.clip(ctrl, self._ctrl_low, self._ctrl_high)

    def contact_forces(self, data: mjx.Data, geom_ids: Sequence[int]) -> jnp.ndarray:
        """`[len(geom_ids), 3]`: the net contact force on each geom, world frame, in N (from the last step's
        constraint solve). Supports the pyramidal friction cone with condim 3, which envcoder's models use."""
        if self.mj_model.opt.cone != mujoco.mjtCone.mjCONE_PYRAMIDAL or np.any(self.mj_model.pair_dim != 3):
            raise NotImplementedError(f"{self.model_file.name}: contact forces need cone='pyramidal' and condim 3")
        contact = data._impl.contact
        rows = contact.efc_address[:, None] + jnp.arange(4)  # a condim-3 pyramid has 4 rows per contact
        pyramid = jnp.where(contact.efc_address[:, None] >= 0, data._impl.efc_force[jnp.maximum(rows, 0)], 0.0)
        normal = pyramid.sum(axis=1)
        tangent1 = contact.friction[:, 0] * (pyramid[:, 0] - pyramid[:, 1])
        tangent2 = contact.friction[:, 1] * (pyramid[:, 2] - pyramid[:, 3])
        local = jnp.stack([normal, tangent1, tangent2], axis=1)  # force on geom2, contact frame
        world = jnp.einsum("ci,cij->cj", local, contact.frame)
        # Each contact pushes geom2 by `world` and geom1 by its opposite.
        per_geom = [(jnp.where(contact.geom[:, 1:2] == g, 1.0, 0.0) * world
                     - jnp.where(contact.geom[:, 0:1] == g, 1.0, 0.0) * world).sum(axis=0) for g in geom_ids]
        return jnp.stack(per_geom)

    def reset(self, qpos: jnp.ndarray, qvel: jnp.ndarray) -> mjx.Data:
        """Physics data at `qpos [nq]`, `qvel [nv]`, with derived quantities (positions, contacts) computed."""
        data = self._data0.replace(qpos=qpos, qvel=qvel)
        return mjx.forward(self.model, data)

    def physics_step(self, data: mjx.Data, ctrl: jnp.ndarray) -> mjx.Data:
        """Advance one physics step with `ctrl [nu]` (clipped to the actuators' ranges)."""
        return mjx.step(self.model, data.replace(ctrl=self.clip_ctrl(ctrl)))

    def step(self, data: mjx.Data, ctrl: jnp.ndarray) -> mjx.Data:
        """Advance one control step: hold `ctrl [nu]` for `substeps` physics steps."""
        return jax.lax.fori_loop(0, self.substeps, lambda _, d: self.physics_step(d, ctrl), data)
