"""The group axis over several devices: every device steps and trains its own block of groups.

A learner's programs run under `jax.shard_map` over a one-axis mesh (`GROUP_AXIS`). Groups are dealt to devices
round-robin (`GroupPlan.layout`), so every device gets its share of each candidate's code; a group count that does
not divide evenly is padded with inert groups, which never train and are never reported. Inside the map each
device sees a learner whose per-group constants and plan are its own rows (`GroupedLearner.on_device`). Only
metrics and evaluation results cross devices: they are gathered into the plan's group order (`canonical`).

The train state is held in the layout's row order; `to_host` and `to_device` convert it from and to the plan's
order, which is the same for any device count, so checkpoints move between device counts.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from envcoder.env.grouping import GroupPlan

GROUP_AXIS = "groups"
"""The mesh axis the group axis is sharded over."""


def read(tree):
    """`tree` as numpy arrays on this host; in a multi-host run a collective that every process must make."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    from jax.experimental import multihost_utils
    return multihost_utils.process_allgather(tree, tiled=True)


def join_processes(coordinator: str | None, num_processes: int | None, process_id: int | None) -> None:
    """Join a multi-host run (`jax.distributed.initialize`) when a coordinator (`HOST:PORT`, or "auto" under SLURM
    or Open MPI) is given; a `ValueError` names what is missing or wrong."""
    if coordinator is None:
        if num_processes is not None or process_id is not None:
            raise ValueError("--num-processes and --process-id belong to a multi-host run: give --coordinator too")
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU processes (tests) talk through gloo
    if coordinator == "auto":
        jax.distributed.initialize()
    else:
        if num_processes is None or process_id is None:
            raise ValueError("--coordinator HOST:PORT needs --num-processes and --process-id (or --coordinator auto "
                             "under SLURM or Open MPI)")
        if not 0 <= process_id < num_processes:
            raise ValueError(f"--process-id {process_id} is not between 0 and --num-processes - 1 "
                             f"({num_processes - 1})")
        jax.distributed.initialize(coordinator, num_processes=num_processes, process_id=process_id)
    # What is not sharded over the run's mesh (the model, validation samples) stays on this process's devices.
    jax.config.update("jax_default_device", jax.local_devices()[0])


def choose_devices(devices: int | None, physics: str | None) -> list:
    """The first `devices` devices JAX sees (None: all), checked against what a run can use."""
    visible = jax.devices()
    devices = len(visible) if devices is None else devices
    if not 1 <= devices <= len(visible):
        raise ValueError(f"--devices {devices}: JAX sees {len(visible)} device(s) here ({visible[0].device_kind}); "
                         f"pass a number from 1 to {len(visible)}")
    if jax.process_count() > 1 and devices != len(visible):
        raise ValueError(f"--devices {devices}: a multi-host run uses every device of every process "
                         f"({len(visible)}); leave --devices out")
    if devices > 1 and physics == "warp":
        raise ValueError(f"--physics warp runs on one device: pass --devices 1, or --physics jax to shard the "
                         f"groups over {devices} devices")
    return visible[:devices]


def use_gspmd() -> None:
    """Partition the sharded programs with XLA's GSPMD instead of Shardy, JAX's default, for the rest of the process.

    Shardy crashes XLA's GPU compiler (a segmentation fault, no message) on any program that runs MJX's physics step
    under `shard_map` over two or more GPUs (JAX 0.11.2); GSPMD compiles the same programs.
    `benchmarks/multigpu_probe.py` is the smallest program that shows it (docs/benchmarks/multigpu.md).
    Every group's rows stay on their device, so the partitioner has nothing to decide in these programs: the
    choice changes no result (the CPU's devices give the same numbers with either)."""
    jax.config.update("jax_use_shardy_partitioner", False)


class GroupSharding:
    """Where every group lives on the mesh of `devices`, and each device's rows of the per-group constants."""

    def __init__(self, plan: GroupPlan, devices: list, constants: dict[str, np.ndarray]):
        """`constants`: per-group arrays `[G, ...]` that traced functions read (each device gets its rows)."""
        if len(devices) > 1:
            use_gspmd()
        self.devices = devices
        self.layout = plan.layout(len(devices))
        self.mesh = jax.sharding.Mesh(np.array(devices), (GROUP_AXIS,))
        self.rows = self.layout.per_device  # groups a traced function sees
        rows = np.maximum(self.layout.order, 0)
        constants = {k: v[rows] for k, v in constants.items()}
        constants["inert"] = self.layout.inert
        self.local = {"plan": self.layout.local, **{
            k: v.reshape((len(devices), self.rows) + v.shape[1:]) for k, v in constants.items()}}

    def map(self, learner, method, in_specs, out_specs):
        """`method(learner_on_device, *args)` run by every device on its block of the group axis."""
        def body(*args):
            device = jax.lax.axis_index(GROUP_AXIS)
            local = jax.tree.map(lambda table: jnp.asarray(table)[device], self.local)
            return method(learner.on_device(local), *args)
        return jax.shard_map(body, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)

    def canonical(self, x, axis: int = 0):
        """Rows of a layout-ordered array in the plan's group order (inert rows dropped), on every device (so
        that every process of a multi-host run can read them)."""
        return jax.lax.with_sharding_constraint(jnp.take(x, self.layout.position, axis=axis),
                                                NamedSharding(self.mesh, PartitionSpec()))

    def put(self, x) -> jax.Array:
        """A host array of this process (every process holds all of it) laid out over the mesh: sharded on its
        leading (group) axis, or held by every device where it is a scalar."""
        sharding = NamedSharding(self.mesh, PartitionSpec() if np.ndim(x) == 0 else PartitionSpec(GROUP_AXIS))
        return jax.make_array_from_callback(np.shape(x), sharding, lambda index: np.asarray(x)[index])

    def to_host(self, host_state):
        """A host state in the layout's row order, in the plan's group order."""
        return jax.tree.map(lambda x: x if np.ndim(x) == 0 else np.take(x, self.layout.position, axis=0), host_state)

    def to_device(self, host_state):
        """A host state in the plan's group order, laid out over the mesh (inert rows are group 0's, marked
        diverged so that they never train)."""
        rows = np.maximum(self.layout.order, 0)
        state = jax.tree.map(lambda x: x if np.ndim(x) == 0 else np.take(x, rows, axis=0), host_state)
        state = state._replace(diverged_at=np.where(self.layout.inert, 0, state.diverged_at))
        return jax.tree.map(self.put, state)

    def in_plan_order(self, x: np.ndarray) -> np.ndarray:
        """A host array `[rows in layout order]` in the plan's group order."""
        return x[self.layout.position]


def reduce_groups(x, op: str, sharded: bool):
    """`all`/`any` of a `[groups]` bool over every group of the run, on every device."""
    local = jnp.all(x) if op == "all" else jnp.any(x)
    if not sharded:
        return local
    reduce = jax.lax.pmin if op == "all" else jax.lax.pmax
    return reduce(local.astype(jnp.int32), GROUP_AXIS) > 0
