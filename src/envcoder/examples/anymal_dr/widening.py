"""The same ranges as friction_mass_pushes, widened linearly from the task's physics over 300 iterations."""

CURRICULUM = {
    "friction": {"range": [0.5, 1.5], "iters": 300},
    "mass": {"range": [0.8, 1.2], "iters": 300},
    "push_velocity": {"range": [0.0, 0.5], "iters": 300},
    "push_interval": {"range": [250, 250], "start": [250, 250]},
}
