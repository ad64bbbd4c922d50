"""Harmful termination: the episode ends when the torso is below 0.45 m (the default ends it below 0.31 m)."""


def compute_terminal(state):
    return state["root_states"][:, 2] < 0.45
