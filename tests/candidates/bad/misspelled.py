def compute_rewards(state):
    return state["dof_pos"][:, 1]
