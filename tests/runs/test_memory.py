"""Memory per environment held to a budget: a change that adds a per-environment (or per-group) array to the train
state fails here, before it costs candidates per GPU (`benchmarks/scaling.py memory` reports the same figures, and
XLA's plan of the iteration, on the GPU)."""

import dataclasses

import jax
import numpy as np
import pytest

from envcoder.candidates import SHAPER_TYPES, task_default_candidate
from envcoder.candidates.validate import sample_state
from envcoder.rl.ppo.config import PPOConfig
from envcoder.rl.ppo.learner import GroupedPPO
from envcoder.sim import Simulator
from envcoder.tasks import get_task

BUDGET = {"Ant": (640, 1_728_580), "Anymal": (848, 1_732_804)}
"""Per task: bytes of the train state per environment, and per group (policy, optimizer, best policy, normalizers),
as measured on 2026-11-26: per environment its physics state (`PhysicsState`, not the whole MJX data: 14,356 and
15,108 bytes until then) and the environment's buffers; per group three copies of a 300k-parameter policy. Ant's
per environment fell from 736 to 640 bytes on 2026-11-28, when its model became nv_ant.xml's (4 bodies fewer: 96
bytes of applied forces)."""


def _bytes(state) -> int:
    return sum(x.size * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(state))


@pytest.mark.parametrize("name", sorted(BUDGET))
def test_the_train_state_keeps_to_its_memory_budget(name):
    task = get_task(name)
    sim = Simulator(task.model_file, task.substeps)
    obs = jax.eval_shape(task.defaults["compute_observation"], sample_state(task, sim))
    candidate = dataclasses.replace(task_default_candidate(task, SHAPER_TYPES), obs_dim=obs.shape[1],
                                    action_dim=sim.mj_model.nu)  # validated as the sizes say
    sizes = {}
    for groups, envs in ((2, 8), (2, 16), (4, 8)):  # shapes only: nothing is compiled or run
        trainer = GroupedPPO(task, [candidate], PPOConfig.for_task(task), envs, tuple(range(groups)), sim)
        sizes[groups, envs] = _bytes(trainer.state_shapes())
    per_env = (sizes[2, 16] - sizes[2, 8]) / (2 * 8)
    per_group = (sizes[4, 8] - sizes[2, 8]) / 2 - 8 * per_env
    env_budget, group_budget = BUDGET[name]
    assert per_env <= env_budget, f"{name}: {per_env:,.0f} bytes per environment, budget {env_budget:,}"
    assert per_group <= group_budget, f"{name}: {per_group:,.0f} bytes per group, budget {group_budget:,}"
    assert per_env >= 0.9 * env_budget and per_group >= 0.9 * group_budget  # a saving: record the new budget


@pytest.mark.slow  # 25 s here
def test_a_large_run_evaluates_a_bounded_number_of_environments_and_compiles_its_evaluation_after_training(
        monkeypatch):
    """The final evaluation steps at most `EVALUATION_ENVS` environments a device (its memory and time stay those
    of 1,024 groups × 256 envs however many groups train), `--evaluation-envs` chooses another number, and a run
    past that size compiles its evaluation after training instead of beside it (the compile's allocations split
    the pool of a full GPU)."""
    from envcoder.rl import learner as programs

    assert programs.evaluation_envs_per_group(None, 8192, 256, "jax") == 32  # 8,192 Ant candidates on one GPU
    assert programs.evaluation_envs_per_group(None, 1024, 256, "jax") == 256
    assert programs.evaluation_envs_per_group(None, 60, 256, "jax") == 256  # the README's Anymal job: unchanged
    assert programs.evaluation_envs_per_group(500, 60, 256, "jax") == 256
    assert programs.evaluation_envs_per_group(None, 8192, 256, "warp") == 256  # Warp's worlds are fixed
    with pytest.raises(ValueError, match="--evaluation-envs 0"):
        programs.evaluation_envs_per_group(0, 1, 8, "jax")

    task = get_task("Cartpole")
    sim = Simulator(task.model_file, task.substeps)
    candidate = dataclasses.replace(task_default_candidate(task, SHAPER_TYPES), obs_dim=4, action_dim=1)
    config = PPOConfig.for_task(task, horizon_length=4, units=(8,))
    small = GroupedPPO(task, [candidate], config, 8, (0, 1), sim)
    assert small.evaluation_envs == 8 and small.compiles_evaluation_early
    monkeypatch.setattr(programs, "EVALUATION_ENVS", 8)  # as if 16 environments filled a device
    large = GroupedPPO(task, [candidate], config, 8, (0, 1), sim)
    assert large.evaluation_envs == 4 and not large.compiles_evaluation_early
    chosen = GroupedPPO(task, [candidate], config, 8, (0, 1), sim, evaluation_envs=3)
    out = jax.device_get(chosen.evaluate(chosen.init()))
    assert out["task_fitness"].shape == (2, 3) and np.isfinite(out["task_fitness"]).all()


def test_a_runs_memory_need_is_counted_from_the_model_and_the_network():
    """The lower bounds `check_run_fits` adds up: one MJX world's data (its arrays' bytes, as MJX makes them) and the
    policy's hidden and output layers (256·128 + 128 + 128·64 + 64 + 64·2 floats for Cartpole's one action)."""
    import mujoco
    from mujoco import mjx

    from envcoder.runs.memory import policy_bytes, world_bytes

    task = get_task("Cartpole")
    data = mjx.make_data(mujoco.MjModel.from_xml_path(str(task.model_file)))
    assert world_bytes(str(task.model_file)) == _bytes(data)
    assert policy_bytes(PPOConfig(), 1) == 4 * (256 * 128 + 128 + 128 * 64 + 64 + 64 * 2)
