"""Deliberately poor weights: every step costs more than it pays (0.6 - 0.8 < 0), so the policy is paid to
end episodes early by dropping the pole. The code is fine; a better balance of its constants fixes it."""
ALIVE_BONUS = 2.952324628829956
STEP_COST = 2.813979387283325
ANGLE_WEIGHT = 0.0679805725812912


def compute_reward(state):
    angle = state["dof_pos"][:, 1]
    return ALIVE_BONUS - STEP_COST - ANGLE_WEIGHT * angle * angle
