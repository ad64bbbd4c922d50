"""Friction and mass randomized over the held-out ranges from the first iteration."""

CURRICULUM = {
    "friction": {"range": [0.5, 1.5]},
    "mass": {"range": [0.8, 1.2]},
}
