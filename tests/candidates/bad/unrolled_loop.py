def compute_reward(state):
    reward = state["dof_pos"][:, 1]
    for i in range(10**7):  # unrolled into ten million operations when traced
        reward = reward + 1e-9 * i
    return reward
