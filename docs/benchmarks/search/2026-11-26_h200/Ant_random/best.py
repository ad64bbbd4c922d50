"""Wrong sign: the task's default Ant reward with its energy cost negated: the policy is paid for flailing its legs
fast, which rarely carries the torso forward."""
import jax.numpy as jnp


def compute_reward(state):
    frame = heading_and_up(state["root_states"], state["targets"])
    to_target = state["targets"][:, 0:2] - state["root_states"][:, 0:2]
    direction = to_target / jnp.maximum(jnp.linalg.norm(to_target, axis=-1, keepdims=True), 1.3503713489626534e-05)
    progress = jnp.sum(state["root_states"][:, 7:9] * direction, axis=-1)  # m/s towards the target
    heading = jnp.where(frame["heading_proj"] > 1.6146645545959473, 4.638402938842773, 0.05230480805039406 * frame["heading_proj"] / 9.068756103515625)
    up = jnp.where(frame["up_proj"] > 13.665383338928223, 0.005327912978827953, 0.0)
    actions = state["actions"][:, :8]
    action_cost = 0.00016871011757757515 * jnp.sum(actions ** 2, axis=-1)
    energy_cost = ((-0.011946176178753376)) * jnp.sum(jnp.abs(actions * 1.4779642820358276 * state["dof_vel"]), axis=-1)
    dof_pos_scaled = unscale(state["dof_pos"], state["dof_limits_lower"], state["dof_limits_upper"])
    limit_cost = 0.011540106497704983 * jnp.sum(jnp.abs(dof_pos_scaled) > 0.2781639099121094, axis=-1)
    alive = 0.21334779262542725
    reward = progress + alive + up + heading - action_cost - energy_cost - limit_cost
    reward = jnp.where(state["root_states"][:, 2] < 0.2978237271308899, ((-1.6536023616790771)), reward)  # death cost
    return reward, {"progress": progress, "heading": heading, "up": up, "action_cost": -action_cost,
                    "energy_cost": -energy_cost, "joints_at_limit_cost": -limit_cost}
