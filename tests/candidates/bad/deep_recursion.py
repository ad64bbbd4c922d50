def depth(x, n):
    return depth(x + 1.0, n + 1)


def compute_reward(state):
    return depth(state["dof_pos"][:, 1], 0)
