"""PPO math against plain loops and a hand-worked example."""

import functools
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envcoder.rl.ppo.config import PPOConfig
from envcoder.rl.networks import apply_actor_critic, init_actor_critic, init_per_group, pad_actor_critic
from envcoder.rl.normalizer import RunningMeanStd
from envcoder.rl.distributions import gaussian_entropy, gaussian_log_prob
from envcoder.rl.ppo.losses import Minibatch, adaptive_learning_rate, compute_gae, linear_learning_rate, ppo_loss


def gae_loop(rewards, values, dones, last_value, gamma, lam):
    T, E = rewards.shape
    advantages = np.zeros((T, E))
    for e in range(E):
        running = 0.0
        for t in reversed(range(T)):
            next_value = last_value[e] if t == T - 1 else values[t + 1, e]
            not_done = 1.0 - dones[t, e]
            delta = rewards[t, e] + gamma * next_value * not_done - values[t, e]
            running = delta + gamma * lam * not_done * running
            advantages[t, e] = running
    return advantages


def test_gae_matches_plain_loop():
    rng = np.random.default_rng(0)
    T, E = 7, 3
    rewards, values = rng.normal(size=(T, E)), rng.normal(size=(T, E))
    dones = (rng.uniform(size=(T, E)) < 0.3).astype(np.float64)
    last_value = rng.normal(size=E)
    adv, ret = compute_gae(jnp.asarray(rewards), jnp.asarray(values), jnp.asarray(dones), jnp.asarray(last_value),
                           0.99, 0.95)
    expected = gae_loop(rewards, values, dones, last_value, 0.99, 0.95)
    np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ret, expected + values, rtol=1e-5, atol=1e-6)


def test_gae_single_step_by_hand():
    # One step, not done: A = r + gamma * V(s') - V(s) = 1 + 0.5 * 2 - 0.5 = 1.5
    adv, _ = compute_gae(jnp.array([[1.0]]), jnp.array([[0.5]]), jnp.array([[0.0]]), jnp.array([2.0]), 0.5, 0.9)
    assert float(adv[0, 0]) == pytest.approx(1.5)
    # Done: no bootstrap, A = 1 - 0.5
    adv, _ = compute_gae(jnp.array([[1.0]]), jnp.array([[0.5]]), jnp.array([[1.0]]), jnp.array([2.0]), 0.5, 0.9)
    assert float(adv[0, 0]) == pytest.approx(0.5)


def test_ppo_loss_hand_worked_example():
    # Linear actor mu = 0.5 * obs and critic V = 1.0 * obs (no hidden layers), log std 0.
    params = {"actor": [(jnp.array([[0.5]]), jnp.array([0.0]))],
              "critic": [(jnp.array([[1.0]]), jnp.array([0.0]))],
              "log_std": jnp.array([0.0])}
    obs = jnp.array([[1.0], [2.4]])  # mu = [0.5, 1.2]; values = [1.0, 2.4]
    actions = jnp.array([[1.0], [0.0]])
    log_2pi = np.log(2 * np.pi)
    new_log_probs = np.array([-0.5 * 0.25 - 0.5 * log_2pi, -0.5 * 1.44 - 0.5 * log_2pi])
    old_log_probs = new_log_probs + np.array([-0.1, 0.5])  # ratios e^0.1 and e^-0.5
    batch = Minibatch(obs=obs, actions=actions, log_probs=jnp.asarray(old_log_probs, jnp.float32),
                      mu=jnp.array([[0.5], [1.2]]), log_std=jnp.zeros((2, 1)),
                      values=jnp.array([0.5, 2.5]), returns=jnp.array([2.0, 1.0]), advantages=jnp.array([1.0, -1.0]))
    config = PPOConfig(e_clip=0.2, critic_coef=2.0, entropy_coef=0.01, bounds_loss_coef=1.0,
                       normalize_input=False, normalize_advantage=False)
    total, info = ppo_loss(params, batch, RunningMeanStd.create((1,)), jnp.ones(1), config)
    # actor: sample 1 ratio 1.10517 (inside the clip) -> -1.10517; sample 2 ratio 0.60653, A=-1 -> max(0.60653, 0.8)
    assert float(info.actor) == pytest.approx((-np.exp(0.1) + 0.8) / 2, abs=1e-5)
    # critic: sample 1 clipped value 0.7 -> (0.7-2)^2 = 1.69; sample 2 (2.4-1)^2 = 1.96
    assert float(info.critic) == pytest.approx((1.69 + 1.96) / 2, abs=1e-5)
    assert float(info.entropy) == pytest.approx(0.5 + 0.5 * log_2pi, abs=1e-5)
    assert float(info.bounds) == pytest.approx(0.01 / 2, abs=1e-6)  # mu 1.2 is 0.1 past 1.1
    assert float(info.kl) == pytest.approx(0.0, abs=1e-7)
    expected = (-np.exp(0.1) + 0.8) / 2 + 0.5 * 2.0 * 1.825 - 0.01 * (0.5 + 0.5 * log_2pi) + 0.005
    assert float(total) == pytest.approx(expected, abs=1e-5)


