"""Memory per environment held to a budget: a change that adds a per-environment (or per-group) array to the train
state fails here, before it costs candidates per GPU (`benchmarks/scaling.py memory` reports the same figures, and
XLA's plan of the iteration, on the GPU)."""

import jax
import numpy as np
import pytest

from envcoder.candidates import SHAPER_TYPES, task_default_candidate
from envcoder.candidates.validate import CandidateSpec, sample_state
from envcoder.rl.config import PPOConfig
from envcoder.rl.grouped_ppo import GroupedPPO
from envcoder.sim import Simulator
from envcoder.tasks import get_task

BUDGET = {"Ant": (736, 1_728_580), "Anymal": (848, 1_732_804)}
"""Per task: bytes of the train state per environment, and per group (policy, optimizer, best policy, normalizers),
as measured on 2026-11-26: per environment its physics state (`PhysicsState`, not the whole MJX data: 14,356 and
15,108 bytes until then) and the environment's buffers; per group three copies of a 300k-parameter policy."""


def _bytes(state) -> int:
    return sum(x.size * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(state))


@pytest.mark.parametrize("name", sorted(BUDGET))
def test_the_train_state_keeps_to_its_memory_budget(name):
    task = get_task(name)
    sim = Simulator(task.model_file, task.substeps)
    obs = jax.eval_shape(task.defaults["compute_observation"], sample_state(task, sim))
    candidate = task_default_candidate(task, SHAPER_TYPES)
    spec = {candidate.name: CandidateSpec(obs.shape[1], sim.mj_model.nu, ())}
    sizes = {}
    for groups, envs in ((2, 8), (2, 16), (4, 8)):  # shapes only: nothing is compiled or run
        trainer = GroupedPPO(task, [candidate], spec, PPOConfig.for_task(task), envs, tuple(range(groups)), sim)
        sizes[groups, envs] = _bytes(trainer.state_shapes())
    per_env = (sizes[2, 16] - sizes[2, 8]) / (2 * 8)
    per_group = (sizes[4, 8] - sizes[2, 8]) / 2 - 8 * per_env
    env_budget, group_budget = BUDGET[name]
    assert per_env <= env_budget, f"{name}: {per_env:,.0f} bytes per environment, budget {env_budget:,}"
    assert per_group <= group_budget, f"{name}: {per_group:,.0f} bytes per group, budget {group_budget:,}"
    assert per_env >= 0.9 * env_budget and per_group >= 0.9 * group_budget  # a saving: record the new budget
