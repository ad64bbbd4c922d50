"""Trains the same Cartpole groups on one device and sharded over four (CPU devices forced by XLA_FLAGS, which
must be set before JAX starts: tests/rl/test_sharding.py runs this file in its own process).

    python tests/sharded_run.py OUT.npz

Groups: seven candidates that differ in every shaping type the trainer dispatches (reward, observation and action
sizes, reset distribution, two variants of a reward-weight sweep) or turn NaN, × two seeds = 14 groups; over five
devices three per device and one inert row. Written: for each run, every leaf of the train state after ITERATIONS
iterations (in plan order), the metrics of every iteration and the evaluation; and two checkpoint hops: ITERATIONS
- 1 iterations on one device count, moved through a checkpoint file to the other and continued.
"""

import os
import sys

DEVICES = 5
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES}"
os.environ["JAX_PLATFORMS"] = "cpu"

import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

from envcoder.rl.ppo.config import PPOConfig  # noqa: E402
from envcoder.rl.ppo.learner import GroupedPPO  # noqa: E402
from envcoder.runs.checkpoint import load_train_state, save_train_state  # noqa: E402
from envcoder.runs.pbt import Population, PopulationSettings  # noqa: E402
from envcoder.candidates import expand_sweeps, load_candidate  # noqa: E402
from envcoder.candidates.validate import sample_state, validate_candidate  # noqa: E402
from envcoder.sim import Simulator  # noqa: E402
from envcoder.tasks import get_task  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS = 2
SWEEP = '''
import jax.numpy as jnp
WEIGHT = 1.0
PARAMS = {"WEIGHT": [0.5, 2.0]}


def compute_reward(state):
    return WEIGHT - jnp.abs(state["dof_pos"][:, 1])
'''


def candidates(scratch: Path):
    (scratch / "weight_sweep.py").write_text(SWEEP)
    examples = ROOT / "src" / "envcoder" / "examples" / "cartpole"
    files = [examples / "good_upright.py", examples / "alive_bonus.py",
             ROOT / "tests/candidates/shaping/two_actions.py", ROOT / "tests/candidates/shaping/nan_later.py",
             ROOT / "tests/candidates/shaping/wide_reset.py", scratch / "weight_sweep.py"]
    apis = ("compute_reward", "compute_observation", "compute_torque", "sample_initial_state")
    return expand_sweeps([load_candidate(f, apis) for f in files])


def main(out: str) -> None:
    jax.config.update("jax_compilation_cache_dir", str(ROOT / ".jax_cache"))
    task = get_task("Cartpole")
    sim = Simulator(task.model_file, task.substeps)
    state = sample_state(task, sim)
    with tempfile.TemporaryDirectory() as scratch:
        found = candidates(Path(scratch))
        found = [validate_candidate(task, sim, c, state) for c in found]
        config = PPOConfig.for_task(task, horizon_length=8, mini_epochs=2, units=(16, 16))
        trainers = {n: GroupedPPO(task, found, config, 8, (0, 1), sim, devices=n) for n in (1, DEVICES)}
        arrays = {"labels": np.array(trainers[1].labels), "order": trainers[DEVICES].layout.order}
        saved = {}
        for n, trainer in trainers.items():
            ts = trainer.init()
            for i in range(ITERATIONS):
                if i == ITERATIONS - 1:
                    saved[n] = trainer.to_host(ts)
                ts, metrics = trainer.iteration(ts)
                arrays.update({f"metrics_{n}_{i}/{k}": np.asarray(v) for k, v in metrics.items()})
            arrays.update({f"state_{n}/{i}": x for i, x in enumerate(jax.tree.leaves(trainer.to_host(ts)))})
            arrays.update({f"eval_{n}/{k}": np.asarray(v) for k, v in jax.device_get(trainer.evaluate(ts)).items()})
            # A population step (copies of one sweep's variants take over each other's state), in either layout.
            population = Population(PopulationSettings(interval=1, seed=3), trainer.plan, trainer.labels, True,
                                    trainer.sharding)
            fitness = np.linspace(0.0, 1.0, len(trainer.labels))
            ts = population.step(ts, ITERATIONS, [(ITERATIONS - 1, {"task_fitness": fitness})], fitness)
            arrays.update({f"population_{n}/{i}": x for i, x in enumerate(jax.tree.leaves(trainer.to_host(ts)))})
            arrays[f"lineage_{n}"] = np.array(repr(population.lineage))
        for source, target in ((DEVICES, 1), (1, DEVICES)):  # through a checkpoint file, as --resume does
            directory = Path(scratch) / f"hop_{source}_{target}"
            directory.mkdir()
            save_train_state(directory, saved[source], {"iteration": ITERATIONS - 1})
            host, _ = load_train_state(directory, trainers[target].host_shapes(trainers[target].init()))
            ts, _ = trainers[target].iteration(trainers[target].to_device(host))
            arrays.update({f"hop_{source}_{target}/{i}": x
                           for i, x in enumerate(jax.tree.leaves(trainers[target].to_host(ts)))})
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(sys.argv[1])
