"""Device and host memory: what the devices may use, hold free and have held (`available_device_bytes`,
`free_device_bytes`, `peak_device_bytes`), what a run's sizes need of it, checked before anything of that size is
allocated (`check_run_fits`), and what to say and suspect when training runs out of it anyway
(`out_of_memory_message`, `memory_suspects`).

A run holds, for each group (a candidate and a seed), its environments' simulator states and the rollout of one
training iteration, and its policy with the optimizer's moments; its final evaluation, the states of its evaluation
environments. The figures here are lower bounds (one MJX world's `Data`, the rollout's actions, log-probabilities,
values, rewards and flags, the MLP's weights from its hidden widths alone): a run refused by them cannot fit, and a
run they pass may still run out, which training then reports (`envcoder.runs.evaluation.OutOfGPUMemoryError`).

On a GPU the states live in the device's memory and the per-group records (seeds, keys, results, the host copy of
each policy that a checkpoint writes) in the host's; on the CPU both are the host's, whose available memory
(`/proc/meminfo`'s MemAvailable) is what a run may take without the kernel's out-of-memory killer ending it (and
the machine's other work with it)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

ROLLOUT_FLOATS_PER_ACTION = 2
"""Floats per action dimension a rollout keeps per step: the action and its mean."""

ROLLOUT_FLOATS = 6
"""Floats per step a rollout keeps besides the actions: log-probability, value, reward, done, truncation, return."""

OPTIMIZER_COPIES = 4
"""Copies of a policy's weights a group holds while it trains: the weights, their gradient, Adam's two moments."""

HOST_BYTES_PER_GROUP = 4096
"""Host memory per group beyond its policy's host copy: its seed, keys, metrics and results records."""


class RunTooLargeError(ValueError):
    """A run's sizes need more memory than the machine has; the message says what would fit."""


@functools.lru_cache(maxsize=None)
def world_bytes(model_file: str) -> int:
    """The bytes of one MJX world's `Data` for the model in `model_file` (its shapes only: nothing is allocated)."""
    import jax
    import mujoco
    from mujoco import mjx

    model = mjx.put_model(mujoco.MjModel.from_xml_path(str(model_file)))
    return sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(jax.eval_shape(mjx.make_data, model)))


def policy_bytes(config, actions: int) -> int:
    """A lower bound on the bytes of one group's policy: its hidden layers' weights and the output layer (the input
    layer, whose width is the observation's, left out)."""
    units = tuple(config.units)
    weights = sum(a * b + b for a, b in zip(units, units[1:])) + (units[-1] * (actions + 1) if units else 0)
    return 4 * weights


