"""MJCF loading and physics stepping with substeps, on MuJoCo MJX.

The functions here act on one environment; the learner vmaps them over all environments of all
candidates at once (`[G, E]`), so physics is one batched computation whatever the candidates are.

Two physics engines run the same model: MJX's JAX implementation (`physics="jax"`, every platform) and
MuJoCo Warp (`physics="warp"`, CUDA GPUs, needs `pip install warp-lang`), which MJX calls from inside the
jitted function. Warp keeps some arrays for all environments together (its contact list), so a Warp
simulator is built for a fixed number of environments (`worlds`), and contact forces are computed over the
whole batch (`contact_forces`) rather than per environment.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import math
import sys
import threading
import types
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import mujoco
import numpy as np

from envcoder.sim.randomization import ModelRandomizer

MJX_MESH_MODULE = "mujoco.mjx._src.mesh"
"""MJX's mesh preprocessing: it imports trimesh (with NetworkX) and SciPy's spatial module, 1.3-1.5 s of the 2.2-2.5 s
that importing MJX takes on the GPU machine (docs/benchmarks/throughput.md), and it is used only by models with
mesh or height-field collisions, none of envcoder's tasks. It is loaded when one of its names is first read."""


class _LoadedOnUse(types.ModuleType):
    """A module whose code runs when one of its names is first read (before, it holds only what the import system
    sets: `__spec__`, `__file__`, ...). Unlike `importlib.util.LazyLoader`, the import statements that bind it
    (`from package import module`) do not load it."""

    _lock = threading.RLock()

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):  # the import system's and inspect's probes
            raise AttributeError(name)
        with self._lock:  # another thread reading it meanwhile waits until its code has run
            if type(self) is _LoadedOnUse and not vars(self).get("__loading__"):  # not its own code, running
                vars(self)["__loading__"] = True
                try:
                    self.__spec__.loader.exec_module(self)
                finally:
                    del vars(self)["__loading__"]
                self.__class__ = types.ModuleType
        return types.ModuleType.__getattribute__(self, name)


def _defer_mesh_module() -> None:
    """Put MJX's mesh module in `sys.modules` as a `_LoadedOnUse` before MJX is imported; nothing where MJX is
    imported already or is laid out otherwise (then it loads as usual)."""
    if MJX_MESH_MODULE in sys.modules or "mujoco.mjx" in sys.modules:
        return
    path = Path(mujoco.__file__).parent / "mjx" / "_src" / "mesh.py"
    spec = importlib.util.spec_from_file_location(MJX_MESH_MODULE, path)
    if spec is None or not path.is_file():
        return
    module = importlib.util.module_from_spec(spec)
    module.__class__ = _LoadedOnUse
    sys.modules[MJX_MESH_MODULE] = module


_defer_mesh_module()
# MJX tries to import its optional Warp backend and prints an error when it is absent; that message is
# noise for users of the JAX engine (the Warp engine checks for it with a clear error).
with contextlib.redirect_stdout(io.StringIO()):
    from mujoco import mjx
    from mujoco.mjx import warp as mjx_warp
if isinstance(sys.modules.get(MJX_MESH_MODULE), _LoadedOnUse):  # where `from mujoco.mjx._src import mesh` finds it
    setattr(sys.modules["mujoco.mjx._src"], "mesh", sys.modules[MJX_MESH_MODULE])

PHYSICS_ENGINES = ("jax", "warp")


class PhysicsState(NamedTuple):
    """What an environment keeps of MJX's data between control steps (JAX engine): the fields a physics step reads,
    MuJoCo's integration state and inputs. `mjx.step` computes every other field from these before it reads it, so
    data holding only these (`Simulator.place`) steps as data with everything computed (`Simulator.reset`) does
    (`tests/sim/test_physics.py` checks it, to the bit). Ant: 0.6 of its data's 14 KiB per environment
    (`Simulator.compact`, `Simulator.expand`)."""

    time: jax.Array
    qpos: jax.Array
    qvel: jax.Array
    act: jax.Array
    history: jax.Array
    qacc_warmstart: jax.Array
    plugin_state: jax.Array
    ctrl: jax.Array
    qfrc_applied: jax.Array
    xfrc_applied: jax.Array
    eq_active: jax.Array
    mocap_pos: jax.Array
    mocap_quat: jax.Array
    userdata: jax.Array

    def replace(self, **fields) -> "PhysicsState":
        """As `mjx.Data.replace`."""
        return self._replace(**fields)


