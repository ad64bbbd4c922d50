"""Deliberately poor weights: every step costs more than it pays (0.6 - 0.8 < 0), so the policy is paid to
end episodes early by dropping the pole. The code is fine; a better balance of its constants fixes it."""
ALIVE_BONUS = 13.865091323852539
STEP_COST = 0.47728288173675537
ANGLE_WEIGHT = 0.4996402859687805


def compute_reward(state):
    angle = state["dof_pos"][:, 1]
    return ALIVE_BONUS - STEP_COST - ANGLE_WEIGHT * angle * angle
