"""Discrete PPO, the asymmetric actor-critic, grouped DQN and SAC: their math against hand-worked examples, a group
trained among others against the group alone, clear errors, and learning on CartpoleDiscrete."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tiny
from conftest import BUNDLED
from envcoder.cli import main
from envcoder.rl.ppo import central_value
from envcoder.rl.config import ConfigError, load_config_file, parse_overrides
from envcoder.rl.dqn.config import DQNConfig
from envcoder.rl.ppo.config import CentralValueConfig, PPOConfig
from envcoder.rl.sac.config import SACConfig
from envcoder.rl.dqn.learner import GroupedDQN, dqn_loss, epsilon_at, q_targets
from envcoder.rl.replay import Replay
from envcoder.rl.normalizer import RunningMeanStd
from envcoder.rl.distributions import categorical_entropy, categorical_kl, categorical_log_prob
from envcoder.rl.ppo.losses import Minibatch, ppo_loss
from envcoder.rl.sac.learner import GroupedSAC, sac_loss, squashed_sample
from envcoder.rl.ppo.learner import GroupedPPO
from envcoder.candidates import load_candidate, SHAPER_TYPES
from envcoder.candidates.validate import rollout_states, validate_candidate
from envcoder.sim import Simulator
from envcoder.tasks import get_task

ITERATIONS = 2


# ---- the math ------------------------------------------------------------------------------------

def test_categorical_distribution_by_hand():
    logits = jnp.array([[0.0, math.log(3.0), 5.0]])  # the third action is padding
    mask = jnp.array([1.0, 1.0, 0.0])
    # Over the two real actions: p = [1/4, 3/4].
    assert float(categorical_log_prob(jnp.array([[0.0, 1.0, 0.0]]), logits, mask)[0]) == pytest.approx(math.log(0.75))
    assert float(categorical_log_prob(jnp.array([[1.0, 0.0, 0.0]]), logits, mask)[0]) == pytest.approx(math.log(0.25))
    entropy = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert float(categorical_entropy(logits, mask)[0]) == pytest.approx(entropy, rel=1e-6)
    # KL([1/4, 3/4] || [1/2, 1/2]) = 1/4 log(1/2) + 3/4 log(3/2)
    kl = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    assert float(categorical_kl(logits, jnp.zeros((1, 3)), mask)[0]) == pytest.approx(kl, rel=1e-5)


def test_discrete_ppo_loss_by_hand():
    # Linear actor logits = obs · [[0, ln 3]] (two actions, a third padded); critic V = obs.
    params = {"actor": [(jnp.array([[0.0, math.log(3.0), 7.0]]), jnp.zeros(3))],
              "critic": [(jnp.array([[1.0]]), jnp.array([0.0]))], "log_std": jnp.zeros(3)}
    obs = jnp.array([[1.0]])
    actions = jnp.array([[0.0, 1.0, 0.0]])  # p = 3/4 under the current policy
    old_log_prob = math.log(0.5)  # ratio 1.5, clipped to 1.2 for a positive advantage
    batch = Minibatch(obs=obs, actions=actions, log_probs=jnp.array([old_log_prob]), mu=jnp.zeros((1, 3)),
                      log_std=jnp.zeros((1, 3)), values=jnp.array([1.0]), returns=jnp.array([1.5]),
                      advantages=jnp.array([2.0]))
    config = PPOConfig(normalize_input=False, normalize_advantage=False, critic_coef=2.0, entropy_coef=0.1,
                       bounds_loss_coef=1.0)
    total, info = ppo_loss(params, batch, RunningMeanStd.create((1,)), jnp.array([1.0, 1.0, 0.0]), config,
                           discrete=True)
    actor = -2.0 * 1.2  # min(1.5·A, 1.2·A) for A = 2
    critic = 0.5 ** 2  # value 1 (unchanged, so no clipping) against return 1.5
    entropy = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert float(info.actor) == pytest.approx(actor, rel=1e-6)
    assert float(info.critic) == pytest.approx(critic, rel=1e-6)
    assert float(info.entropy) == pytest.approx(entropy, rel=1e-5)
    assert float(info.bounds) == 0.0  # no bounds loss on logits, even at 7 for the padded action
    assert float(total) == pytest.approx(actor + 0.5 * 2.0 * critic - 0.1 * entropy, rel=1e-5)
    assert float(info.kl) == pytest.approx(0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75), rel=1e-5)


def test_asymmetric_ppo_loss_uses_the_critic_observation():
    params = {"actor": [(jnp.array([[0.5]]), jnp.array([0.0]))],
              "critic": [(jnp.array([[1.0], [2.0]]), jnp.array([0.0]))], "log_std": jnp.array([0.0])}
    batch = Minibatch(obs=jnp.array([[1.0]]), actions=jnp.array([[0.5]]), log_probs=jnp.array([0.0]),
                      mu=jnp.array([[0.5]]), log_std=jnp.zeros((1, 1)), values=jnp.array([5.0]),
                      returns=jnp.array([4.0]), advantages=jnp.array([0.0]), critic_obs=jnp.array([[1.0, 2.0]]))
    config = PPOConfig(normalize_input=False, normalize_advantage=False)
    _, info = ppo_loss(params, batch, RunningMeanStd.create((1,)), jnp.ones(1), config,
                       critic_rms=RunningMeanStd.create((2,)))
    assert float(info.critic) == pytest.approx((5.0 - 4.0) ** 2)  # V = 1·1 + 2·2 = 5 from the critic's inputs


def test_double_dqn_targets_by_hand():
    online = jnp.array([[1.0, 3.0, 9.0]])  # the padded third action is never chosen
    target = jnp.array([[10.0, 20.0, 99.0]])
    mask = jnp.array([1.0, 1.0, 0.0])
    # Double DQN: a' = argmax online = 1, valued by the target: 20.
    y = q_targets(jnp.array([1.0]), jnp.array([0.0]), online, target, mask, 0.5, True)
    assert float(y[0]) == pytest.approx(1.0 + 0.5 * 20.0)
    # DQN: max over the target's own real actions: 20 too; with online preferring action 0, double picks 10.
    y = q_targets(jnp.array([1.0]), jnp.array([0.0]), jnp.array([[5.0, 3.0, 0.0]]), target, mask, 0.5, True)
    assert float(y[0]) == pytest.approx(1.0 + 0.5 * 10.0)
    y = q_targets(jnp.array([1.0]), jnp.array([0.0]), jnp.array([[5.0, 3.0, 0.0]]), target, mask, 0.5, False)
    assert float(y[0]) == pytest.approx(1.0 + 0.5 * 20.0)
    # A failure does not bootstrap.
    assert float(q_targets(jnp.array([1.0]), jnp.array([1.0]), online, target, mask, 0.5, True)[0]) == 1.0


def test_dqn_loss_by_hand():
    # Linear Q = obs · W with W = [[1, 2]]; target network W = [[4, 0]].
    q = [(jnp.array([[1.0, 2.0]]), jnp.zeros(2))]
    target = [(jnp.array([[4.0, 0.0]]), jnp.zeros(2))]
    batch = Replay(obs=jnp.array([[1.0], [1.0]]), actions=jnp.array([1, 0]), rewards=jnp.array([0.0, 1.0]),
                   next_obs=jnp.array([[1.0], [1.0]]), terminals=jnp.array([0.0, 1.0]), position=jnp.array(0),
                   size=jnp.array(2))
    config = DQNConfig(gamma=0.5, normalize_input=False)
    loss, info = dqn_loss(q, target, batch, RunningMeanStd.create((1,)), jnp.ones(2), config)
    # Sample 0: Q(s, 1) = 2; a' = argmax online [1, 2] = 1, target Q(s', 1) = 0: y = 0; error 2 -> Huber 1.5.
    # Sample 1: Q(s, 0) = 1; terminal: y = 1; error 0 -> 0.
    assert float(loss) == pytest.approx((1.5 + 0.0) / 2)
    assert float(info.q_mean) == pytest.approx(1.5) and float(info.target_mean) == pytest.approx(0.5)


def test_replay_is_a_ring_buffer():
    replay = Replay.create(5, 1)
    for start in (0, 3):  # 3 + 3 transitions into 5 slots: the first one is overwritten
        values = jnp.arange(start, start + 3, dtype=jnp.float32)
        replay = replay.add(values[:, None], values.astype(jnp.int32), values, values[:, None], jnp.zeros(3))
    np.testing.assert_array_equal(replay.rewards, [5.0, 1.0, 2.0, 3.0, 4.0])
    assert int(replay.position) == 1 and int(replay.size) == 5
    sample = replay.sample(jax.random.PRNGKey(0), 64)
    assert set(np.asarray(sample.rewards).tolist()) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    np.testing.assert_array_equal(sample.obs[:, 0], sample.rewards)


def test_epsilon_falls_linearly():
    config = DQNConfig(epsilon=1.0, min_epsilon=0.1, epsilon_decay_epochs=10)
    assert [round(float(epsilon_at(i, config)), 4) for i in (0, 5, 10, 50)] == [1.0, 0.55, 0.1, 0.1]


# ---- grouped equals alone ------------------------------------------------------------------------

CRITIC_FILE = '''
import jax.numpy as jnp


def compute_critic_observation(state):
    """Privileged: the true state, and the pole's angle squared."""
    return jnp.concatenate([state["dof_pos"], state["dof_vel"], state["dof_pos"][:, 1:] ** 2], axis=-1)