STEP_INPUTS = PhysicsState._fields
"""The fields of MJX's data that a physics step reads (`PhysicsState`)."""

CONTACTS_PER_PAIR = 4
"""Contacts one geom pair may produce (a box on a plane makes 4; a sphere 1): sizes Warp's contact list."""


class Simulator:
    """One MJCF model on the accelerator, stepped `substeps` physics steps per control step."""

    def __init__(self, model_file: str | Path, substeps: int, physics: str = "jax", worlds: int | None = None):
        """`physics`: "jax" or "warp"; `worlds`: the number of environments stepped together (Warp only)."""
        if physics not in PHYSICS_ENGINES:
            raise ValueError(f"unknown physics engine {physics!r}; choose from {', '.join(PHYSICS_ENGINES)}")
        self.model_file = Path(model_file)
        self.physics = physics
        self.mj_model = mujoco.MjModel.from_xml_path(str(self.model_file))
        self.substeps = substeps
        if physics == "jax":
            # On this process's first device (MJX's default, `jax.devices()[0]`, is process 0's in a multi-host run).
            self.model = mjx.put_model(self.mj_model, device=jax.local_devices()[0])
            self._data0 = mjx.make_data(self.model, device=jax.local_devices()[0])
        else:
            if not mjx_warp.WARP_INSTALLED:
                raise ValueError("--physics warp needs MuJoCo Warp's warp-lang package: pip install "
                                 "warp-lang==1.18.0 (the version mujoco-mjx 3.17 is built for), or use --physics jax")
            if worlds is None:
                raise ValueError("a Warp simulator steps a fixed number of environments: pass worlds=")
            # Only explicit contact pairs collide in envcoder's models; each pair makes a few contacts at most.
            per_world = CONTACTS_PER_PAIR * max(self.mj_model.npair, 1)
            constraints = 4 * per_world + int(self.mj_model.jnt_limited.sum()) + self.mj_model.neq * 6
            self.model = mjx.put_model(self.mj_model, impl="warp")
            # envcoder's models use few solver iterations on purpose (MJX speed); Warp would print a warning at
            # every step that reaches the limit. Its warnings about overflowing buffers stay on.
            quiet = self.model.opt._impl.replace(warn_overflow=self.model.opt._impl.warn_overflow & ~(
                mjx_warp.mjwp_types.OverflowType.ITERATIONS | mjx_warp.mjwp_types.OverflowType.LS_ITERATIONS))
            self.model = self.model.replace(opt=self.model.opt.replace(_impl=quiet))
            self._data0 = mjx.make_data(self.mj_model, impl="warp", naconmax=worlds * per_world,
                                        njmax=constraints)
        self.worlds = worlds
        # One world's physics step, jitted and inlined where it is called (the program is the same as without the
        # jit): JAX keeps its trace, so `trace_ahead` can trace MJX's Python, most of a rollout's tracing, before
        # the rollout itself can be traced. Under `vmap` the per-world trace serves any number of environments.
        self._world_step = jax.jit(self.physics_step, inline=True) if physics == "jax" else self.physics_step
        self._tracing_ahead = threading.Lock()
        self.randomizer = ModelRandomizer(self.mj_model)
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

    def geom_members(self, entries: Sequence[str | tuple[str, ...]]) -> np.ndarray:
        """`[ngeom + 1, len(entries)]`: 1 where a geom is an entry's: a task's `contact_geoms`, each the name of a
        geom or a tuple of names whose forces add up (a foot of two capsules). Its last row, for no geom (-1), is 0.
        An unknown name is an error that names the model file."""
        members = np.zeros((self.mj_model.ngeom + 1, len(entries)), np.float32)
        for k, entry in enumerate(entries):
            for name in (entry,) if isinstance(entry, str) else entry:
                geom = mujoco.mj_name2id(self.mj_model, mujoco.mjtObj.mjOBJ_GEOM, name)
                if geom < 0:
                    raise ValueError(f"{self.model_file}: no geom named {name}")
                members[geom, k] = 1.0
        return members

    def task_contact_forces(self, task, data: mjx.Data) -> jnp.ndarray:
        """`[..., len(task.contact_geoms), 3]`: what `task.build_state` receives as `contact_forces`."""
        return self.contact_forces(data, self.geom_members(task.contact_geoms))

    def contact_forces(self, data: mjx.Data, members: np.ndarray) -> jnp.ndarray:
        """`[..., n, 3]`: the net contact force on each of n sets of geoms (`members`, from `geom_members`), world
        frame, in N (from the last step's constraint solve), for data with any leading batch axes (all of the
        simulator's worlds, for Warp). Supports the pyramidal friction cone with condim 3, as envcoder's models."""
        if self.mj_model.opt.cone != mujoco.mjtCone.mjCONE_PYRAMIDAL or np.any(self.mj_model.pair_dim != 3):
            raise NotImplementedError(f"{self.model_file.name}: contact forces need cone='pyramidal' and condim 3")
        lead, n = data.qpos.shape[:-1], members.shape[1]
        if not n:
            return jnp.zeros(lead + (0, 3))
        if self.physics == "jax":
            per_env = functools.partial(self._contact_forces_one, members=members)
            for _ in lead:
                per_env = jax.vmap(per_env)
            return per_env(data)
        impl = data._impl
        worlds = math.prod(lead)
        # Warp's contact list holds the contacts of all worlds; a condim-3 pyramid has 4 rows per contact.
        index = jnp.arange(impl.contact__geom.shape[0])
        world = jnp.clip(impl.contact__worldid, 0, worlds - 1)
        rows = impl.contact__efc_address[:, :4]
        valid = (index < impl.nacon[0]) & (rows[:, 0] >= 0)
        efc_force = impl.efc__force.reshape(worlds, -1)
        pyramid = jnp.where(valid[:, None], efc_force[world[:, None], jnp.maximum(rows, 0)], 0.0)
        world_force = self._pyramid_to_world(pyramid, impl.contact__friction, impl.contact__frame)
        per_geom = self._per_geom(world_force, impl.contact__geom, members)  # [contacts, n, 3]
        forces = jax.ops.segment_sum(per_geom, world, num_segments=worlds)
        return forces.reshape(lead + (n, 3))

    def _contact_forces_one(self, data: mjx.Data, members: np.ndarray) -> jnp.ndarray:
        """`[n, 3]` for one environment of the JAX engine (its own contact list)."""
        contact = data._impl.contact
        rows = contact.efc_address[:, None] + jnp.arange(4)
        pyramid = jnp.where(contact.efc_address[:, None] >= 0, data._impl.efc_force[jnp.maximum(rows, 0)], 0.0)
        world_force = self._pyramid_to_world(pyramid, contact.friction, contact.frame)
        return self._per_geom(world_force, contact.geom, members).sum(axis=0)

    @staticmethod
    def _pyramid_to_world(pyramid, friction, frame):
        """`[contacts, 3]` world-frame force on each contact's geom2 from its 4 pyramid-row forces."""
        normal = pyramid.sum(axis=1)
        tangent1 = friction[:, 0] * (pyramid[:, 0] - pyramid[:, 1])
        tangent2 = friction[:, 1] * (pyramid[:, 2] - pyramid[:, 3])
        return jnp.einsum("ci,cij->cj", jnp.stack([normal, tangent1, tangent2], axis=1), frame.reshape(-1, 3, 3))

    @staticmethod
    def _per_geom(world_force, geoms, members):
        """`[contacts, n, 3]`: each contact pushes geom2's sets by its force and geom1's by the opposite."""
        members = jnp.asarray(members, world_force.dtype)
        sign = members[geoms[:, 1]] - members[geoms[:, 0]]
        return sign[:, :, None] * world_force[:, None, :]

    def compact(self, data: mjx.Data) -> PhysicsState | mjx.Data:
        """What an environment keeps between control steps of its data after a step (any leading axes): its
        `PhysicsState` (JAX engine), or the data itself (Warp, whose contact list holds all worlds together)."""
        if self.physics != "jax":
            return data
        return PhysicsState(*(getattr(data, name) for name in STEP_INPUTS))

    def expand(self, state: PhysicsState | mjx.Data) -> mjx.Data:
        """MJX data of a `compact` state (any leading axes; data as it is): the state's fields, and the model's
        initial values for the derived ones, which the next physics step computes before it reads them. Inside a
        compiled program the initial values are broadcasts that XLA drops, not arrays of every environment."""
        if not isinstance(state, PhysicsState):
            return state
        return self.broadcast(self._data0, state.qpos.shape[:-1]).replace(**state._asdict())

    def select(self, mask: jnp.ndarray, a: mjx.Data, b: mjx.Data) -> mjx.Data:
        """Per environment, the state of `a` where `mask` (the data's leading axes) else `b`'s (both MJX data, or
        both `PhysicsState`s): the fields a physics step starts from (`STEP_INPUTS`). The other fields are `b`'s:
        derived quantities, which every physics step computes anew before it reads them, and Warp's arrays that
        hold all worlds together (its contact list). Selecting only the state keeps a rollout from copying every
        derived array of every environment at every step."""
        def where(path, x, y):
            if path[0].name not in STEP_INPUTS:
                return y
            return jnp.where(mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim)), x, y)
        return jax.tree_util.tree_map_with_path(where, a, b)

    def broadcast(self, data: mjx.Data, shape: tuple[int, ...]) -> mjx.Data:
        """One environment's data repeated over leading axes `shape` (Warp's all-world arrays as they are)."""
        return jax.tree.map(lambda x, per_world: jnp.broadcast_to(x, shape + x.shape) if per_world else x, data,
                            self._per_world)

    @functools.cached_property
    def _per_world(self):
        """A pytree like the data: True for the arrays each environment has its own of."""
        if self.physics == "jax":
            return jax.tree.map(lambda _: True, self._data0)
        batch = mjx_warp.types._BATCH_DIM["Data"]  # which Warp arrays have a world axis
        return jax.tree_util.tree_map_with_path(
            lambda path, _: batch.get(str(getattr(path[-1], "name", "")), True), self._data0)

    def reset(self, qpos: jnp.ndarray, qvel: jnp.ndarray, physics: dict | None = None) -> mjx.Data:
        """Physics data at `qpos [nq]`, `qvel [nv]`, with derived quantities (positions, contacts) computed;
        `physics`: this environment's randomized fields (`envcoder.sim.randomization.FIELDS`), if any."""
        data = self._data0.replace(qpos=qpos, qvel=qvel)
        return mjx.forward(self.model_for(physics), data)

    def place(self, qpos: jnp.ndarray, qvel: jnp.ndarray) -> mjx.Data:
        """Physics data at `qpos [..., nq]`, `qvel [..., nv]` (any leading axes), derived quantities not computed:
        the next `physics_step` computes them from these, as `reset` would. What the learner resets environments
        with: a forward pass of its own would add a second copy of MJX's pipeline to the compiled program (a
        quarter of the training iteration's kernels)."""
        return self.broadcast(self._data0, qpos.shape[:-1]).replace(qpos=qpos, qvel=qvel)

    def mujoco_data(self, qpos, qvel) -> list[mujoco.MjData]:
        """MuJoCo C's data of each environment at `qpos [E, nq]`, `qvel [E, nv]`, forward-computed (what `reset`
        computes, in float64 on the host): the sandbox's sample rollout runs on these, with no MJX program to
        compile (`envcoder.candidates.validate.rollout_states`)."""
        datas = []
        for q, v in zip(np.asarray(qpos, np.float64), np.asarray(qvel, np.float64)):
            data = mujoco.MjData(self.mj_model)
            data.qpos[:], data.qvel[:] = q, v
            mujoco.mj_forward(self.mj_model, data)
            datas.append(data)
        return datas

    def mujoco_step(self, datas: Sequence[mujoco.MjData], ctrl) -> None:
        """One MuJoCo C physics step of each environment's data, in place, with its row of `ctrl [E, nu]`."""
        for data, row in zip(datas, np.asarray(ctrl, np.float64)):
            data.ctrl[:] = row
            mujoco.mj_step(self.mj_model, data)

    def mujoco_state(self, datas: Sequence[mujoco.MjData], members: np.ndarray) -> tuple[PhysicsState, np.ndarray]:
        """MuJoCo C's data of environments as what training keeps of MJX's, stacked `[E, ...]` on the host: their
        `PhysicsState` (float32, as MJX's) and the contact forces on the sets of geoms `members` (`contact_forces`'
        formula on the constraint forces of C's last solve, `[E, n, 3]`). No MJX data is made: `mjx.put_data` of each
        environment at each physics step was most of the sandbox's sample rollout (a worker's start)."""
        if self.mj_model.opt.cone != mujoco.mjtCone.mjCONE_PYRAMIDAL or np.any(self.mj_model.pair_dim != 3):
            raise NotImplementedError(f"{self.model_file.name}: contact forces need cone='pyramidal' and condim 3")

        def field(name):
            values = np.stack([np.asarray(getattr(d, name)) for d in datas])
            return values.astype(np.float32) if values.dtype == np.float64 else values
        state = PhysicsState(*(field(name) for name in STEP_INPUTS))
        forces = np.zeros((len(datas), members.shape[1], 3))
        for env, d in enumerate(datas):
            contact = d.contact
            if not d.ncon or not members.shape[1]:
                continue
            rows = contact.efc_address[:, None] + np.arange(4)
            pyramid = np.where(contact.efc_address[:, None] >= 0, d.efc_force[np.maximum(rows, 0)], 0.0)
            normal = pyramid.sum(axis=1)
            tangent1 = contact.friction[:, 0] * (pyramid[:, 0] - pyramid[:, 1])
            tangent2 = contact.friction[:, 1] * (pyramid[:, 2] - pyramid[:, 3])
            world = np.einsum("ci,cij->cj", np.stack([normal, tangent1, tangent2], axis=1),
                              contact.frame.reshape(-1, 3, 3))
            sign = members[contact.geom[:, 1]].astype(float) - members[contact.geom[:, 0]]
            forces[env] = (sign[:, :, None] * world[:, None, :]).sum(axis=0)
        return state, forces.astype(np.float32)

    def physics_step(self, data: mjx.Data, ctrl: jnp.ndarray, physics: dict | None = None) -> mjx.Data:
        """Advance one physics step with `ctrl [nu]` (clipped to the actuators' ranges); `data`: MJX data or a
        `PhysicsState`."""
        return mjx.step(self.model_for(physics), self.expand(data).replace(ctrl=self.clip_ctrl(ctrl)))

    def world_step(self, data: mjx.Data, ctrl: jnp.ndarray, physics: dict | None = None) -> mjx.Data:
        """`physics_step` of one world, as rollouts call it (under `vmap`). Waits for a trace ahead in progress,
        whose trace it then reuses."""
        with self._tracing_ahead:
            pass
        return self._world_step(data, ctrl, physics)

    def trace_ahead(self, worlds: int | None = None, wanted: Callable[[], bool] = lambda: True) -> None:
        """Trace `world_step` as a rollout calls it (one world's MJX data and controls, no randomized fields) in a
        thread of its own, so that a rollout traced later finds it done: what a run does while the sandbox
        validates. With `worlds`, also under the `vmap` over that many environments that a rollout of as many
        puts it in: JAX keeps that batched trace too, and a rollout of another size batches the per-world trace
        itself. Each trace starts only while `wanted()` (a run whose programs come from the trace cache traces
        nothing). A failure here is left for the rollout's own trace to raise."""
        if self.physics != "jax":
            return
        self._tracing_ahead.acquire()

        def trace():
            try:
                data = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), self._data0)
                ctrl = jax.ShapeDtypeStruct((self.mj_model.nu,), jnp.float32)
                if wanted():
                    self._world_step.trace(data, ctrl, {})
                if worlds and wanted():
                    jax.eval_shape(jax.vmap(self._world_step), *jax.tree.map(
                        lambda x: jax.ShapeDtypeStruct((worlds,) + x.shape, x.dtype), (data, ctrl)), {})
            except Exception:  # noqa: BLE001, S110 - the rollout traces it again and raises there
                pass
            finally:
                self._tracing_ahead.release()

        threading.Thread(target=trace, name="envcoder-trace-ahead", daemon=True).start()

    def model_for(self, physics: dict | None):
        """The model of one environment whose randomized fields are `physics` (None or {}: the task's model)."""
        if not physics:
            return self.model
        if self.physics != "jax":
            raise ValueError("physics randomization (sample_physics) needs --physics jax")
        return self.randomizer.apply(self.model, physics)

    def step(self, data: mjx.Data, ctrl: jnp.ndarray) -> mjx.Data:
        """Advance one control step: hold `ctrl [nu]` for `substeps` physics steps."""
        return jax.lax.fori_loop(0, self.substeps, lambda _, d: self.physics_step(d, ctrl), data)
