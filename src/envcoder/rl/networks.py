"""Actor and critic MLPs as plain init/apply functions, so all candidates' parameters stack into one pytree.

Parameters of one candidate: `{"actor": [(W, b), ...], "critic": [(W, b), ...], "log_std": [A]}`. The critic
reads the actor's observation, or, in an asymmetric actor-critic, a critic observation of its own. A shared
network (rl_games' `separate: False`) has one MLP with two heads: the critic is then one layer, the value head,
on the actor's last hidden layer.
A candidate's network is initialized at its own observation/action sizes and then zero-padded to the
run's largest sizes, so padding changes neither its initial values nor (with masking) its training.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

ACTIVATIONS = {"elu": jax.nn.elu, "relu": jax.nn.relu, "tanh": jnp.tanh, "silu": jax.nn.silu}


def init_per_group(init, keys):
    """`init(key)` for each group's key of `keys [G, 2]`, stacked over groups: vmapped, except on the CPU.

    There jaxlib's batched QR (the orthogonal initialization) can deadlock its thread pool when two batched QRs
    run at once on a machine with few cores: on 2 cores, Anymal's 512-unit layers hang `init` every time, with
    every thread idle. A loop over the groups gives the same values (the same QR per matrix) without it."""
    if jax.default_backend() == "cpu":
        return jax.lax.map(init, keys)
    return jax.vmap(init)(keys)


def init_mlp(key, sizes, output_scale):
    layers = []
    keys = jax.random.split(key, len(sizes) - 1)
    for i, (k, n_in, n_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
        scale = output_scale if i == len(sizes) - 2 else jnp.sqrt(2.0)
        layers.append((jax.nn.initializers.orthogonal(scale)(k, (n_in, n_out), jnp.float32),
                       jnp.zeros((n_out,), jnp.float32)))
    return layers


def init_actor_critic(key, obs_dim: int, action_dim: int, units, sigma_init: float = 0.0,
                      critic_obs_dim: int | None = None, critic_units=None, shared: bool = False):
    """Parameters for one candidate with its own `obs_dim` and `action_dim` (and `critic_obs_dim`, the size of the
    critic's own observation; None: the critic reads the actor's). `critic_units`: the critic's hidden widths
    (None: `units`). `shared`: the critic is only a value head on the actor's last hidden layer."""
    k_actor, k_critic = jax.random.split(key)
    critic_sizes = (units[-1], 1) if shared else (critic_obs_dim or obs_dim, *(critic_units or units), 1)
    return {
        "actor": init_mlp(k_actor, (obs_dim, *units, action_dim), 0.01),
        "critic": init_mlp(k_critic, critic_sizes, 1.0),
        "log_std": jnp.full((action_dim,), sigma_init, jnp.float32),
    }


def pad_actor_critic(params, obs_dim_max: int, action_dim_max: int, critic_obs_dim_max: int | None = None,
                     shared: bool = False):
    """Zero-pad one candidate's parameters to the run's largest observation and action sizes (and critic
    observation size; a shared network's value head reads the hidden layer, which is not padded)."""
    def pad_input(layers, size):
        (w, b), rest = layers[0], layers[1:]
        return [(jnp.pad(w, ((0, size - w.shape[0]), (0, 0))), b), *rest]

    actor = pad_input(params["actor"], obs_dim_max)
    w, b = actor[-1]
    extra = action_dim_max - w.shape[1]
    actor[-1] = (jnp.pad(w, ((0, 0), (0, extra))), jnp.pad(b, (0, extra)))
    critic = params["critic"] if shared else pad_input(params["critic"], critic_obs_dim_max or obs_dim_max)
    return {"actor": actor, "critic": critic, "log_std": jnp.pad(params["log_std"], (0, extra))}


def apply_mlp(layers, x, activation):
    for w, b in layers[:-1]:
        x = activation(x @ w + b)
    w, b = layers[-1]
    return x @ w + b


def apply_actor(params, obs, activation: str = "elu"):
    """`obs [..., D]` (normalized) -> action mean (or logits) `[..., A]` and log std `[A]`, without the critic."""
    return apply_mlp(params["actor"], obs, ACTIVATIONS[activation]), params["log_std"]


def apply_critic(layers, obs, activation: str = "elu"):
    """`obs [..., C]` (normalized) -> value `[...]` (normalized units)."""
    return apply_mlp(layers, obs, ACTIVATIONS[activation])[..., 0]


def apply_actor_critic(params, obs, activation: str = "elu", critic_obs=None, critic_activation: str | None = None,
                       shared: bool = False):
    """`obs [..., D]` (normalized) -> action mean (or logits) `[..., A]`, log std `[A]`, value `[...]` (normalized
    units) of `critic_obs [..., C]` (normalized), or of `obs` when it is None. `critic_activation`: the critic's
    (None: `activation`). `shared`: the value head reads the actor's last hidden layer."""
    if shared:
        hidden = obs
        for w, b in params["actor"][:-1]:
            hidden = ACTIVATIONS[activation](hidden @ w + b)
        (w_mu, b_mu), ((w_v, b_v),) = params["actor"][-1], params["critic"]
        return hidden @ w_mu + b_mu, params["log_std"], (hidden @ w_v + b_v)[..., 0]
    mu, log_std = apply_actor(params, obs, activation)
    value = apply_critic(params["critic"], obs if critic_obs is None else critic_obs, critic_activation or activation)
    return mu, log_std, value


def init_q_network(key, obs_dim: int, num_actions: int, units):
    """A Q-network `[(W, b), ...]` for one candidate: its observation -> one value per action."""
    return init_mlp(key, (obs_dim, *units, num_actions), 1.0)


def pad_q_network(layers, obs_dim_max: int, num_actions_max: int):
    """Zero-pad a Q-network to the run's largest observation size and number of actions."""
    (w, b), rest = layers[0], list(layers[1:])
    layers = [(jnp.pad(w, ((0, obs_dim_max - w.shape[0]), (0, 0))), b), *rest]
    w, b = layers[-1]
    extra = num_actions_max - w.shape[1]
    layers[-1] = (jnp.pad(w, ((0, 0), (0, extra))), jnp.pad(b, (0, extra)))
    return layers


def apply_q_network(layers, obs, activation: str = "relu"):
    """`obs [..., D]` (normalized) -> action values `[..., A]`."""
    return apply_mlp(layers, obs, ACTIVATIONS[activation])
