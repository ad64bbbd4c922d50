"""Every task: documented state fields, the grouped environment's jitted reset and step under random actions with no
NaN, legged robots standing under their default controller, and hand-computed Anymal rewards."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import BENCHMARKS, BUNDLED
from envcoder.env import GroupedEnv, ResetPool
from envcoder.runs.ranking import not_separable_from_best, rank
from envcoder.candidates import Candidate, load_candidate
from envcoder.candidates.validate import sample_state, validate_candidate
from envcoder.sim import Simulator
from envcoder.tasks import TASKS, UnknownTaskError, get_task

NUM_ENVS, STEPS = 4, 250
STAND_SECONDS = {"Ant": 2.0, "Anymal": 2.0, "Humanoid": 1.5}
"""How long each robot stands. The Humanoid has no balance, only PD joints: with nv_humanoid's passive joints it
tips over after 1.8 s."""
# Base height (m) that a standing robot keeps for STAND_SECONDS with zero action from its reference pose.
STANDING_HEIGHT = {"Ant": (0.3, 0.8), "Anymal": (0.42, 0.58), "Humanoid": (1.1, 1.4)}
REFERENCE_RESET = '''
def sample_initial_state(key, state):
    return {}
'''


def _rollout(name):
    """Group 0: the task's defaults under uniform random actions. Group 1: the default controller (for
    Humanoid, whose default is plain torque control, the bundled PD action space) with zero action from
    the reference pose."""
    task = get_task(name)
    sim = Simulator(task.model_file, task.substeps)
    default = Candidate("default", None, "", {}, "default")
    source = REFERENCE_RESET
    if name == "Humanoid":
        source = (BUNDLED / "humanoid" / "pd_control.py").read_text() + REFERENCE_RESET
    standing = load_candidate(f"{name}_standing.py", ("compute_torque", "sample_initial_state"), name="standing",
                              source=source)
    state = sample_state(task, sim)
    env = GroupedEnv(task, [validate_candidate(task, sim, c, state) for c in (default, standing)], NUM_ENVS, (0,), sim)
    groups = [g.candidate.name for g in env.groups]
    random_group = groups.index("default")

    @jax.jit
    def run(key):
        start = env.reset(jax.random.split(key, 2), {})
        pool = ResetPool.of(start)

        def step(now, k):
            actions = jax.random.uniform(k, (2, NUM_ENVS, env.action_dim_max), minval=-1, maxval=1)
            actions = actions * (jnp.arange(2) == random_group)[:, None, None] * env.action_mask[:, None, :]
            now, info = env.step(now, actions, pool, jax.random.split(k, 2))
            return now, (env.observation(env.state(now)), info.reward, info.terminal, now.data.qpos)
        return jax.lax.scan(step, start, jax.random.split(key, STEPS)), start.contact_forces

    (last, (obs, reward, terminal, qpos)), reset_forces = run(jax.random.PRNGKey(0))
    final_state = jax.tree.map(lambda x: x[groups.index("standing")], env.state(last))
    return dict(task=task, sim=sim, env=env, random=random_group, standing=groups.index("standing"),
                obs=obs, reward=reward, terminal=terminal, qpos=qpos, final_state=final_state, state=state,
                reset_forces=reset_forces)


_CACHE = {}


def _cached_rollout(name):
    if name not in _CACHE:
        _CACHE[name] = _rollout(name)
    return _CACHE[name]


HEAVY = ("Ant", "Anymal", "Humanoid")
"""Tasks whose rollout compiles for most of a minute or more on the 2-core CPU: their checks run in the slow suite."""


@pytest.fixture(scope="module", params=[pytest.param(name, marks=pytest.mark.slow) if name in HEAVY else name
                                        for name in sorted(TASKS)])
def rollout(request):
    return _cached_rollout(request.param)


def test_state_fields_match_their_documentation(rollout):
    task, state = rollout["task"], rollout["state"]
    assert set(state) == set(task.state_fields)
    for field, doc in task.state_fields.items():
        dims = re.findall(r"\w+", doc.shape)
        assert state[field].shape[0] == 4, field
        assert len(dims) == state[field].ndim, field
        for dim, size in zip(dims[1:], state[field].shape[1:]):
            if dim.isdigit():
                assert int(dim) == size, (field, doc.shape, state[field].shape)


def test_random_actions_stay_finite_and_move_the_robot(rollout):
    g = rollout["random"]
    for array in (rollout["obs"], rollout["reward"], rollout["qpos"]):
        assert bool(jnp.all(jnp.isfinite(array[:, g])))
    assert not np.allclose(rollout["qpos"][0, g], rollout["qpos"][-1, g])


def test_legged_robot_stands_with_zero_action(rollout):
    task = rollout["task"]
    if task.name not in STANDING_HEIGHT:
        pytest.skip("not a legged robot")
    steps = int(round(STAND_SECONDS[task.name] / rollout["sim"].control_dt))
    g = rollout["standing"]
    height = np.asarray(rollout["qpos"][:steps, g, :, 2])
    low, high = STANDING_HEIGHT[task.name]
    assert not bool(jnp.any(rollout["terminal"][:steps, g]))
    assert low < height.min() and height.max() < high, (height.min(), height.max())


@pytest.mark.slow  # Anymal's rollout (HEAVY)
def test_anymal_feet_carry_the_robots_weight():
    # A reset places the robot without a physics step: no contact forces until the first one.
    assert not np.asarray(_cached_rollout("Anymal")["reset_forces"]).any()
    final = _cached_rollout("Anymal")["final_state"]
    weight = float(_cached_rollout("Anymal")["sim"].mj_model.body_mass.sum()) * 9.81
    total = np.asarray(final["contact_forces"]).sum(axis=1)  # [E, 3]
    np.testing.assert_allclose(total[:, 2], weight, rtol=0.05)
    np.testing.assert_allclose(total[:, :2], 0.0, atol=0.05 * weight)


def _anymal_state(lin_vel, ang_vel, quat, commands, torques):
    task = get_task("Anymal")
    state = dict(sample_state(task, Simulator(task.model_file, task.substeps), 1))
    root = jnp.concatenate([jnp.array([0.0, 0.0, 0.5]), jnp.array(quat), jnp.array(lin_vel), jnp.array(ang_vel)])
    state.update(root_states=root[None], commands=jnp.array([commands]), torques=jnp.full((1, 12), torques))
    return state


def test_anymal_default_reward_matches_hand_computation():
    reward_fn = get_task("Anymal").defaults["compute_reward"]
    # Level base, velocity (1.0, 0.5) against command (1.5, 0.5): xy error² 0.25; yaw rate 0.2 against 0:
    # error² 0.04; 12 torques of 10 N·m. Scales × dt 0.02: 1.0, 0.5, -2.5e-5.
    state = _anymal_state([1.0, 0.5, 0.0], [0.0, 0.0, 0.2], [1.0, 0.0, 0.0, 0.0], [1.5, 0.5, 0.0], 10.0)
    reward, terms = reward_fn(state)
    expected_lin = np.exp(-0.25 / 0.25) * 0.02          # 0.0073576
    expected_ang = np.exp(-0.04 / 0.25) * 0.5 * 0.02    # 0.0085214
    expected_torque = 12 * 100.0 * -2.5e-5 * 0.02       # -0.0006
    np.testing.assert_allclose(terms["lin_vel_xy"], [expected_lin], rtol=1e-5)
    np.testing.assert_allclose(terms["ang_vel_z"], [expected_ang], rtol=1e-5)
    np.testing.assert_allclose(terms["torque"], [expected_torque], rtol=1e-5)
    np.testing.assert_allclose(reward, [expected_lin + expected_ang + expected_torque], rtol=1e-5)

    # Base yawed 90°: world velocity +y is base-frame +x, so a command of (1, 0) is tracked exactly. The
    # torques at the 80 N·m limit cost 12·6400·2.5e-5·0.02 = 0.0384, more than the rest: clipped to 0.
    yawed = [np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4)]
    state = _anymal_state([0.0, 1.0, 0.0], [0.0, 0.0, 0.0], yawed, [1.0, 0.0, 0.0], 80.0)
    reward, terms = reward_fn(state)
    np.testing.assert_allclose(terms["lin_vel_xy"], [0.02], rtol=1e-5)
    np.testing.assert_allclose(terms["ang_vel_z"], [0.01], rtol=1e-5)
    np.testing.assert_allclose(reward, [0.0], atol=1e-7)


def test_anymal_tracking_fitness_counts_a_fall_as_standing_still():
    fitness = get_task("Anymal").fitness["tracking"]
    assert not fitness.higher_is_better
    state = _anymal_state([0.5, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [1.5, 0.0, 0.0], 0.0)
    np.testing.assert_allclose(fitness.step(state), [1.0], rtol=1e-6)
    np.testing.assert_allclose(fitness.after_failure(state), [1.5], rtol=1e-6)


def test_anymal_isaac_success_is_minus_the_squared_tracking_errors_as_isaacgymenvs_reports_it():
    fitness = get_task("Anymal").fitness["isaac_success"]
    assert fitness.higher_is_better and fitness.bounds == (None, 0.0)
    # Level base, velocity (1.0, 0.5) against command (1.5, 0.5): xy error² 0.25; yaw rate 0.2 against -0.1: 0.09.
    state = _anymal_state([1.0, 0.5, 0.0], [0.0, 0.0, 0.2], [1.0, 0.0, 0.0, 0.0], [1.5, 0.5, -0.1], 0.0)
    np.testing.assert_allclose(fitness.step(state), [-0.34], rtol=1e-5)
    np.testing.assert_allclose(fitness.after_failure(state), [-(2.25 + 0.25 + 0.01)], rtol=1e-5)
    # Base yawed 90°: world velocity +y is base-frame +x, and the world yaw rate is the base's: tracked exactly.
    yawed = [np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4)]
    state = _anymal_state([0.0, 1.0, 0.0], [0.0, 0.0, 0.3], yawed, [1.0, 0.0, 0.3], 0.0)
    np.testing.assert_allclose(fitness.step(state), [0.0], atol=1e-6)


def test_lower_is_better_fitness_ranks_the_smallest_error_first():
    per_seed = {name: [{"task_fitness": f, "shaped_return": 0.0, "episode_length": 1.0} for f in values]
                for name, values in {"a": [0.30, 0.32], "b": [0.10, 0.12], "c": [0.11, 0.13]}.items()}
    ranking = rank(per_seed, higher_is_better=False)
    assert [r.name for r in ranking] == ["b", "c", "a"]
    assert not_separable_from_best(ranking, higher_is_better=False) == ["c"]
    assert [r.name for r in rank(per_seed)] == ["a", "c", "b"]


def test_unknown_task_and_fitness_name_the_known_ones():
    with pytest.raises(UnknownTaskError, match="known tasks: Ant, Anymal, Cartpole, CartpoleDiscrete, Humanoid"):
        get_task("Humanoidd")
    with pytest.raises(ValueError, match="choose from tracking, robust_tracking, forward_speed, isaac_success"):
        get_task("Anymal").get_fitness("speed")


@pytest.mark.slow
def test_root_states_round_trip_through_physics():
    task = get_task("Ant")
    sim = Simulator(task.model_file, task.substeps)
    state = sample_state(task, sim, 2)
    root = state["root_states"].at[:, 3:7].set(jnp.array([0.9238795, 0.0, 0.0, 0.3826834]))  # 45° yaw
    root = root.at[:, 7:13].set(jnp.array([1.0, 0.5, 0.0, 0.1, 0.2, 0.3]))
    qpos, qvel = task.physics_from_state({**state, "root_states": root})
    data = jax.vmap(sim.reset)(qpos, qvel)
    back = jax.vmap(lambda d: task.build_state(sim, d, jnp.zeros((4, 3)), jnp.zeros(3), jnp.zeros(8), jnp.zeros(8),
                                               0))(data)
    np.testing.assert_allclose(back["root_states"], root, atol=1e-5)


SPARSE = BENCHMARKS / "search_starts" / "sparse"


def test_each_sparse_start_pays_the_task_fitness_as_its_only_reward(rollout):
    """The search benchmark's sparse starts (issue: HNS; `benchmarks/search.py`): each task's default fitness,
    written as a candidate's reward (negated where lower is better), on states of random-action rollouts."""
    from envcoder.candidates.load import call_with_params
    from envcoder.candidates.validate import rollout_states

    task = rollout["task"]
    path = SPARSE / f"{task.name.lower()}.py"
    if not path.exists():
        pytest.skip(f"{task.name} is not among Eureka's tasks")
    candidate = load_candidate(path, ("compute_reward",))
    states = rollout_states(task, rollout["sim"])
    reward = call_with_params(candidate.functions["compute_reward"], candidate.function_params.get(
        "compute_reward", {}), states)
    _, fitness = task.get_fitness()
    expected = fitness.step(states) * (1.0 if fitness.higher_is_better else -1.0)
    assert np.std(np.asarray(expected)) > 0  # states that tell a wrong reward apart
    np.testing.assert_allclose(np.asarray(reward), np.asarray(expected), atol=1e-5)
