def compute_reward(state):
    builtins = state.__class__.__init__.__globals__
    return state["dof_pos"][:, 1]
