"""Asymmetric: the same proprioceptive actor, and a critic that also sees privileged simulator state (base
linear velocity, base height and the feet's contact forces), as rl_games' central value does."""
import jax.numpy as jnp


def compute_observation(state):
    base_quat = state["root_states"][:, 3:7]
    base_ang_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 10:13]) * state["ang_vel_scale"]
    projected_gravity = quat_rotate_inverse(base_quat, state["gravity_vec"])
    commands_scale = jnp.concatenate([state["lin_vel_scale"], state["lin_vel_scale"], state["ang_vel_scale"]], axis=1)
    return jnp.concatenate([
        base_ang_vel, projected_gravity, state["commands"] * commands_scale,
        (state["dof_pos"] - state["default_dof_pos"]) * state["dof_pos_scale"],
        state["dof_vel"] * state["dof_vel_scale"], state["actions"][:, :12],
    ], axis=-1)


def compute_critic_observation(state):
    base_quat = state["root_states"][:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, state["root_states"][:, 7:10]) * state["lin_vel_scale"]
    feet = state["contact_forces"].reshape(state["contact_forces"].shape[0], -1) / 500.0  # ~ the robot's weight
    return jnp.concatenate([compute_observation(state), base_lin_vel, state["root_states"][:, 2:3], feet], axis=-1)
