"""Every shaping type takes effect; heterogeneous spaces train as if alone; divergence stays isolated;
parameter sweeps trace once; --cross forms the product; seed statistics."""

import re
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envcoder.env import ResetPool
from envcoder.rl.ppo.config import PPOConfig
from envcoder.rl.ppo.learner import GroupedPPO
from envcoder.runs.ranking import not_separable_from_best, rank
from envcoder.candidates import (SHAPER_TYPES, Candidate, cross_candidates, expand_sweeps, load_candidate,
                                        call_with_params)
from envcoder.env.grouping import GroupPlan
from envcoder.candidates.validate import validate_candidate
from envcoder.sim import Simulator
import tiny
from conftest import CANDIDATES

HERE = CANDIDATES / "shaping"
ALL_TYPES = SHAPER_TYPES
ENVS, ITERATIONS = 16, 2


@pytest.fixture(scope="module")
def cartpole():
    return tiny.cartpole()


def load(name):
    return load_candidate(HERE / f"{name}.py", ALL_TYPES)


@pytest.fixture(scope="module")
def runs(cartpole):
    task, sim, state = cartpole
    default = Candidate("default", None, "", {}, "default")
    mix = [default] + [load(n) for n in ("wide_reset", "strict_terminal", "goal_target", "two_actions", "nan_later")]
    replaced = mix[:-1] + [load_candidate(HERE / "nan_replacement.py", ALL_TYPES, name="nan_later")]
    config = tiny.ppo(task)

    def train(candidates):
        return vars(tiny.train(task, [validate_candidate(task, sim, c, state) for c in candidates], ITERATIONS, config,
                               sim=sim, envs=ENVS, evaluate=True, keep_initial=True))

    return {"mix": train(mix), "replaced": train(replaced), "alone": train([default])}


def row(run, name):
    return run["trainer"].labels.index(f"{name}#0")


def test_sizes_are_inferred_per_candidate(runs):
    trainer = runs["mix"]["trainer"]
    sizes = {g.candidate.name: (g.candidate.obs_dim, g.candidate.action_dim) for g in trainer.groups}
    assert sizes["default"] == (4, 1) and sizes["goal_target"] == (5, 1) and sizes["two_actions"] == (6, 2)
    assert trainer.obs_dim_max == 6 and trainer.action_dim_max == 2


def test_reset_sampler_widens_initial_pole_angles(runs):
    run = runs["mix"]
    angles = lambda name: run["initial_env"].data.qpos[row(run, name), :, 1]  # noqa: E731
    assert np.abs(angles("default")).max() <= 0.1
    assert np.abs(angles("wide_reset")).max() > 0.5


def test_goal_sampler_fills_commands(runs):
    run = runs["mix"]
    commands = run["initial_env"].commands
    assert np.all(commands[row(run, "default")] == 0.0)
    goal = commands[row(run, "goal_target"), :, 0]
    assert np.all(np.abs(goal) <= 1.0) and goal.std() > 0.2


def test_stricter_terminal_shortens_episodes(runs):
    run = runs["mix"]
    length = lambda name: run["evaluation"]["episode_length"][row(run, name)].mean()  # noqa: E731
    assert length("strict_terminal") < 0.5 * length("default")


def test_two_action_candidate_trains_with_its_own_policy(runs):
    run = runs["mix"]
    g = row(run, "two_actions")
    log_std_grads_moved = run["ts"].params["log_std"][g]
    assert np.all(np.isfinite(run["history"][-1]["actor_loss"][g]))
    assert not np.allclose(log_std_grads_moved, 0.0)  # both action dims are trained
    assert np.allclose(run["ts"].params["log_std"][row(run, "default"), 1], 0.0)  # padded dim untouched


