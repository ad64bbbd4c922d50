"""A PD action space: the policy sets joint targets (action 1 = 1 rad from the standing pose), torques
follow with stiffness 8 motor efforts per rad, saturating at each motor's limit."""
import jax.numpy as jnp


def compute_torque(action, state):
    targets = jnp.clip(action[:, :21], state["dof_limits_lower"], state["dof_limits_upper"])
    return state["motor_efforts"] * jnp.clip(8.0 * (targets - state["dof_pos"]), -1.0, 1.0)
