"""How a grouped learner's functions become programs: jitted with envcoder's XLA options, their traces kept in the
trace cache under a key of what they depend on, and the final evaluation compiled in the background while the
run trains. `envcoder.rl.learner.GroupedLearner` is a `LearnerPrograms`; the functions are its own (`functions`).
"""

from __future__ import annotations

import concurrent.futures
import functools

import jax

from envcoder.candidates import Candidate
from envcoder.compile_cache import CachedJit, fingerprint, trace_cache_dir, xla_options
from envcoder.rl.staging import in_thread
from envcoder.rl.state import TrainState


EVALUATION_ENVS = 262_144
"""The most environments a device steps at once in the final evaluation by default: its memory (Ant: ~18 KiB an
environment, the physics step's temporaries) and time (one full episode each) stay those of 1,024 groups × 256 envs
however many groups a device trains (8,192 Ant groups × 256 envs needed 36 GiB to evaluate every environment)."""


def evaluation_envs_per_group(asked: int | None, groups: int, envs_per_candidate: int, physics: str) -> int:
    """Environments per group of the final evaluation, for `groups` groups on a device: `asked` (None: the training
    environments, at most `EVALUATION_ENVS` over the device's groups), never more than a group trains; MuJoCo Warp
    steps every training environment (its worlds are fixed)."""
    if physics == "warp":
        return envs_per_candidate
    if asked is not None:
        if asked < 1:
            raise ValueError(f"--evaluation-envs {asked}: give 1 or more environments per group")
        return min(asked, envs_per_candidate)
    return max(1, min(envs_per_candidate, EVALUATION_ENVS // groups))


class LearnerPrograms:
    """The programs of a `GroupedLearner` (which sets the attributes these read: its plan, task, simulator, settings,
    groups, sharding and jitted functions)."""

    def programs(self) -> dict:
        """The learner's jitted programs on one device: "init" (`keys [G, 2]` -> `TrainState`), "collect" and
        "learn" (the iteration's two stages) and "evaluate"; with the trace cache on, each says whether its trace
        was `loaded` from the cache or `stored` in it."""
        return {"init": self._init_program, "collect": self.iteration.collect, "learn": self.iteration.learn,
                "evaluate": self.evaluate}

    def functions(self) -> dict:
        """The plain functions behind the programs, to lower for shapes or to jit with other options: "init"
        (`keys [G, 2]`), "iteration" (the whole iteration as one function, as a sharded run compiles it),
        "collect" (`ts` -> what "learn" takes with `ts`), "learn" (`(ts, collected)`), "evaluate" (`ts`)."""
        return {"init": self._init, "iteration": self._iteration, "collect": self._collect, "learn": self._learn,
                "evaluate": self._evaluate}

    def traces(self) -> dict:
        """`{"traced", "loaded"}`: how many of the programs' traces were traced and written to the trace cache, and
        how many were loaded from it (`{}` for a sharded run: its programs are traced every time)."""
        if self.sharding is not None:
            return {}
        programs = self.programs().values()
        return {"traced": sum(getattr(p, "stored", 0) for p in programs),
                "loaded": sum(getattr(p, "loaded", 0) for p in programs)}

    def _jit(self, function, name: str, donate_argnums=()):
        """`jax.jit(function)` with envcoder's XLA options (`xla_options`); with the trace cache on
        (`envcoder.compile_cache`) and JAX physics, one whose traced program a later run of the same job loads
        instead of tracing (MuJoCo Warp's kernels do not serialize)."""
        if trace_cache_dir() is None or self.physics != "jax":
            return jax.jit(function, donate_argnums=donate_argnums, compiler_options=xla_options())
        return CachedJit(function, f"{self._trace_key}:{name}", donate_argnums, xla_options())

    @functools.cached_property
    def _trace_key(self) -> str:
        """What this learner's traces depend on besides envcoder's code and the argument shapes: the algorithm,
        the task (its functions and model), the simulator, the function classes (their code, groups and constants'
        names: the constants' values are inputs), each group's sizes, the settings. Not the candidates' names: a
        search's next generation that changes only constants loads the traces of the one before."""
        functions = sorted({(c.key, fingerprint(c.function) if c.key.endswith(":default") else "")
                            for classes in self.plan.classes.values() for c in classes})
        return repr((fingerprint(type(self)), fingerprint(self.task), self.fitness_name, fingerprint(type(self.sim)),
                     fingerprint(self.sim.model_file), self.physics, self.sim.substeps, self.num_envs,
                     self.plan.signature(), functions, [_sizes(g.candidate) for g in self.groups], repr(self.config)))

    @property
    def compiles_evaluation_early(self) -> bool:
        """Whether `evaluate` may compile while the run trains (`compile_evaluation`): not where a device steps more
        environments than `EVALUATION_ENVS`. XLA's compile takes device memory for its autotuning, and where the
        iteration's buffers fill most of a device, those allocations split its pool: 8,192 Ant groups × 256 envs on
        an 80 GB H100 then found no block of 34.6 GiB for the second iteration with 48 GiB free (it compiles after
        training there, and the run fits: docs/benchmarks/multigpu.md)."""
        return self.rows * self.num_envs <= EVALUATION_ENVS

    def compile_evaluation(self, train_state: TrainState) -> concurrent.futures.Future:
        """Compile `evaluate` for `train_state`'s shapes in a background thread, to overlap with training (start
        it once the iteration is compiled); the future gives the compiled function. The checkpoints' device copy
        (`snapshot`) is compiled first in the same thread: compiled at the first checkpoint, it stalled training
        for about 0.5 s there (H100, README job)."""
        shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), train_state)

        def compile_():
            try:
                self.compiled_device_copy = self.device_copy.lower(shapes).compile()
            except Exception:  # noqa: BLE001 - `snapshot` compiles it where it is used, as before
                pass
            return self.evaluate.lower(shapes).compile()
        # A daemon thread: a run that fails before it evaluates exits without waiting for this compile.
        return in_thread(compile_, "envcoder-compile-evaluation")


def _sizes(candidate: Candidate) -> tuple:
    """What validation found of a candidate that its traces depend on."""
    return (candidate.obs_dim, candidate.action_dim, candidate.reward_components, candidate.critic_obs_dim,
            candidate.constants_as_data)
