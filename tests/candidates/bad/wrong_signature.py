def compute_reward(state, action):
    return state["dof_pos"][:, 1]