def test_padded_candidate_equals_training_alone(runs):
    """The default candidate (4-D obs, 1-D action) among 6-D/2-D candidates equals it trained alone."""
    alone, mixed = runs["alone"], runs["mix"]
    p_alone = jax.tree.map(lambda x: x[0], alone["ts"].params)
    p_mixed = jax.tree.map(lambda x: x[row(mixed, "default")], mixed["ts"].params)
    np.testing.assert_allclose(p_mixed["actor"][0][0][:4], p_alone["actor"][0][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(p_mixed["actor"][0][0][4:], 0.0)  # padded inputs stay zero
    np.testing.assert_allclose(p_mixed["actor"][-1][0][:, :1], p_alone["actor"][-1][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(p_mixed["actor"][-1][0][:, 1:], 0.0)  # padded output stays zero
    np.testing.assert_allclose(p_mixed["critic"][1][0], p_alone["critic"][1][0], rtol=1e-5, atol=1e-6)
    for key in ("task_fitness", "episode_length", "shaped_return"):
        np.testing.assert_allclose(mixed["evaluation"][key][row(mixed, "default")], alone["evaluation"][key][0],
                                   rtol=1e-4, atol=1e-5)


def test_diverged_candidate_is_isolated(runs):
    mixed, replaced = runs["mix"], runs["replaced"]
    g = row(mixed, "nan_later")
    assert mixed["ts"].diverged_at[g] == 0
    assert mixed["history"][-1]["diverged"][g] == 1.0 and np.isnan(mixed["evaluation"]["task_fitness"][g]).all()
    assert np.all(np.isfinite(jax.tree.leaves(jax.tree.map(lambda x: x[g], mixed["ts"].params))[0]))
    assert replaced["ts"].diverged_at[row(replaced, "nan_later")] == -1
    for label in mixed["trainer"].labels:
        if label.startswith("nan_later"):
            continue
        a, b = mixed["trainer"].labels.index(label), replaced["trainer"].labels.index(label)
        for x, y in zip(jax.tree.leaves(mixed["ts"].params), jax.tree.leaves(replaced["ts"].params)):
            np.testing.assert_array_equal(x[a], y[b], err_msg=label)  # bitwise on CPU
        np.testing.assert_array_equal(mixed["evaluation"]["task_fitness"][a], replaced["evaluation"]["task_fitness"][b])


SWEEP = textwrap.dedent("""
    import jax.numpy as jnp

    PARAMS = {"UPRIGHT_WEIGHT": [0.5, 1.0, 2.0], "SPEED_WEIGHT": [0.0, 0.1]}
    UPRIGHT_WEIGHT = 1.0
    SPEED_WEIGHT = 0.0

    def compute_reward(state):
        return UPRIGHT_WEIGHT * jnp.cos(state["dof_pos"][:, 1]) - SPEED_WEIGHT * jnp.abs(state["dof_vel"][:, 0])
""")


def test_sweep_variants_whose_values_differ_never_share_a_name(tmp_path):
    (tmp_path / "close.py").write_text("PARAMS = {'K': [0.5, 0.5000001, 2.0, 1e-7]}\nK = 1.0\n\n\n"
                                       "def compute_reward(state):\n    return K * state['dof_pos'][:, 1]\n")
    names = [c.name for c in expand_sweeps([load_candidate(tmp_path / "close.py", ("compute_reward",))])]
    assert names == ["close[K=0.5]", "close[K=0.5000001]", "close[K=2]", "close[K=1e-07]"]


def test_a_sweep_of_too_many_combinations_is_refused_before_it_is_expanded(tmp_path):
    (tmp_path / "huge.py").write_text("PARAMS = {'A': [1.0] * 1000, 'B': [1.0] * 1000}\nA = 1.0\nB = 1.0\n\n\n"
                                      "def compute_reward(state):\n    return A * B * state['dof_pos'][:, 1]\n")
    from envcoder.candidates import CandidateError

    with pytest.raises(CandidateError, match="PARAMS makes 1,000,000 combinations; at most 1,024"):
        load_candidate(tmp_path / "huge.py", ("compute_reward",))


def test_parameter_sweep_traces_once(tmp_path, cartpole):
    task, sim, state = cartpole
    (tmp_path / "sweep.py").write_text(SWEEP)
    variants = expand_sweeps([load_candidate(tmp_path / "sweep.py", ("compute_reward",))])
    assert len(variants) == 6 and variants[0].name == "sweep[UPRIGHT_WEIGHT=0.5,SPEED_WEIGHT=0]"
    plan = GroupPlan(task, variants, seeds=(0,))
    (reward_class,) = plan.classes["compute_reward"]
    traces = []
    original = reward_class.function
    object.__setattr__(reward_class, "function", _CountingProxy(original, traces))

    state_g = jax.tree.map(lambda x: jnp.broadcast_to(x, (len(variants),) + x.shape), state)
    state_g["dof_vel"] = state_g["dof_vel"].at[..., 0].set(1.0)
    rewards = jax.jit(lambda s: plan.dispatch("compute_reward", (s,)))(state_g)
    assert len(traces) == 1
    for g, group in enumerate(plan.groups):
        p = group.candidate.params
        expected = call_with_params(original, p, jax.tree.map(lambda x: x[g], state_g))
        np.testing.assert_allclose(rewards[g], expected, rtol=1e-6)
        np.testing.assert_allclose(rewards[g], p["UPRIGHT_WEIGHT"] - p["SPEED_WEIGHT"], rtol=1e-6)


def test_taking_a_class_s_rows_of_a_constant_is_not_folded_into_a_literal():
    """A task constant in the state (broadcast to every env), taken for a class whose groups are not
    contiguous inside the rollout loop, must stay a gather: XLA once folded it into a `G_c × E`-row literal,
    which grew the executable (77 MiB at 2048 Anymal candidates) and compile time with G."""
    from envcoder.env.grouping import FunctionClass

    groups, envs = 64, 256
    cls = FunctionClass(function=None, indices=np.array([g for g in range(groups) if g % 8 != 3]))  # a gather
    default_pose = np.linspace(0.0, 1.0, 12, dtype=np.float32)

    def step(x, _):  # as in a rollout: build the state per env, take the class's rows, apply its function
        state = jax.vmap(jax.vmap(lambda q: {"q": q, "default_pose": jnp.asarray(default_pose)}))(x)
        rows = jax.tree.map(cls.take, state)
        return x.at[cls.indices].set(rows["q"] + rows["default_pose"]), None

    rollout = jax.jit(lambda x: jax.lax.scan(step, x, None, length=3)[0])
    x = jnp.zeros((groups, envs, 12))
    expected = np.zeros((groups, envs, 12), np.float32)
    expected[cls.indices] = 3 * default_pose
    np.testing.assert_allclose(rollout(x), expected, rtol=1e-6)
    hlo = rollout.lower(x).compile().as_text()
    literal_sizes = [int(np.prod([int(d) for d in dims.split(",") if d]))
                     for dims in re.findall(r"f32\[([\d,]*)\][^ ]* constant\(", hlo)]
    assert max(literal_sizes, default=0) <= 12, literal_sizes  # only the 12 values themselves


class _CountingProxy:
    """Wraps a candidate function, counting traces; exposes its globals for the constant swap."""

    def __init__(self, fn, counter):
        self.fn, self.counter, self.__globals__ = fn, counter, fn.__globals__

    def __call__(self, *args):
        self.counter.append(1)
        return self.fn(*args)


def test_sweep_errors_are_clear(tmp_path):
    from envcoder.candidates import CandidateError
    (tmp_path / "bad.py").write_text("PARAMS = {'W': [1.0]}\ndef compute_reward(state):\n    return W\n")
    with pytest.raises(CandidateError, match="defines no constant W"):
        load_candidate(tmp_path / "bad.py", ("compute_reward",))
    (tmp_path / "bad2.py").write_text("W = 1.0\nPARAMS = {'W': []}\ndef compute_reward(state):\n    return W\n")
    with pytest.raises(CandidateError, match="non-empty list of numbers"):
        load_candidate(tmp_path / "bad2.py", ("compute_reward",))


def test_cross_forms_the_product(tmp_path, cartpole):
    task, _, _ = cartpole
    for i in range(3):
        (tmp_path / f"r{i}.py").write_text(f"def compute_reward(state):\n    return state['dof_pos'][:, 1] * {i}\n")
    for i in range(2):  # integers are code (floats would be constants of one shared code)
        (tmp_path / f"o{i}.py").write_text(f"def compute_observation(state):\n    return state['dof_pos'] * {i}\n")
    from envcoder.candidates import load_candidates
    types = ("compute_reward", "compute_observation")
    loaded, failures = load_candidates(tmp_path, types)
    crossed = cross_candidates(loaded, types)
    assert not failures and len(crossed) == 6
    assert sorted(c.name for c in crossed) == sorted(f"r{i}+o{j}" for i in range(3) for j in range(2))
    plan = GroupPlan(task, crossed, seeds=(0,))
    assert len(plan.classes["compute_reward"]) == 3 and len(plan.classes["compute_observation"]) == 2
    with pytest.raises(ValueError, match="no candidate file defines compute_torque"):
        cross_candidates(loaded, types + ("compute_torque",))


def test_sandboxed_cross_takes_each_size_from_the_file_that_provides_it(tmp_path):
    from envcoder.candidates.prepare import sandboxed_candidates
    from envcoder.runs.evaluation import EvalSettings
    from envcoder.tasks import get_task

    (tmp_path / "reward.py").write_text("def compute_reward(state):\n    r = state['dof_pos'][:, 1]\n"
                                        "    return r, {'upright': r}\n")
    (tmp_path / "wide.py").write_text("import jax.numpy as jnp\ndef compute_observation(state):\n"
                                      "    return jnp.concatenate([state['dof_pos'], state['dof_vel'], state['dof_pos']], -1)\n")
    settings = EvalSettings(task="Cartpole", functions=tmp_path, out=tmp_path / "out", cross=True,
                            shaper_types=("compute_reward", "compute_observation"))
    candidates, failures = sandboxed_candidates(settings, get_task("Cartpole"))
    assert not failures and [c.name for c in candidates] == ["reward+wide"]
    (crossed,) = candidates  # 6 observations from wide.py, the reward's component from reward.py
    assert (crossed.obs_dim, crossed.action_dim, crossed.reward_components) == (6, 1, ("upright",))


def test_action_size_is_inferred_from_compute_torque(cartpole):
    from envcoder.candidates.validate import infer_action_dim
    _, _, state = cartpole
    assert infer_action_dim("f", lambda a, s: 30.0 * (a[:, 0:1] - a[:, 2:3]), state, 1) == 3
    assert infer_action_dim("f", lambda a, s: 30.0 * a, state, 1) == 1


def test_seed_statistics():
    values = [0.2, 0.4, 0.6, 0.8]
    (best, other) = rank({"a": [{"task_fitness": v, "shaped_return": 1.0, "episode_length": 10.0} for v in values],
                          "b": [{"task_fitness": v - 0.3, "shaped_return": 1.0, "episode_length": 10.0}
                                for v in values]})
    assert best.name == "a" and best.fitness_mean == pytest.approx(0.5)
    assert best.fitness_std == pytest.approx(np.std(values, ddof=1))
    half = 3.182446 * np.std(values, ddof=1) / 2  # Student's t(0.975) with 3 degrees of freedom × standard error
    assert (best.ci_low, best.ci_high) == pytest.approx((0.5 - half, 0.5 + half)) and best.seeds == 4
    assert not_separable_from_best([best, other]) == ["b"]  # 0.3 apart with these spreads: not beaten at 95%


class ExplodingSimulator(Simulator):
    """Cartpole physics that goes non-finite in any env whose cart passes x = 0.05 m, as MJX can under
    extreme contacts: a failure of one env's physics, not of the candidate."""

    def physics_step(self, data, ctrl, physics=None):
        data = super().physics_step(data, ctrl, physics)
        return data.replace(qpos=jnp.where(data.qpos[0] > 0.05, jnp.nan, data.qpos))


@pytest.mark.slow  # 25 s here: a training and its evaluation compiled
def test_an_env_whose_physics_blows_up_is_reset_and_counted_not_the_candidate_diverged(cartpole):
    task, _, state = cartpole
    sim = ExplodingSimulator(task.model_file, task.substeps)
    default = Candidate("default", None, "", {}, "default")
    trainer = GroupedPPO(task, [validate_candidate(task, sim, default, state)], tiny.ppo(task), ENVS, (0,), sim)
    ts, metrics = trainer.iteration(trainer.init())
    metrics, ts = jax.device_get((metrics, ts))
    assert metrics["physics_failures"][0] > 0
    assert metrics["diverged"][0] == 0 and np.isfinite(metrics["step_reward"][0])
    assert np.all(np.isfinite(ts.env.data.qpos)) and np.all(np.isfinite(jax.tree.leaves(ts.params)[0]))
    assert metrics["episodes"][0] >= metrics["physics_failures"][0]  # each blow-up ended its episode


class RunawaySimulator(Simulator):
    """Cartpole physics whose velocities all turn to 150 (m/s, rad/s) at every step: finite, but a blow-up
    where the task's max_qvel is 100."""

    def physics_step(self, data, ctrl, physics=None):
        data = super().physics_step(data, ctrl, physics)
        return data.replace(qvel=jnp.full_like(data.qvel, 150.0))


@pytest.mark.slow  # 30 s
@pytest.mark.parametrize("max_qvel, failures", [(100.0, 1.0), (1000.0, 0.0)])
def test_an_env_faster_than_max_qvel_ends_as_a_physics_failure_from_its_last_sane_state_scoring_as_one(cartpole, max_qvel, failures):
    import dataclasses

    from envcoder.tasks import Fitness
    task, _, state = cartpole
    # 0.25 per step lived, 1.0 per step a failure cut off (lower is better, as for the Anymal's tracking error)
    fitness = Fitness(step=lambda s: jnp.full(s["dof_pos"].shape[:1], 0.25), doc="test", higher_is_better=False,
                      after_failure=lambda s: jnp.ones(s["dof_pos"].shape[:1]))
    task = dataclasses.replace(task, max_qvel=max_qvel, fitness={"test": fitness})
    sim = RunawaySimulator(task.model_file, task.substeps)
    default = Candidate("default", None, "", {}, "default")
    config = PPOConfig.for_task(task, units=(16, 16))
    trainer = GroupedPPO(task, [validate_candidate(task, sim, default, state)], config, 4, (0,), sim)
    ts = trainer.init()
    actions = jnp.zeros((1, 4, trainer.action_dim_max))
    pool = ResetPool.of(ts.env)  # resets go back to the start state
    env, info = jax.jit(trainer.env.step)(ts.env, actions, pool, ts.key)
    np.testing.assert_array_equal(info.physics_failures, failures)
    np.testing.assert_array_equal(info.done, bool(failures))
    # The failed episode scores as failed from its first step: the step it lived earns nothing.
    np.testing.assert_allclose(info.episode_fitness, 1.0 if failures else 0.25 / task.max_episode_length, rtol=1e-6)
    # A failed env was reset (to the pool's start state here); one below the limit keeps its stepped state.
    expected = ts.env.data.qvel if failures else np.full_like(ts.env.data.qvel, 150.0)
    np.testing.assert_array_equal(env.data.qvel, expected)


def test_a_failure_counts_the_remaining_steps_at_the_after_failure_value(cartpole):
    import dataclasses

    from envcoder.tasks import Fitness
    task, sim, state = cartpole
    # 0.25 per step lived, 1.0 per step a failure cut off; every episode fails after 3 steps:
    # (3 × 0.25 + 497 × 1.0) / 500 = 0.9955.
    fitness = Fitness(step=lambda s: jnp.full(s["dof_pos"].shape[:1], 0.25), doc="test", higher_is_better=False,
                      after_failure=lambda s: jnp.ones(s["dof_pos"].shape[:1]))
    task = dataclasses.replace(task, fitness={"test": fitness})
    fails = load_candidate("fails_at_3.py", ("compute_terminal",), source=textwrap.dedent("""
        def compute_terminal(state):
            return state["progress_buf"] >= 3
    """))
    trainer = GroupedPPO(task, [validate_candidate(task, sim, fails, state)], tiny.ppo(task), ENVS, (0,), sim)
    evaluation = jax.device_get(trainer.evaluate(trainer.init()))
    np.testing.assert_allclose(evaluation["episode_length"], 3.0)
    np.testing.assert_allclose(evaluation["task_fitness"], (3 * 0.25 + 497 * 1.0) / 500, rtol=1e-6)
