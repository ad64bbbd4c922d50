def compute_reward(state):
    velocity = state.pop("dof_vel")
    return velocity[:, 1]
