# offline: from it00_c07; line 4: 1.294 -> 7.237, line 5: 0.8 -> 0.7965
"""Deliberately poor weights: every step costs more than it pays (0.6 - 0.8 < 0), so the policy is paid to
end episodes early by dropping the pole. The code is fine; a better balance of its constants fixes it."""
ALIVE_BONUS = 7.237
STEP_COST = 0.7965
ANGLE_WEIGHT = 0.596


def compute_reward(state):
    angle = state["dof_pos"][:, 1]
    return ALIVE_BONUS - STEP_COST - ANGLE_WEIGHT * angle * angle
