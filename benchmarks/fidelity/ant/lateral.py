"""Wrong axis: pays sideways (+y) velocity."""
import jax.numpy as jnp


def compute_reward(state):
    lateral = state["root_states"][:, 8]
    control_cost = 0.5 * jnp.sum(state["actions"] ** 2, axis=-1)
    return lateral + 1.0 - control_cost, {"lateral": lateral, "control_cost": -control_cost}