def test_a_shared_network_has_two_heads_on_one_hidden_layer_and_its_value_loss_trains_that_layer():
    """rl_games' `separate: False`: the value head reads the actor's last hidden layer, so the value loss moves the
    policy's layers; with a separate critic it cannot."""
    params = init_actor_critic(jax.random.PRNGKey(0), 3, 2, (4,), shared=True)
    assert [w.shape for w, _ in params["critic"]] == [(4, 1)]
    obs = jax.random.normal(jax.random.PRNGKey(1), (5, 3))
    (w1, b1), (w2, b2) = params["actor"]
    ((wv, bv),) = params["critic"]
    hidden = np.where(obs @ w1 + b1 > 0, obs @ w1 + b1, np.expm1(np.minimum(obs @ w1 + b1, 0)))  # elu
    mu, log_std, value = apply_actor_critic(params, obs, shared=True)
    np.testing.assert_allclose(mu, hidden @ w2 + b2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, (hidden @ wv + bv)[:, 0], rtol=1e-5, atol=1e-6)
    # Padded to 5 observation entries and 3 actions: the value head is not padded, and zeros change nothing.
    padded = pad_actor_critic(params, 5, 3, shared=True)
    assert padded["critic"][0][0].shape == (4, 1) and padded["actor"][0][0].shape == (5, 4)
    mu_p, _, value_p = apply_actor_critic(padded, jnp.pad(obs, ((0, 0), (0, 2))), shared=True)
    np.testing.assert_allclose(mu_p[:, :2], mu, rtol=1e-6)
    np.testing.assert_allclose(value_p, value, rtol=1e-6)
    # No advantage, no entropy or bounds term: only the value loss has a gradient, and only a shared network passes
    # it to the first layer.
    batch = Minibatch(obs=obs, actions=jnp.zeros((5, 2)), log_probs=jnp.zeros(5), mu=jnp.zeros((5, 2)),
                      log_std=jnp.zeros((5, 2)), values=jnp.zeros(5), returns=jnp.full(5, 3.0),
                      advantages=jnp.zeros(5))
    for separate in (False, True):
        config = PPOConfig(separate=separate, entropy_coef=0.0, bounds_loss_coef=0.0, normalize_input=False,
                           normalize_advantage=False)
        net = params if not separate else {**params, "critic": [(jnp.full((3, 4), 0.3), jnp.zeros(4)),
                                                                 (jnp.ones((4, 1)), jnp.zeros(1))]}
        grads = jax.jit(jax.grad(lambda p: ppo_loss(p, batch, RunningMeanStd.create((3,)), jnp.ones(2), config)[0]))(
            net)
        first = float(jnp.abs(grads["actor"][0][0]).sum())
        assert (first > 1e-4) if not separate else (first == 0.0), (separate, first)