'''


WIDE_FILE = '''
import jax.numpy as jnp


def compute_observation(state):
    """The cart's and the pole's positions and velocities, and the pole's angle squared: 5 entries."""
    return jnp.concatenate([state["dof_pos"], state["dof_vel"], state["dof_pos"][:, 1:] ** 2], axis=-1)
'''


@pytest.fixture(scope="module")
def grouped_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("critic")
    (root / "privileged.py").write_text(CRITIC_FILE)
    (root / "wide.py").write_text(WIDE_FILE)
    runs = {}
    for task_name, directory, algo in (("CartpoleDiscrete", BUNDLED / "cartpolediscrete", "ppo"),
                                       ("CartpoleDiscrete", BUNDLED / "cartpolediscrete", "dqn"),
                                       ("Cartpole", BUNDLED / "cartpole", "ppo"),
                                       ("Cartpole", BUNDLED / "cartpole", "central value"),
                                       ("Cartpole", BUNDLED / "cartpole", "shared")):
        task = get_task(task_name)
        sim = Simulator(task.model_file, task.substeps)
        states = rollout_states(task, sim)
        names = (["good_upright", "three_forces"] if task.discrete else ["alive_bonus", "wide"] if algo == "shared"
                 else ["alive_bonus", "privileged"])
        # Alone: a two-action group (its run pads nothing; grouped, its third logit is padding), and on Cartpole
        # both (the symmetric one's run is symmetric alone, asymmetric grouped).
        solo = ["good_upright"] if task.discrete else ["privileged"] if algo == "central value" else names
        candidates = {n: load_candidate((root if n in ("privileged", "wide") else directory) / f"{n}.py",
                                        SHAPER_TYPES) for n in names}
        candidates = {n: validate_candidate(task, sim, c, states) for n, c in candidates.items()}
        config = tiny.dqn(task) if algo == "dqn" else tiny.ppo(task)
        if algo == "central value":  # a critic of its own size, step size, epochs and minibatches
            config = config.replace(central_value_config=CentralValueConfig(
                learning_rate=1e-3, mini_epochs=3, num_minibatches=4, units=(8,), activation="tanh"))
        if algo == "shared":  # one MLP with two heads, as rl_games' separate: False
            config = config.replace(separate=False)

        def train(selected):
            run = tiny.train(task, [candidates[n] for n in selected], ITERATIONS, config, sim=sim, evaluate=True)
            return run.trainer, run.ts, run.history, run.evaluation

        runs[(task_name, algo)] = {"candidates": candidates, "grouped": train(names), "alone": {n: train([n]) for n in solo}}
    return runs


def _same_group(grouped, alone, label, check_metrics=True):
    trainer, ts, history, evaluation = grouped
    trainer_a, ts_a, history_a, evaluation_a = alone
    g, g_a = trainer.labels.index(label), trainer_a.labels.index(label)

    def own(tree, index, trainer):  # a group's own (unpadded) part of each array is compared
        return jax.tree.map(lambda x: np.asarray(x[index]), tree)

    params, params_a = own(ts.params, g, trainer), own(ts_a.params, g_a, trainer_a)
    for a, b in zip(jax.tree.leaves(params_a), jax.tree.leaves(params)):
        np.testing.assert_allclose(b[tuple(slice(0, n) for n in a.shape)], a, rtol=1e-5, atol=1e-6)
    if check_metrics:
        for m, m_a in zip(history, history_a):
            for key in m_a:
                if key in m:
                    np.testing.assert_allclose(m[key][g], m_a[key][g_a], rtol=1e-4, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(evaluation["task_fitness"][g], evaluation_a["task_fitness"][g_a], rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_a_discrete_group_trained_among_others_equals_it_alone(grouped_runs, algo):
    runs = grouped_runs[("CartpoleDiscrete", algo)]
    assert runs["candidates"]["three_forces"].action_dim == 3 and runs["candidates"]["good_upright"].action_dim == 2
    trainer = runs["grouped"][0]
    assert trainer.action_dim_max == 3  # the two-action groups' third logit is padding
    _same_group(runs["grouped"], runs["alone"]["good_upright"], "good_upright#0")
    # Training did happen.
    ts_alone = runs["alone"]["good_upright"][1]
    initial = runs["alone"]["good_upright"][0].init().params
    assert not np.allclose(jax.tree.leaves(initial)[0], jax.tree.leaves(ts_alone.params)[0])


@pytest.mark.slow
def test_discrete_actions_reach_the_candidates_action_mapping(grouped_runs):
    """state["actions"] is the one-hot last action, and the padded action is never taken."""
    trainer, ts, _, _ = grouped_runs[("CartpoleDiscrete", "ppo")]["grouped"]
    actions = np.asarray(ts.env.actions)  # [G, E, 3]
    assert set(np.unique(actions).tolist()) <= {0.0, 1.0}
    np.testing.assert_array_equal(actions.sum(axis=-1), 1.0)
    two = [trainer.labels.index("good_upright#0")]
    assert actions[two, :, 2].sum() == 0.0
    # Torques follow the candidates' own mappings: ±30 N for two actions, {-30, 0, 30} N for three.
    torques = np.asarray(ts.env.torques)
    assert set(np.unique(np.abs(torques[two])).tolist()) <= {30.0}
    three = trainer.labels.index("three_forces#0")
    np.testing.assert_allclose(torques[three, :, 0], 30.0 * (actions[three].argmax(-1) - 1.0))


@pytest.mark.slow
def test_an_asymmetric_group_trained_among_others_equals_it_alone(grouped_runs):
    runs = grouped_runs[("Cartpole", "ppo")]
    candidates = runs["candidates"]
    assert candidates["privileged"].critic_obs_dim == 5 and candidates["alive_bonus"].critic_obs_dim is None
    trainer, ts, _, _ = runs["grouped"]
    assert trainer.asymmetric and trainer.critic_obs_dim_max == 5
    assert ts.own.critic_rms.mean.shape == (2, 5)
    g = trainer.labels.index("privileged#0")
    assert ts.params["critic"][0][0].shape[1:] == (5, 16)  # the critic's input layer reads 5 entries
    assert np.abs(ts.own.critic_rms.mean[g, 4]).sum() > 0  # the privileged entry was seen
    _same_group(runs["grouped"], runs["alone"]["privileged"], "privileged#0")
    # A symmetric candidate in an asymmetric run: its critic reads its own observation (4 entries, padded to 5),
    # and it trains as it does alone (where the run is symmetric), up to float reordering.
    _same_group(runs["grouped"], runs["alone"]["alive_bonus"], "alive_bonus#0", check_metrics=False)
    assert runs["alone"]["alive_bonus"][1].own.critic_rms is None


@pytest.mark.slow
def test_a_shared_network_group_trained_among_others_equals_it_alone(grouped_runs):
    """`separate: false`: one MLP with two heads. The value head reads the last hidden layer (16 wide) whatever the
    observation's size, the first layer is padded to the wider candidate's 5 entries, and each group trains as it
    does alone. Asked for with a candidate's own critic observation, the run is refused before it compiles."""
    runs = grouped_runs[("Cartpole", "shared")]
    trainer, ts, history, _ = runs["grouped"]
    assert [w.shape[1:] for w, _ in ts.params["critic"]] == [(16, 1)]
    assert [w.shape[1:] for w, _ in ts.params["actor"]] == [(5, 16), (16, 16), (16, 1)]
    assert all(np.isfinite(m["critic_loss"]).all() and (m["critic_loss"] > 0).all() for m in history)
    for name in ("alive_bonus", "wide"):
        _same_group(runs["grouped"], runs["alone"][name], f"{name}#0")
    task = get_task("Cartpole")
    privileged = grouped_runs[("Cartpole", "ppo")]["candidates"]["privileged"]
    with pytest.raises(ValueError, match="separate: false .* cannot train a critic on a candidate's own critic "
                                         "observation"):
        tiny.train(task, [privileged], 1, tiny.ppo(task, separate=False))


@pytest.mark.slow
def test_a_central_value_group_trained_among_others_equals_it_alone(grouped_runs):
    runs = grouped_runs[("Cartpole", "central value")]
    trainer, ts, history, _ = runs["grouped"]
    g = trainer.labels.index("privileged#0")
    # The critic has its own size (one hidden layer of 8) and reads the 5 privileged entries; the actor keeps 16, 16.
    assert [w.shape[1:] for w, _ in ts.params["critic"]] == [(5, 8), (8, 1)]
    assert [w.shape[1:] for w, _ in ts.params["actor"]][:2] == [(4, 16), (16, 16)]
    assert set(ts.opt_state) == {"actor", "critic"}
    assert all(np.isfinite(m["critic_loss"]).all() and (m["critic_loss"] > 0).all() for m in history)
    _same_group(runs["grouped"], runs["alone"]["privileged"], "privileged#0")
    # The critic trained: its weights left their initial values, and the actor's optimizer never saw them.
    initial = trainer.init()
    assert not np.allclose(initial.params["critic"][0][0][g], ts.params["critic"][0][0][g])
    adam = next(state for state in ts.opt_state["actor"] if hasattr(state, "mu"))
    assert set(adam.mu) == {"actor", "log_std"}


def test_central_value_loss_and_first_step_by_hand():
    cv = CentralValueConfig(clip_value=True, e_clip=0.2, truncate_grads=False)
    critic = [(jnp.array([[1.0], [2.0]]), jnp.array([0.5]))]  # V = x0 + 2 x1 + 0.5
    obs = jnp.array([[1.0, 0.0], [0.0, 1.0]])  # V = 1.5 and 2.5
    old, returns = jnp.array([1.0, 2.4]), jnp.array([3.0, 2.0])
    # Sample 1: V moved 0.5 from 1.0, clipped to 1.2; max((1.5-3)², (1.2-3)²) = 3.24. Sample 2: V 2.5 (clip 2.6
    # not binding): max(0.25, 0.25) = 0.25.
    assert float(central_value.value_loss(critic, obs, old, returns, cv, "elu")) == pytest.approx((3.24 + 0.25) / 2)
    unclipped = cv.replace(clip_value=False)
    assert float(central_value.value_loss(critic, obs, old, returns, unclipped, "elu")) == pytest.approx(
        (2.25 + 0.25) / 2)
    # One epoch, one minibatch, unclipped: Adam's first step moves every parameter by lr against its gradient's
    # sign. dL/dV = (V - R) = [-1.5, 0.5] → dW = [-1.5, 0.5], db = -1.0.
    tx = central_value.optimizer(unclipped.replace(mini_epochs=1))
    new, _, loss = central_value.train(critic, tx.init(critic), 0.1, obs, old, returns, jax.random.PRNGKey(0),
                                       unclipped.replace(mini_epochs=1), tx, 1, 2, "elu")
    assert float(loss) == pytest.approx(1.25)
    np.testing.assert_allclose(new[0][0], [[1.1], [1.9]], rtol=1e-5)
    np.testing.assert_allclose(new[0][1], [0.6], rtol=1e-5)
    # The step size: constant, or linear to 0 at max_epochs.
    assert float(central_value.learning_rate(cv.replace(learning_rate=1e-3), 50, 100)) == pytest.approx(1e-3)
    linear = cv.replace(learning_rate=1e-3, lr_schedule="linear")
    assert float(central_value.learning_rate(linear, 50, 100)) == pytest.approx(5e-4)


def test_central_value_config_reads_rl_games_layout(tmp_path):
    path = tmp_path / "asymmetric.yaml"
    path.write_text("""
ppo:
  learning_rate: 3.0e-4
  central_value_config:
    minibatch_size: 64
    mini_epochs: 5
    learning_rate: 5e-4
    lr_schedule: adaptive
    schedule_type: standard
    kl_threshold: 0.016
    clip_value: True
    normalize_input: True
    truncate_grads: True
    network:
      name: actor_critic
      central_value: True
      mlp:
        units: [512, 256]
        activation: elu
        d2rl: False
        initializer:
          name: default
        regularizer:
          name: None
""")
    layers = [(str(path), load_config_file(path, "ppo")),
              ("command-line override", parse_overrides(["ppo.central_value_config.mini_epochs=2"], "ppo"))]
    cv = PPOConfig.resolve(layers).central_value_config
    assert (cv.minibatch_size, cv.mini_epochs, cv.learning_rate, cv.units, cv.activation) == (
        64, 2, 5e-4, (512, 256), "elu")
    # Set off again by a later layer.
    assert PPOConfig.resolve(layers + [("override", {"central_value_config": None})]).central_value_config is None
    # A run directory's ppo.yaml (nested, with lists) reads back to the same settings.
    from envcoder.runs.directory import RunDirectory
    run = RunDirectory(tmp_path / "run", resume=False)
    run.write_algorithm_config(PPOConfig.resolve(layers), "ppo")
    again = PPOConfig.resolve([("ppo.yaml", load_config_file(tmp_path / "run" / "ppo.yaml", "ppo"))])
    assert again == PPOConfig.resolve(layers)
    for bad, message in (({"lr": 1e-3}, "central_value_config: unknown central_value_config setting 'lr'"),
                         ({"network": {"name": "resnet_actor"}}, "network.name: 'resnet_actor' is not supported"),
                         ({"network": {"mlp": {"units": [64], "d2rl": True}}}, "network.mlp.d2rl: True is not"),
                         ({"units": "big"}, "units expects"),
                         ("fast", "central_value_config must be a mapping")):
        with pytest.raises(ConfigError, match=message):
            PPOConfig.resolve([("my.yaml", {"central_value_config": bad})])


# ---- clear errors ----------------------------------------------------------------------------------

def test_errors_name_what_to_do(tmp_path):
    cartpole = get_task("Cartpole")
    sim = Simulator(cartpole.model_file, cartpole.substeps)
    candidate = validate_candidate(cartpole, sim, load_candidate(BUNDLED / "cartpole" / "alive_bonus.py"))
    with pytest.raises(ValueError, match="--algo dqn needs discrete actions.*CartpoleDiscrete"):
        GroupedDQN(cartpole, [candidate], DQNConfig(), 8, (0,), sim)
    with pytest.raises(ValueError, match=r"central_value_config.minibatch_size 7 must divide .* = 128"):
        GroupedPPO(cartpole, [candidate],
                       PPOConfig(central_value_config=CentralValueConfig(minibatch_size=7)), 8, (0,), sim)
    discrete = get_task("CartpoleDiscrete")
    two = validate_candidate(discrete, sim, load_candidate(BUNDLED / "cartpolediscrete" / "alive_bonus.py"))
    with pytest.raises(ValueError, match="collects 32 transitions per candidate .* more than replay_buffer_size 16"):
        GroupedDQN(discrete, [two], DQNConfig(steps_per_epoch=4, batch_size=8, replay_buffer_size=16), 8, (0,), sim)
    with pytest.raises(ValueError, match="batch_size 32 exceeds replay_buffer_size 16"):
        GroupedDQN(discrete, [two], DQNConfig(batch_size=32, replay_buffer_size=16), 8, (0,), sim)
    with pytest.raises(ConfigError, match="this run trains with --algo dqn; write dqn.NAME=VALUE"):
        parse_overrides(["ppo.gamma=0.9"], "dqn")
    assert parse_overrides(["dqn.gamma=0.9"], "dqn") == {"gamma": 0.9}
    with pytest.raises(ConfigError, match="unknown DQN setting 'gama'; did you mean 'gamma'"):
        DQNConfig.resolve([("x.yaml", {"gama": 0.9})])
    sectioned = tmp_path / "both.yaml"
    sectioned.write_text("ppo:\n  gamma: 0.9\ndqn:\n  gamma: 0.8\n")
    assert load_config_file(sectioned, "dqn") == {"gamma": 0.8} and load_config_file(sectioned) == {"gamma": 0.9}
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text("ppo:\n  gamma: 0.9\ngamma: 0.8\n")
    with pytest.raises(ConfigError, match="mixes algorithm sections"):
        load_config_file(mixed)
    assert main(["eval", "--task", "Cartpole", "--algo", "dqn", "--out", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists()


# ---- learning, end to end --------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("algo, envs", [("ppo", 64), ("dqn", 256)])
def test_cartpole_discrete_learns_and_ranks(tmp_path, algo, envs):
    """`envcoder eval --task CartpoleDiscrete --algo ALGO` with the task's settings. PPO balances the pole with
    every reasonable reward; DQN is less reliable per seed (docs/benchmarks/algorithms.md: 3 of 4 seeds on the
    GPU), so its bar is that its best candidate keeps the pole up most of the time (the poor reward's policy: 0.06)
    and the poor reward is ranked last. Its outcome depends on the machine: the same commits that passed a bar
    of 0.9 before reached 0.888 on a later CI machine (AVX-512), the same figure for code before and after #15."""
    out = tmp_path / algo
    assert main(["eval", "--task", "CartpoleDiscrete", "--algo", algo, "--envs-per-candidate", str(envs),
                 "--no-tensorboard", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["algo"] == algo and algo in config and (out / f"{algo}.yaml").exists()
    ranking = json.loads((out / "results.json").read_text())["ranking"]
    fitness = {r["name"]: r["fitness_mean"] for r in ranking}
    assert ranking[-1]["name"] == "poor_spin" and fitness["poor_spin"] < 0.5, fitness
    if algo == "ppo":
        assert min(v for k, v in fitness.items() if k != "poor_spin") >= 0.9, fitness
    else:
        assert ranking[0]["fitness_mean"] >= 0.8, fitness


# ---- resume and play, per algorithm ------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("algo, task, files, settings", [
    ("dqn", "CartpoleDiscrete", ["good_upright", "three_forces"],
     ["dqn.batch_size=16", "dqn.replay_buffer_size=256", "dqn.units=[16, 16]"]),
    ("sac", "Cartpole", ["good_upright", "alive_bonus"],
     ["sac.batch_size=16", "sac.replay_buffer_size=256", "sac.learning_starts=1", "sac.units=[16, 16]"]),
    ("ppo", "Cartpole", ["privileged", "alive_bonus"],  # with a central value of its own size
     ["ppo.units=[16, 16]", "ppo.central_value_config.units=[8]", "ppo.central_value_config.mini_epochs=2"]),
])
def test_a_killed_run_resumes_to_the_uninterrupted_result_and_plays(tmp_path, monkeypatch, algo, task, files,
                                                                    settings):
    from envcoder.runs.directory import RunDirectory
    from envcoder.runs.play import play

    functions = tmp_path / "functions"
    functions.mkdir()
    for name in files:
        source = CRITIC_FILE if name == "privileged" else (BUNDLED / task.lower() / f"{name}.py").read_text()
        (functions / f"{name}.py").write_text(source)

    def args(out):
        return ["eval", "--task", task, "--algo", algo, "--functions", str(functions), "--envs-per-candidate", "16",
                "--iterations", "6", f"{algo}.save_frequency=2", f"{algo}.save_best_after=2", *settings,
                "--no-tensorboard", "--out", str(out)]

    assert main(args(tmp_path / "whole")) == 0
    append = RunDirectory.append_metrics

    def killed_at_iteration_3(self, iteration, *rest):  # after the checkpoint of iteration 2
        if iteration == 3:
            raise KeyboardInterrupt
        return append(self, iteration, *rest)

    with monkeypatch.context() as killing:
        killing.setattr(RunDirectory, "append_metrics", killed_at_iteration_3)
        assert main(args(tmp_path / "killed")) == 130
    assert main(["eval", "--resume", str(tmp_path / "killed")]) == 0
    whole, resumed = (json.loads((tmp_path / run / "results.json").read_text()) for run in ("whole", "killed"))
    assert whole["ranking"] == resumed["ranking"] and whole["groups"] == resumed["groups"]
    assert resumed["timings"]["resumed_after_iteration"] == 2
    with np.load(tmp_path / "whole" / "checkpoints" / "train_state.npz") as x, \
            np.load(tmp_path / "killed" / "checkpoints" / "train_state.npz") as y:
        assert x.files == y.files  # every leaf, replay buffers included; NaN (no best yet) equals NaN
        assert all(np.array_equal(x[k], y[k], equal_nan=x[k].dtype.kind == "f") for k in x.files)
    # The saved policies play: deterministic episodes of the candidate's last policy.
    result = play(tmp_path / "whole", files[0], which="last", episodes=2)
    assert len(result.episode_length) == 2 and all(n >= 1 for n in result.episode_length)
    assert all(0.0 <= f <= 1.0 for f in result.task_fitness)


# ---- SAC -------------------------------------------------------------------------------------------

def test_squashed_gaussian_log_prob_by_hand():
    mean, log_std = jnp.array([[0.2, 9.0]]), jnp.array([[math.log(0.5), 0.0]])
    noise = jnp.array([[0.6, 1.0]])
    action, log_prob = squashed_sample(mean, log_std, noise, jnp.array([1.0, 0.0]))  # the second dim is padding
    u = 0.2 + 0.5 * 0.6
    expected = (-0.5 * 0.6**2 - math.log(0.5) - 0.5 * math.log(2 * math.pi)) - math.log(1 - math.tanh(u) ** 2 + 1e-6)
    np.testing.assert_allclose(action, [[math.tanh(u), 0.0]], rtol=1e-6)
    assert float(log_prob[0]) == pytest.approx(expected, rel=1e-5)


def test_sac_losses_by_hand():
    """One observation, one action dim, linear networks; the loss's own noise is drawn again here."""
    def linear(w):
        return [(jnp.array(w, jnp.float32), jnp.zeros(len(w[0]), jnp.float32))]
    params = {"actor": linear([[0.5, 0.0]]), "q1": linear([[1.0], [2.0]]), "q2": linear([[3.0], [-1.0]]),
              "target1": linear([[1.0], [1.0]]), "target2": linear([[2.0], [0.0]]), "log_alpha": jnp.log(0.2)}
    batch = Replay(obs=jnp.array([[1.0]]), actions=jnp.array([[0.5]]), rewards=jnp.array([1.0]),
                   next_obs=jnp.array([[2.0]]), terminals=jnp.array([0.0]), position=jnp.array(0), size=jnp.array(1))
    config = SACConfig(gamma=0.5, normalize_input=False, activation="relu")
    key = jax.random.PRNGKey(3)
    loss, info = sac_loss(params, batch, RunningMeanStd.create((1,)), jnp.ones(1), key, config)
    k_next, k_now = jax.random.split(key)
    log_std = -5.0 + 0.5 * 7.0 * (math.tanh(0.0) + 1.0)  # raw log std 0 -> -1.5

    def sample(obs, k):
        n = float(jax.random.normal(jax.random.fold_in(k, 0), (1,))[0])  # action dim 0's own key
        u = 0.5 * obs + math.exp(log_std) * n
        a = math.tanh(u)
        return a, -0.5 * n * n - log_std - 0.5 * math.log(2 * math.pi) - math.log(1 - a * a + 1e-6)

    a_next, lp_next = sample(2.0, k_next)
    next_q = min(2.0 + a_next, 2.0 * 2.0 + 0.0 * a_next)
    y = 1.0 + 0.5 * (next_q - 0.2 * lp_next)
    critic = (1.0 + 2.0 * 0.5 - y) ** 2 + (3.0 - 0.5 - y) ** 2
    a_now, lp_now = sample(1.0, k_now)
    actor = 0.2 * lp_now - min(1.0 + 2.0 * a_now, 3.0 - a_now)
    alpha_loss = -0.2 * (lp_now - 1.0)  # target entropy −1 for one action dim
    assert float(info.critic) == pytest.approx(critic, rel=1e-4)
    assert float(info.actor) == pytest.approx(actor, rel=1e-4)
    assert float(info.alpha_loss) == pytest.approx(alpha_loss, rel=1e-4)
    assert float(loss) == pytest.approx(critic + actor + alpha_loss, rel=1e-4)
    # Each loss reaches only its own parameters: the targets get no gradient, the critics none from the actor.
    grads, _ = jax.grad(sac_loss, has_aux=True)(params, batch, RunningMeanStd.create((1,)), jnp.ones(1), key, config)
    assert all(float(jnp.abs(g).sum()) == 0.0 for g in jax.tree.leaves((grads["target1"], grads["target2"])))
    critic_only = jax.grad(lambda q: sac_loss({**params, "q1": q}, batch, RunningMeanStd.create((1,)), jnp.ones(1),
                                              key, config)[1].critic)(params["q1"])
    np.testing.assert_allclose(grads["q1"][0][0], critic_only[0][0], rtol=1e-6)


TWO_ACTIONS = '''
ACTION_DIM = 2


