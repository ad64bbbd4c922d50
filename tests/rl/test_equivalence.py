"""Independence and equivalence: a candidate trained among others equals the candidate trained alone."""

import jax
import numpy as np
import pytest

import tiny
from conftest import BUNDLED
from envcoder.candidates import load_candidate
from envcoder.env.grouping import group_key
from envcoder.candidates.validate import validate_candidate

ITERATIONS = 2


@pytest.fixture(scope="module")
def runs():
    """alive_bonus alone; the three with two seeds each (alive_bonus#0 at another place of the batch than alone, and
    beside its own seed 1); the same six groups updated two at a time."""
    task, sim, state = tiny.cartpole()
    names = ["good_upright", "alive_bonus", "poor_spin"]
    candidates = {n: load_candidate(BUNDLED / "cartpole" / f"{n}.py", ("compute_reward",)) for n in names}
    candidates = {n: validate_candidate(task, sim, c, state) for n, c in candidates.items()}
    config = tiny.ppo(task)

    def train(selected, seeds=(0,), config=config):
        run = tiny.train(task, [candidates[n] for n in selected], ITERATIONS, config, sim=sim, seeds=seeds)
        return run.trainer, run.ts, run.history

    # two groups' updates at a time: three blocks of two
    return {"alone": train(["alive_bonus"]), "grouped": train(names, seeds=(0, 1)),
            "blocks": train(names, seeds=(0, 1), config=config.replace(update_block_envs=16))}


def group_slice(run, label):
    trainer, ts, history = run
    g = trainer.labels.index(label)
    return g, jax.tree.map(lambda x: x[g], ts.params), [{k: v[g] for k, v in m.items()} for m in history]


def test_grouped_run_equals_single_run(runs):
    g_alone, params_alone, metrics_alone = group_slice(runs["alone"], "alive_bonus#0")
    g_grouped, params_grouped, metrics_grouped = group_slice(runs["grouped"], "alive_bonus#0")
    assert g_alone != g_grouped, "the test should compare different positions of the same candidate"
    for a, b in zip(jax.tree.leaves(params_alone), jax.tree.leaves(params_grouped)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(metrics_alone, metrics_grouped):
        # The grouped run also logs the reward components that good_upright defines (zeros for others).
        assert set(b) - set(a) == {"reward/upright", "reward/motion"}
        for key in a:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-4, atol=1e-6, err_msg=key)
    # Training did happen: parameters moved away from their initial values.
    trainer = runs["alone"][0]
    initial = jax.tree.map(lambda x: x[0], trainer.init().params)
    assert not np.allclose(initial["actor"][0][0], params_alone["actor"][0][0])


def test_updates_in_blocks_of_groups_train_as_all_groups_at_once(runs):
    """`update_block_envs` bounds the memory of the update: the groups update a block at a time, each as before."""
    (trainer, ts, history), (_, blocks_ts, blocks_history) = runs["grouped"], runs["blocks"]
    assert trainer.rows == 6 and trainer.config.update_block_envs // trainer.envs_per_candidate >= 6
    for a, b in zip(jax.tree.leaves((ts, history)), jax.tree.leaves((blocks_ts, blocks_history))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # training moved the parameters: the comparison is not of two initial states
    assert not np.allclose(ts.params["actor"][0][0], trainer.init().params["actor"][0][0])


def test_keys_come_from_name_and_seed_not_position(runs):
    for run in runs.values():
        trainer = run[0]
        expected = [jax.random.split(group_key(g.candidate.name, g.seed), 3)[2].tolist() for g in trainer.groups]
        assert [k.tolist() for k in trainer.init().key] == expected


def test_seeds_train_independently(runs):
    _, p0, _ = group_slice(runs["grouped"], "alive_bonus#0")
    _, p1, _ = group_slice(runs["grouped"], "alive_bonus#1")
    _, p_alone, _ = group_slice(runs["alone"], "alive_bonus#0")
    assert not np.allclose(p0["actor"][0][0], p1["actor"][0][0])
    np.testing.assert_allclose(p0["actor"][0][0], p_alone["actor"][0][0], rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # 45 s
def test_the_iterations_two_stages_compute_the_whole_iteration(runs):
    """On one device the iteration runs as two programs ("collect", then "learn": `StagedIteration`); they
    compute what the iteration as one program ("iteration", the sharded runs' form) computes."""
    trainer = runs["alone"][0]
    staged = whole = trainer.init()
    whole_iteration = jax.jit(trainer.functions()["iteration"])
    for _ in range(ITERATIONS):
        staged, staged_metrics = trainer.iteration(staged)
        whole, whole_metrics = whole_iteration(whole)
    for a, b in zip(jax.tree.leaves(jax.device_get((staged, staged_metrics))),
                    jax.tree.leaves(jax.device_get((whole, whole_metrics)))):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_the_iteration_compiles_once(runs):
    """The state `init` returns has the types the iteration returns (a weak-typed leaf would recompile the
    whole iteration at its second call: ~30 s on a GPU)."""
    for trainer, _, _ in runs.values():
        assert trainer.iteration._cache_size() == 1


def test_the_checkpoint_copy_is_compiled_with_the_evaluation(runs):
    """`compile_evaluation` also compiles the checkpoints' device copy (`snapshot`), which otherwise compiled at
    the first checkpoint and stalled training there; the copy holds the state's values in buffers of its own."""
    trainer = runs["alone"][0]
    ts = trainer.init()
    trainer.compile_evaluation(ts).result()
    copied = trainer.compiled_device_copy(ts)
    for a, b in zip(jax.tree.leaves(copied), jax.tree.leaves(ts)):
        np.testing.assert_array_equal(a, b)
        assert a.unsafe_buffer_pointer() != b.unsafe_buffer_pointer() or a.nbytes == 0
    assert trainer.device_copy._cache_size() == 0  # nothing was compiled through the call path
