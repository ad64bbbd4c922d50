def compute_reward(state):
    return state["progress_buf"]