def compute_torque(action, state):
    return 15.0 * (action[:, :1] + action[:, 1:2])
'''


@pytest.fixture(scope="module")
def sac_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sac")
    (root / "two_actions.py").write_text(TWO_ACTIONS)
    task = get_task("Cartpole")
    sim = Simulator(task.model_file, task.substeps)
    states = rollout_states(task, sim)
    candidates = {"good_upright": load_candidate(BUNDLED / "cartpole" / "good_upright.py", SHAPER_TYPES),
                  "two_actions": load_candidate(root / "two_actions.py", SHAPER_TYPES)}
    candidates = {n: validate_candidate(task, sim, c, states) for n, c in candidates.items()}
    config = tiny.sac(task)

    def train(selected):
        run = tiny.train(task, [candidates[n] for n in selected], 3, config, sim=sim, evaluate=True)
        return run.trainer, run.ts, run.history, run.evaluation

    return {"candidates": candidates, "grouped": train(["good_upright", "two_actions"]), "alone": train(["good_upright"])}


@pytest.mark.slow
def test_a_sac_group_trained_among_others_equals_it_alone(sac_runs):
    assert sac_runs["candidates"]["two_actions"].action_dim == 2
    trainer, ts, history, _ = sac_runs["grouped"]
    assert trainer.action_dim_max == 2
    g = trainer.labels.index("good_upright#0")
    params, params_alone = jax.tree.map(lambda x: np.asarray(x[g]), ts.params), jax.tree.map(
        lambda x: np.asarray(x[0]), sac_runs["alone"][1].params)
    # The actor's last layer is [mean (A_max), log_std (A_max)]: the group's columns are 0 and A_max.
    (w, b), (w_a, b_a) = params["actor"][-1], params_alone["actor"][-1]
    np.testing.assert_allclose(w[:, [0, 2]], w_a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b[[0, 2]], b_a, rtol=1e-5, atol=1e-6)
    params["actor"], params_alone["actor"] = params["actor"][:-1], params_alone["actor"][:-1]
    for a, b in zip(jax.tree.leaves(params_alone), jax.tree.leaves(params)):  # the rest: leading parts
        np.testing.assert_allclose(b[tuple(slice(0, n) for n in a.shape)], a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(sac_runs["grouped"][3]["task_fitness"][g], sac_runs["alone"][3]["task_fitness"][0],
                               rtol=1e-5)
    # The updates ran (from the second iteration), and the one-action group never used its padded dim.
    assert np.isfinite(history[-1]["critic_loss"]).all() and np.isnan(history[0]["critic_loss"]).all()
    assert np.all(ts.own.actions[g, :, 1] == 0.0) and np.any(ts.own.actions[g, :, 0] != 0.0)
    alone = sac_runs["alone"]
    for m, m_a in zip(history, alone[2]):
        for key in ("task_fitness_per_step", "critic_loss", "actor_loss", "alpha"):
            np.testing.assert_allclose(m[key][g], m_a[key][0], rtol=1e-4, atol=1e-6, err_msg=key)


def test_sac_needs_continuous_actions():
    task = get_task("CartpoleDiscrete")
    sim = Simulator(task.model_file, task.substeps)
    candidate = validate_candidate(task, sim, load_candidate(BUNDLED / "cartpolediscrete" / "alive_bonus.py"))
    with pytest.raises(ValueError, match="--algo sac needs continuous actions.*--algo ppo or --algo dqn"):
        GroupedSAC(task, [candidate], SACConfig(), 8, (0,), sim)
