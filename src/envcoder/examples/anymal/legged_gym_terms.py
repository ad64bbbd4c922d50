"""legged_gym's ANYmal C flat-terrain terms that need no history: tracking, vertical and roll/pitch
velocity penalties, a level-base penalty and the torque penalty (all scaled by the 0.02 s step, unclipped)."""
import jax.numpy as jnp


def compute_reward(state):
    root = state["root_states"]
    base_lin_vel = quat_rotate_inverse(root[:, 3:7], root[:, 7:10])
    base_ang_vel = quat_rotate_inverse(root[:, 3:7], root[:, 10:13])
    projected_gravity = quat_rotate_inverse(root[:, 3:7], state["gravity_vec"])
    dt = 0.02
    terms = {
        "tracking_lin_vel": 1.0 * jnp.exp(-jnp.sum((state["commands"][:, :2] - base_lin_vel[:, :2]) ** 2, 1) / 0.25),
        "tracking_ang_vel": 0.5 * jnp.exp(-(state["commands"][:, 2] - base_ang_vel[:, 2]) ** 2 / 0.25),
        "lin_vel_z": -2.0 * base_lin_vel[:, 2] ** 2,
        "ang_vel_xy": -0.05 * jnp.sum(base_ang_vel[:, :2] ** 2, axis=1),
        "orientation": -5.0 * jnp.sum(projected_gravity[:, :2] ** 2, axis=1),
        "torques": -2.5e-5 * jnp.sum(state["torques"] ** 2, axis=1),
    }
    terms = {name: value * dt for name, value in terms.items()}
    return sum(terms.values()), terms
