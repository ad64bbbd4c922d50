"""Wrong sign: pays backward velocity, with the healthy bonus and control cost of the Gym reward."""
import jax.numpy as jnp


def compute_reward(state):
    backward = -state["root_states"][:, 7]
    control_cost = 0.5 * jnp.sum(state["actions"] ** 2, axis=-1)
    return backward + 1.0 - control_cost, {"backward": backward, "control_cost": -control_cost}
