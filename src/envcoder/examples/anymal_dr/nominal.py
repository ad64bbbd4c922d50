"""No randomization: every episode runs the task's own physics (the baseline the others are compared with)."""


def sample_physics(key, params):
    return {}
