"""Friction, mass and pushes (up to ±0.5 m/s every 5 s) over the held-out ranges from the first iteration."""

CURRICULUM = {
    "friction": {"range": [0.5, 1.5]},
    "mass": {"range": [0.8, 1.2]},
    "push_velocity": {"range": [0.0, 0.5]},
    "push_interval": {"range": [250, 250], "start": [250, 250]},
}
