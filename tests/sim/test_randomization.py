"""Physics randomization and curricula: per-environment model fields, schedules, the held-out evaluation, errors."""

import dataclasses
import functools
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envcoder.env import ResetPool
from envcoder.rl.ppo.learner import GroupedPPO
from envcoder.search.proposers import OfflineProposer, Parent, Request
from envcoder.candidates import SHAPER_TYPES, Candidate, CandidateError, load_candidate
from envcoder.candidates.validate import validate_candidate
from envcoder.sim import Simulator
from envcoder.tasks import get_task

import tiny

FILES = {
    "heavy": """
        import jax

        def sample_physics(key, params):
            return {"mass": jax.random.uniform(key, (), minval=0.5, maxval=2.0), "action_latency": 1.0,
                    "observation_noise": 0.05, "push_velocity": 0.5, "push_interval": 3.0}
        """,
    "table": """
        CURRICULUM = {"friction": {"range": [0.5, 1.5], "iters": 4}, "gravity": {"range": [-1.0, 1.0]}}
        """,
    "nothing": """
        def sample_physics(key, params):
            return {}
        """,
    "neutral": """
        def sample_physics(key, params):
            return {"mass": 1.0, "friction": 1.0, "gravity": 0.0}
        """,
    "target": """
        def curriculum(iteration, metrics, params):
            return {"target": iteration * 0.1}

        def sample_goal(key, state):
            return state["curriculum"]["target"][:, None] + 0.0 * state["dof_pos"][:, :1]
        """,
}
ITERATIONS = 3


def write(tmp_path, name, source):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("randomization")
    task, sim, state = tiny.cartpole()
    candidates = {name: load_candidate(write(tmp, name, source), SHAPER_TYPES) for name, source in FILES.items()}
    candidates["default"] = Candidate("default", None, "", {}, "default")
    candidates = {name: validate_candidate(task, sim, c, state) for name, c in candidates.items()}
    config = tiny.ppo(task)

    def train(names, **kwargs):
        chosen = [validate_candidate(task, sim, n, state) if isinstance(n, Candidate) else candidates[n] for n in names]
        run = tiny.train(task, chosen, ITERATIONS, config, sim=sim, **kwargs)
        return run.trainer, run.ts, run.history

    return {"task": task, "sim": sim, "candidates": candidates, "config": config, "train": train,
            "mixed": train(["heavy", "table", "nothing", "target"])}


def group(run, label):
    trainer, ts, history = run
    return trainer.labels.index(label)


@pytest.mark.slow  # 60-70 s of its own compiles on the 2-core machine
def test_a_heavier_body_accelerates_less_and_stronger_gravity_topples_faster():
    task = get_task("Cartpole")
    sim = Simulator(task.model_file, task.substeps)
    start = sim.reset(sim.qpos0.at[1].set(0.1), jnp.zeros(2))
    data = jax.tree.map(lambda x: jnp.broadcast_to(x, (5,) + x.shape), start)
    nbody = sim.mj_model.nbody
    physics = {"mass": jnp.array([1.0, 2.0, 1.0, 1.0, 1.0])[:, None] * jnp.ones((5, nbody)),
               "gravity": jnp.array([[0, 0, 0], [0, 0, 0], [0, 0, -9.81], [0, 0, 0], [0, 0, 0]], jnp.float32),
               "motor_strength": jnp.array([1.0, 1.0, 1.0, 1.0, 2.0])[:, None]}

    @jax.jit
    def run(data, physics, force):
        step = jax.vmap(lambda d, p: sim.physics_step(d, jnp.array([force]), p))
        return jax.lax.fori_loop(0, 50, lambda _, d: step(d, physics), data)

    pushed = run(data, physics, 10.0)
    # Twice the mass of every body: half the cart's acceleration under the same force (the pole barely moves it).
    ratio = pushed.qpos[0, 0] / pushed.qpos[1, 0]
    assert 1.7 < ratio < 2.3, ratio
    ratio = pushed.qpos[4, 0] / pushed.qpos[0, 0]  # twice the motor strength: about twice as far
    assert 1.7 < ratio < 2.3, ratio
    resting = run(data, physics, 0.0)
    # Double gravity: the tilted pole falls further in the same time than at the model's gravity.
    assert abs(resting.qpos[2, 1]) > 1.5 * abs(resting.qpos[3, 1])
    # The untouched environment equals the task's model exactly.
    plain = jax.jit(lambda d: jax.lax.fori_loop(0, 50, lambda _, d: jax.vmap(
        lambda x: sim.physics_step(x, jnp.array([0.0])))(d), d))(data)
    np.testing.assert_array_equal(resting.qpos[3], plain.qpos[3])


