"""Forward velocity alone: no bonus for staying up, no cost for effort."""


def compute_reward(state):
    return state["root_states"][:, 7]
