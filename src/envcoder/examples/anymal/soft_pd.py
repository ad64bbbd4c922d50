"""A softer, wider PD action space: stiffness 40 N·m/rad, damping 1, action scale 1.0 rad."""


def compute_torque(action, state):
    targets = 1.0 * action + state["default_dof_pos"]
    return 40.0 * (targets - state["dof_pos"]) - 1.0 * state["dof_vel"]
