"""Forward speed alone: nothing pays for staying up."""


def compute_reward(state):
    forward = state["qvel"][:, 0]
    return forward, {"forward": forward}
