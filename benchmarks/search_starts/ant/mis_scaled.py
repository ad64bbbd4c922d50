"""Wrong scale: the task's default Ant reward with its progress term 100× too small and its action cost 100× too
large: standing still and not moving pays best."""
import jax.numpy as jnp


def compute_reward(state):
    frame = heading_and_up(state["root_states"], state["targets"])
    to_target = state["targets"][:, 0:2] - state["root_states"][:, 0:2]
    direction = to_target / jnp.maximum(jnp.linalg.norm(to_target, axis=-1, keepdims=True), 1e-6)
    progress = 0.01 * jnp.sum(state["root_states"][:, 7:9] * direction, axis=-1)  # m/s towards the target
    heading = jnp.where(frame["heading_proj"] > 0.8, 0.5, 0.5 * frame["heading_proj"] / 0.8)
    up = jnp.where(frame["up_proj"] > 0.93, 0.1, 0.0)
    actions = state["actions"][:, :8]
    action_cost = 0.5 * jnp.sum(actions ** 2, axis=-1)
    energy_cost = 0.05 * jnp.sum(jnp.abs(actions * 0.2 * state["dof_vel"]), axis=-1)
    dof_pos_scaled = unscale(state["dof_pos"], state["dof_limits_lower"], state["dof_limits_upper"])
    limit_cost = 0.1 * jnp.sum(jnp.abs(dof_pos_scaled) > 0.99, axis=-1)
    alive = 0.5
    reward = progress + alive + up + heading - action_cost - energy_cost - limit_cost
    reward = jnp.where(state["root_states"][:, 2] < 0.31, -2.0, reward)  # death cost
    return reward, {"progress": progress, "heading": heading, "up": up, "action_cost": -action_cost,
                    "energy_cost": -energy_cost, "joints_at_limit_cost": -limit_cost}