def available_host_bytes() -> int | None:
    """The host memory a process may take now: `/proc/meminfo`'s MemAvailable; else the physical memory; None where
    neither is known."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return None


def available_device_bytes(devices: int | None = None) -> tuple[int | None, str]:
    """`(bytes, what)`: the memory JAX may use on the devices a run trains on (`devices`: how many; None: all local
    ones), and what it is ("GPU memory"; "host memory" on the CPU: the host's available memory)."""
    import jax

    local = jax.local_devices()
    if local[0].platform == "cpu":
        return available_host_bytes(), "host memory"
    each = (local[0].memory_stats() or {}).get("bytes_limit")
    count = min(devices or len(local), len(local))
    return (each * count if each else None), f"{local[0].platform.upper()} memory"


def free_device_bytes(device) -> int | None:
    """The bytes still free in JAX's pool on `device`; None on a CPU or where the device does not say."""
    stats = device.memory_stats() if device.platform != "cpu" else None
    return stats["bytes_limit"] - stats.get("bytes_in_use", 0) if stats and "bytes_limit" in stats else None


def peak_device_bytes(devices) -> int | None:
    """The most memory any of `devices` has held so far; None where one does not say (a CPU)."""
    peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use") for d in devices]
    return max(peaks) if peaks and None not in peaks else None


def _gib(count: float) -> str:
    """`count` bytes in GiB, MiB or KiB, whichever reads with a whole part."""
    for power, unit in ((30, "GiB"), (20, "MiB")):
        if count >= 2**power:
            return f"{count / 2**power:,.1f} {unit}"
    return f"{count / 2**10:,.1f} KiB"


def check_run_fits(task, config, candidates: int, seeds: int, envs: int, evaluation_envs: int | None = None,
                   devices: int | None = None, what: str = "") -> None:
    """Raise `RunTooLargeError` where `candidates` × `seeds` groups of `envs` environments each (and of
    `evaluation_envs` in the final evaluation; None: `envs`) cannot fit in the device's or the host's memory: one
    line with the sizes, the need and what would fit (the most seeds at these environments, the most environments
    per candidate at these seeds). `what`: what the sizes are, for the message ("the final evaluation's")."""
    groups = candidates * seeds
    if groups <= 0:
        return
    world = world_bytes(str(task.model_file))
    horizon = int(config.horizon_length)
    actions = task.num_actions or 1
    per_env = world + 4 * horizon * (ROLLOUT_FLOATS_PER_ACTION * actions + ROLLOUT_FLOATS)
    policy = policy_bytes(config, actions)
    per_group = OPTIMIZER_COPIES * policy
    eval_envs = max(evaluation_envs or envs, 1)
    device_per_group = max(envs * per_env + per_group, eval_envs * world + policy)
    host_per_group = HOST_BYTES_PER_GROUP + policy
    device, device_name = available_device_bytes(devices)
    host = available_host_bytes()
    on_cpu = device_name == "host memory"
    needs = [(device_per_group + (host_per_group if on_cpu else 0), device, device_name, True)]
    if not on_cpu:
        needs.append((host_per_group, host, "host memory", False))
    for per, have, name, holds_states in needs:
        need = per * groups
        if have is None or need <= have:
            continue
        fit_seeds = have // (per * candidates)
        other = host_per_group if on_cpu else 0
        env_share = (have / groups - per_group - other) / per_env if holds_states else None
        sizes = (f"{candidates:,} candidate(s) × {seeds:,} seed(s) × {envs:,} environments"
                 + (f" ({eval_envs:,} in the final evaluation)" if eval_envs != envs else ""))
        ways = []
        if fit_seeds >= 1:
            ways.append(f"at most {fit_seeds:,} seed(s) fit at {envs:,} environments per candidate")
        if env_share is not None and env_share >= 1:
            ways.append(f"at most {int(env_share):,} environments per candidate at {seeds:,} seed(s)")
        if not ways:
            ways.append(f"not even one seed fits: run fewer than {candidates:,} candidates at once")
        raise RunTooLargeError(
            f"{what + ' ' if what else ''}{sizes} need at least {_gib(need)} of {name} "
            f"({_gib(per)} a group: states, rollouts and policies), and {_gib(have)} is available: "
            + "; or ".join(ways))


OOM_SUSPECT_SHARE = 0.05
"""A candidate whose programs need this share of the device's memory at the run's size is a suspect when it runs
out (`memory_suspects`); with none, the run's size is the cause."""


def memory_suspects(candidates, groups: int, envs: int) -> list[str]:
    """The candidates whose programs need at least `OOM_SUSPECT_SHARE` of the device's memory at `groups` groups of
    `envs` environments (`envcoder.candidates.costs.memory_need`): what the device running out in training
    suspects."""
    from envcoder.candidates.costs import memory_need

    memory, _ = available_device_bytes(1)
    return [c.name for c in candidates if memory and memory_need(c, groups, envs) >= OOM_SUSPECT_SHARE * memory]


def out_of_memory_message(err: BaseException, groups: int, envs: int, run: Path, stage: str) -> str:
    """What to do when the device runs out of memory while `stage` (what the run was doing), training `groups`
    policies × `envs` environments into the run directory `run`: the sizes involved and the settings that matter."""
    import jax

    reason = (str(err).split("\n")[0] or type(err).__name__).removeprefix("RESOURCE_EXHAUSTED: ")
    limit, _ = available_device_bytes(1) if jax.default_backend() != "cpu" else (None, "")
    limit_text = f" of the {limit / 2**30:.1f} GiB JAX may use" if limit else ""
    hints = ["train fewer environments at once: a smaller --envs-per-candidate, fewer --seeds, or the candidates "
             "split over several runs"]
    try:
        fraction = float(os.environ.get("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.75"))
    except ValueError:
        fraction = 0.0
    if fraction < 0.95:
        hints.append("let JAX use more of the GPU: XLA_PYTHON_CLIENT_MEM_FRACTION=0.95 (JAX's default is 0.75)")
    if os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "").lower() in ("false", "0"):
        hints.append("unset XLA_PYTHON_CLIENT_PREALLOCATE=false: growing the pool piecemeal fragments it, and one "
                     "iteration needs its temporaries in one block (2048 Anymal candidates × 256 envs failed that "
                     "way at 49 GiB of need on an 80 GB GPU)")
    if "evaluation" in stage:
        hints.insert(0, "evaluate fewer episodes at once: a smaller --evaluation-envs")
    device = "GPU" if jax.default_backend() == "gpu" else jax.default_backend().upper()
    return (f"out of {device} memory{limit_text} while {stage}, {groups} policies × {envs} "
            f"envs ({groups * envs} environments): {reason}. To fix: " + "; or ".join(hints) +
            f". {run} keeps its records and last checkpoint: after changing only XLA_PYTHON_CLIENT_* "
            f"settings, --resume continues it.")
