"""IsaacGymEnvs' Humanoid reward, written out: progress towards the target, alive bonus, upright and
heading bonuses, action/energy/joints-at-limit costs weighted by motor effort, death cost."""
import jax.numpy as jnp


def compute_reward(state):
    root = state["root_states"]
    frame = heading_and_up(root, state["targets"])
    to_target = state["targets"][:, 0:2] - root[:, 0:2]
    direction = to_target / jnp.maximum(jnp.linalg.norm(to_target, axis=-1, keepdims=True), 1e-6)
    progress = jnp.sum(root[:, 7:9] * direction, axis=-1)
    heading = jnp.where(frame["heading_proj"] > 0.8, 0.5, 0.5 * frame["heading_proj"] / 0.8)
    up = jnp.where(frame["up_proj"] > 0.93, 0.1, 0.0)
    actions = state["actions"][:, :21]
    effort_ratio = state["motor_efforts"] / jnp.max(state["motor_efforts"], axis=-1, keepdims=True)
    action_cost = 0.01 * jnp.sum(actions ** 2, axis=-1)
    energy_cost = 0.05 * jnp.sum(jnp.abs(actions * 0.1 * state["dof_vel"]) * effort_ratio, axis=-1)
    scaled = unscale(state["dof_pos"], state["dof_limits_lower"], state["dof_limits_upper"])
    limit_cost = jnp.sum((jnp.abs(scaled) > 0.98) * 0.25 * (jnp.abs(scaled) - 0.98) / 0.02 * effort_ratio, axis=-1)
    reward = progress + 2.0 + up + heading - action_cost - energy_cost - limit_cost
    reward = jnp.where(root[:, 2] < 0.8, -1.0, reward)
    return reward, {"progress": progress, "heading": heading, "up": up, "action_cost": -action_cost,
                    "energy_cost": -energy_cost, "joints_at_limit_cost": -limit_cost}
