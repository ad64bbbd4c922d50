"""MJCF loading and physics stepping with substeps, on MuJoCo MJX.

The functions here act on one environment; the trainer vmaps them over all environments of all
candidates at once (`[G * E]`), so physics is one batched computation whatever the candidates are.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco

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

    @property
    def control_dt(self) -> float:
        """Seconds of simulated time per control step."""
        return float(self.mj_model.opt.timestep) * self.substeps

    @property
    def qpos0(self) -> jnp.ndarray:
        """The model's reference joint positions `[nq]`."""
        return jnp.asarray(self.mj_model.qpos0, dtype=jnp.float32)

    def reset(self, qpos: jnp.ndarray, qvel: jnp.ndarray) -> mjx.Data:
        """Physics data at `qpos [nq]`, `qvel [nv]`, with derived quantities (positions, contacts) computed."""
        data = self._data0.replace(qpos=qpos, qvel=qvel)
        return mjx.forward(self.model, data)

    def step(self, data: mjx.Data, ctrl: jnp.ndarray) -> mjx.Data:
        """Advance one control step: hold `ctrl [nu]` for `substeps` physics steps."""
        data = data.replace(ctrl=ctrl)
        return jax.lax.fori_loop(0, self.substeps, lambda _, d: mjx.step(self.model, d), data)