def test_per_environment_fields_differ_and_other_candidates_keep_the_task_physics(setup):
    trainer, ts, _ = setup["mixed"]
    assert trainer.env.physics_fields == ["action_latency", "friction", "gravity", "mass", "observation_noise",
                                      "push_interval", "push_velocity"]
    physics = jax.device_get(ts.env.physics)
    heavy, nothing = group(setup["mixed"], "heavy#0"), group(setup["mixed"], "nothing#0")
    masses = physics["mass"][heavy, :, 0]
    assert len(np.unique(masses)) == len(masses) and np.all((masses >= 0.5) & (masses <= 2.0))
    np.testing.assert_array_equal(physics["mass"][heavy, :, 0], physics["mass"][heavy, :, -1])  # a scalar: all bodies
    assert np.all(physics["action_latency"][heavy] == 1.0)
    for name, value in physics.items():
        neutral = 1.0 if name in ("mass", "friction") else 0.0
        assert np.all(value[nothing] == neutral), name
    assert ts.env.past_actions.shape == (4, 8, 4, trainer.action_dim_max)


def test_latency_delays_the_action_and_a_push_kicks_the_base(setup):
    trainer, ts, _ = setup["mixed"]
    heavy, nothing = group(setup["mixed"], "heavy#0"), group(setup["mixed"], "nothing#0")
    env = ts.env._replace(progress=jnp.full_like(ts.env.progress, 2),  # the heavy group pushes every 3 steps
                          past_actions=jnp.full_like(ts.env.past_actions, 0.25))
    actions = jnp.full((4, 8, trainer.action_dim_max), -0.5) * trainer.action_mask[:, None, :]
    pool = ResetPool.of(env)
    step = jax.jit(trainer.env.step)
    stepped, _ = step(env, actions, pool, ts.key)
    calm, _ = step(env._replace(physics={**env.physics, "push_velocity": jnp.zeros_like(env.physics["push_velocity"])}),
                   actions, pool, ts.key)
    # Cartpole's force is 30 × action: one step late, the heavy group's motor applies the stored 0.25.
    np.testing.assert_allclose(stepped.torques[heavy, :, 0], 7.5)
    np.testing.assert_allclose(stepped.torques[nothing, :, 0], -15.0)
    np.testing.assert_array_equal(stepped.past_actions[heavy, :, 0], actions[heavy])  # the newest first
    # The push changes the cart's velocity by up to ±0.5 m/s, in the heavy group only.
    kick = np.asarray(stepped.data.qvel[heavy, :, 0] - calm.data.qvel[heavy, :, 0])
    assert np.all(np.abs(kick) <= 0.5 + 1e-6) and np.all(np.abs(kick) > 0) and len(np.unique(kick)) == len(kick)
    np.testing.assert_array_equal(stepped.data.qvel[nothing], calm.data.qvel[nothing])


def test_the_curriculum_table_widens_on_schedule_and_sampling_follows_it(setup):
    trainer, ts, history = setup["mixed"]
    table = group(setup["mixed"], "table#0")
    for iteration, metrics in enumerate(history, start=1):
        fraction = min(iteration / 4, 1.0)
        assert metrics["curriculum/friction/0"][table] == pytest.approx(1.0 - 0.5 * fraction)
        assert metrics["curriculum/friction/1"][table] == pytest.approx(1.0 + 0.5 * fraction)
        assert metrics["curriculum/gravity/0"][table] == pytest.approx(-1.0)  # iters 0: the full range at once
    friction = jax.device_get(ts.env.physics["friction"])[table]
    assert np.all((friction >= 0.5) & (friction <= 1.5)) and len(np.unique(friction)) > 1
    gravity = jax.device_get(ts.env.physics["gravity"])[table]
    assert gravity.shape == (8, 3) and np.all(np.abs(gravity) <= 1.0) and len(np.unique(gravity)) == gravity.size


def test_a_curriculum_reaches_the_state_of_other_functions(setup):
    trainer, ts, history = setup["mixed"]
    target = group(setup["mixed"], "target#0")
    assert [m["curriculum/target"][target] for m in history] == pytest.approx([0.1, 0.2, 0.3])
    curriculum = jax.tree.map(lambda x: jnp.asarray(x).at[target].set(0.7) if x.ndim == 1 else jnp.asarray(x),
                              ts.env.curriculum)  # the run's state is on the host (`tiny.train`)
    pool = jax.jit(trainer.env.reset_pool)(ts.key, curriculum)
    np.testing.assert_allclose(jax.device_get(pool.commands)[target], 0.7)


@pytest.mark.slow  # 80 s
def test_randomizing_nothing_equals_the_default_bit_for_bit(setup):
    # Returning no field steps the task's model itself: bit for bit. Returning the neutral values batches a model
    # per environment; XLA may then order a few float operations differently (seen: 1.5e-8 in a weight).
    for name, exact in (("nothing", True), ("neutral", False)):
        _, default, default_metrics = setup["train"]([Candidate(name, None, "", {}, "default")])  # keys follow names
        _, ts, metrics = setup["train"]([name])
        check = np.testing.assert_array_equal if exact else functools.partial(np.testing.assert_allclose, rtol=1e-5,
                                                                              atol=1e-6)
        for a, b in zip(jax.tree.leaves(jax.device_get(default.params)), jax.tree.leaves(jax.device_get(ts.params))):
            check(a, b, err_msg=name)
        for key in default_metrics[-1]:
            check(default_metrics[-1][key], metrics[-1][key], err_msg=f"{name}: {key}")


