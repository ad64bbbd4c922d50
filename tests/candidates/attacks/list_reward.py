"""A reward returned as a Python list."""


def compute_reward(state):
    return [state["dof_pos"][:, 1]]
