"""Actor and critic MLPs as plain init/apply functions, so all candidates' parameters stack into one pytree.

Parameters of one candidate: `{"actor": [(W, b), ...], "critic": [(W, b), ...], "log_std": [A]}`.
A candidate's network is initialized at its own observation/action sizes and then zero-padded to the
run's largest sizes, so padding changes neither its initial values nor (with masking) its training.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

ACTIVATIONS = {"elu": jax.nn.elu, "relu": jax.nn.relu, "tanh": jnp.tanh, "silu": jax.nn.silu}


def _init_mlp(key, sizes, output_scale):
    layers = []
    keys = jax.random.split(key, len(sizes) - 1)
    for i, (k, n_in, n_out) in enumerate(zip(keys, sizes[:-1], sizes[1:])):
        scale = output_scale if i == len(sizes) - 2 else jnp.sqrt(2.0)
        layers.append((jax.nn.initializers.orthogonal(scale)(k, (n_in, n_out), jnp.float32),
                       jnp.zeros((n_out,), jnp.float32)))
    return layers


def init_actor_critic(key, obs_dim: int, action_dim: int, units, sigma_init: float = 0.0):
    """Parameters for one candidate with its own `obs_dim` and `action_dim`."""
    k_actor, k_critic = jax.random.split(key)
    return {
        "actor": _init_mlp(k_actor, (obs_dim, *units, action_dim), 0.01),
        "critic": _init_mlp(k_critic, (obs_dim, *units, 1), 1.0),
        "log_std": jnp.full((action_dim,), sigma_init, jnp.float32),
    }


def pad_actor_critic(params, obs_dim_max: int, action_dim_max: int):
    """Zero-pad one candidate's parameters to the run's largest observation and action sizes."""
    def pad_input(layers):
        (w, b), rest = layers[0], layers[1:]
        return [(jnp.pad(w, ((0, obs_dim_max - w.shape[0]), (0, 0))), b), *rest]

    actor = pad_input(params["actor"])
    w, b = actor[-1]
    extra = action_dim_max - w.shape[1]
    actor[-1] = (jnp.pad(w, ((0, 0), (0, extra))), jnp.pad(b, (0, extra)))
    return {"actor": actor, "critic": pad_input(params["critic"]),
            "log_std": jnp.pad(params["log_std"], (0, extra))}


def _mlp(layers, x, activation):
    for w, b in layers[:-1]:
        x = activation(x @ w + b)
    w, b = layers[-1]
    return x @ w + b


def apply_actor_critic(params, obs, activation: str = "elu"):
    """`obs [..., D]` (normalized) -> action mean `[..., A]`, log std `[A]`, value `[...]` (normalized units)."""
    act = ACTIVATIONS[activation]
    mu = _mlp(params["actor"], obs, act)
    value = _mlp(params["critic"], obs, act)[..., 0]
    return mu, params["log_std"], value
