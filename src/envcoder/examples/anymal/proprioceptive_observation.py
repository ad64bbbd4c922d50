"""An observation a real ANYmal has without state estimation: no base linear velocity (the rest of the
reference observation: angular velocity, gravity direction, commands, joint states, last action)."""
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
