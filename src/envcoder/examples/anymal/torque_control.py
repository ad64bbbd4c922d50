"""Direct torque control: the policy commands joint torques (action 1 = 40 N·m) instead of PD targets."""
ACTION_DIM = 12


def compute_torque(action, state):
    return 40.0 * action