def test_masked_action_dims_do_not_count():
    mu, log_std = jnp.array([[0.1, 5.0]]), jnp.array([0.3, -2.0])
    mask = jnp.array([1.0, 0.0])
    for padded_value in (0.0, 100.0):
        actions = jnp.array([[0.4, padded_value]])
        one_dim = gaussian_log_prob(actions[:, :1], mu[:, :1], log_std[:1], jnp.ones(1))
        assert float(gaussian_log_prob(actions, mu, log_std, mask)[0]) == pytest.approx(float(one_dim[0]))
    assert float(gaussian_entropy(log_std, mask)) == pytest.approx(float(gaussian_entropy(log_std[:1], jnp.ones(1))))


def test_adaptive_learning_rate_rule():
    assert float(adaptive_learning_rate(1e-3, 0.05, 0.008)) == pytest.approx(1e-3 / 1.5)  # kl > 2 * threshold
    assert float(adaptive_learning_rate(1e-3, 0.001, 0.008)) == pytest.approx(1.5e-3)  # kl < threshold / 2
    assert float(adaptive_learning_rate(1e-3, 0.008, 0.008)) == pytest.approx(1e-3)
    assert float(adaptive_learning_rate(9e-3, 0.0, 0.008)) == pytest.approx(1e-2)  # capped


def test_linear_learning_rate_rule():
    assert float(linear_learning_rate(1e-3, 0, 100)) == pytest.approx(1e-3)
    assert float(linear_learning_rate(1e-3, 25, 100)) == pytest.approx(7.5e-4)
    assert float(linear_learning_rate(1e-3, 150, 100)) == 0.0


def test_running_mean_std_matches_numpy():
    rng = np.random.default_rng(1)
    a, b = rng.normal(3.0, 2.0, size=(50, 4)), rng.normal(-1.0, 0.5, size=(70, 4))
    rms = RunningMeanStd.create((4,)).update(jnp.asarray(a)).update(jnp.asarray(b))
    both = np.concatenate([a, b])
    np.testing.assert_allclose(rms.mean, both.mean(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rms.var, both.var(0), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(rms.denormalize(rms.normalize(jnp.asarray(a))), a, rtol=1e-4, atol=1e-4)


INIT_MANY_GROUPS = """
import jax
from envcoder.rl.networks import apply_actor_critic, init_actor_critic, init_per_group, pad_actor_critic
init = jax.jit(lambda keys: [init_per_group(lambda k, o=o: init_actor_critic(k, o, 12, (512, 256, 128)), keys)
                             for o in (48, 60, 235)])
jax.block_until_ready(init(jax.random.split(jax.random.PRNGKey(0), 10)))
print("done")
"""


@pytest.mark.slow  # 30 s here: a fresh process
def test_many_groups_initialize_on_a_few_cpu_cores():
    # Vmapped over 10 groups at Anymal's layer sizes, jaxlib's batched QR (the orthogonal initialization) hung on
    # a 2-core machine every time; `init_per_group` loops on the CPU. A subprocess, so a hang fails, not stalls.
    out = subprocess.run([sys.executable, "-c", INIT_MANY_GROUPS], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0 and "done" in out.stdout, out.stderr[-2000:]


def test_groups_initialized_in_a_loop_equal_vmapped_ones():
    keys = jax.random.split(jax.random.PRNGKey(3), 4)
    init = functools.partial(init_actor_critic, obs_dim=7, action_dim=3, units=(16, 8))
    looped = jax.jit(lambda k: init_per_group(lambda key: init(key), k))(keys)
    vmapped = jax.jit(jax.vmap(lambda key: init(key)))(keys)
    for a, b in zip(jax.tree.leaves(looped), jax.tree.leaves(vmapped)):
        np.testing.assert_array_equal(a, b)