@pytest.mark.slow  # 33 s here: a third training compiled
def test_a_group_that_randomizes_nothing_is_unaffected_by_ones_that_do(setup):
    _, alone, _ = setup["train"](["nothing"])
    trainer, mixed, _ = setup["mixed"]
    g = group(setup["mixed"], "nothing#0")
    for a, b in zip(jax.tree.leaves(jax.device_get(alone.params)), jax.tree.leaves(jax.device_get(mixed.params))):
        np.testing.assert_allclose(a[0], b[g], rtol=1e-5, atol=1e-6)


def test_the_curriculum_resumes_exactly_from_the_host(setup):
    trainer, _, _ = setup["mixed"]
    ts = trainer.init()
    ts, _ = trainer.iteration(ts)
    resumed = trainer.to_device(trainer.to_host(ts))
    ts, _ = trainer.iteration(ts)
    resumed, _ = trainer.iteration(resumed)
    for a, b in zip(jax.tree.leaves(trainer.to_host(ts)), jax.tree.leaves(trainer.to_host(resumed))):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # 30 s
def test_a_held_out_fitness_evaluates_every_candidate_under_its_physics(setup):
    task = setup["task"]

    def heavy_world(key, params):
        return {"gravity": jnp.array([0.0, 0.0, -40.0])}
    name, upright = next(iter(task.fitness.items()))
    robust = dataclasses.replace(task, fitness={"robust": dataclasses.replace(upright, physics=heavy_world), name: upright})
    trainer = GroupedPPO(robust, [setup["candidates"]["default"]], setup["config"], 8, (0,), setup["sim"],
                         fitness="robust")
    assert trainer.env.physics_fields == []  # training keeps the task's physics
    ts = trainer.init()
    plain = GroupedPPO(task, [setup["candidates"]["default"]], setup["config"], 8, (0,), setup["sim"])
    held_out, nominal = jax.device_get(trainer.evaluate(ts)), jax.device_get(plain.evaluate(ts))
    # Under five times the gravity the untrained policy drops the pole sooner.
    assert held_out["episode_length"].mean() < nominal["episode_length"].mean()


@pytest.mark.parametrize("source, function, reason", [
    ("def sample_physics(key, params):\n    return {'fricton': 1.0}\n", "sample_physics", "'fricton', not a physics field"),
    ("def sample_physics(key, params):\n    return {'mass': -1.0}\n", "sample_physics (field 'mass')", "> 0 (a scale)"),
    ("import jax.numpy as jnp\ndef sample_physics(key, params):\n    return {'gravity': jnp.ones(2)}\n",
     "sample_physics (field 'gravity')", "expected a scalar or (3,)"),
    ("def curriculum(iteration, metrics, params):\n    return {} if params is None else {'a': 1.0}\n", "curriculum",
     "same names and shapes at every iteration"),
    ("CURRICULUM = {'friction': {'range': [1.5, 0.5]}}\n", None, "lo ≤ hi"),
    ("CURRICULUM = {'level': {'range': [0.0, 1.0]}}\n", None, "not a physics field"),
    ("CURRICULUM = {'friction': {'range': [0.5, 1.5], 'iter': 3}}\n", None, "optionally 'iters'"),
])
def test_bad_randomization_is_a_clear_error(setup, tmp_path, source, function, reason):
    path = write(tmp_path, "bad", source)
    with pytest.raises(CandidateError) as err:
        candidate = load_candidate(path, SHAPER_TYPES)
        validate_candidate(setup["task"], setup["sim"], candidate)
    assert str(path) in str(err.value) and reason in str(err.value)
    if function:
        assert f"in {function}()" in str(err.value)


def test_the_offline_proposer_mutates_a_range_as_one():
    source = "CURRICULUM = {'friction': {'range': [0.5, 1.5], 'iters': 100}, 'mass': {'range': [0.8, 1.2]}}\n"
    proposer = OfflineProposer(seed=0, rate=1.0, scale=1.5)
    for slot in range(20):
        text = proposer.sample(Request("", (), 1, slot, 0, (Parent("p", source, 0.3),), False)).text
        namespace = {}
        exec(text, namespace)  # noqa: S102 - the test's own source, mutated
        for name, entry in namespace["CURRICULUM"].items():
            low, high = entry["range"]
            assert 0 < low <= high
            assert (low + high) / 2 == pytest.approx(1.0, abs=1e-3)  # the centre is kept
        assert namespace["CURRICULUM"]["friction"]["iters"] == 100
