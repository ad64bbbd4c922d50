"""Wrong objective: pays planar speed in any direction."""
import jax.numpy as jnp


def compute_reward(state):
    speed = jnp.linalg.norm(state["root_states"][:, 7:9], axis=-1)
    control_cost = 0.5 * jnp.sum(state["actions"] ** 2, axis=-1)
    return speed + 1.0 - control_cost, {"speed": speed, "control_cost": -control_cost}
