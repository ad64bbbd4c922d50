"""Missing term: the task's default Ant reward without its progress term (alive, upright, heading and costs only):
nothing pays for moving forward."""
import jax.numpy as jnp


def compute_reward(state):
    frame = heading_and_up(state["root_states"], state["targets"])
    heading = jnp.where(frame["heading_proj"] > 0.8, 0.5, 0.5 * frame["heading_proj"] / 0.8)
    up = jnp.where(frame["up_proj"] > 0.93, 0.1, 0.0)
    actions = state["actions"][:, :8]
    action_cost = 0.005 * jnp.sum(actions ** 2, axis=-1)
    energy_cost = 0.05 * jnp.sum(jnp.abs(actions * 0.2 * state["dof_vel"]), axis=-1)
    dof_pos_scaled = unscale(state["dof_pos"], state["dof_limits_lower"], state["dof_limits_upper"])
    limit_cost = 0.1 * jnp.sum(jnp.abs(dof_pos_scaled) > 0.99, axis=-1)
    alive = 0.5
    reward = alive + up + heading - action_cost - energy_cost - limit_cost
    reward = jnp.where(state["root_states"][:, 2] < 0.31, -2.0, reward)  # death cost
    return reward, {"heading": heading, "up": up, "action_cost": -action_cost,
                    "energy_cost": -energy_cost, "joints_at_limit_cost": -limit_cost}
