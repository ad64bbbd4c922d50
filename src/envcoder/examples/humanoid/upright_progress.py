"""Progress towards the target only while the torso is nearly vertical, plus uprightness and alive bonuses."""
import jax.numpy as jnp


def compute_reward(state):
    root = state["root_states"]
    frame = heading_and_up(root, state["targets"])
    upright = jnp.clip((frame["up_proj"] - 0.7) / 0.3, 0.0, 1.0)
    progress = root[:, 7] * upright
    action_cost = 0.01 * jnp.sum(state["actions"] ** 2, axis=-1)
    reward = progress + 1.0 + 1.0 * upright - action_cost
    return reward, {"progress": progress, "upright": upright, "action_cost": -action_cost}
