"""Wider than the held-out ranges, plus observation noise, weaker and stronger motors and a one-step action
latency in half of the episodes: more robust, or too hard to learn in the budget?"""

CURRICULUM = {
    "friction": {"range": [0.3, 2.0]},
    "mass": {"range": [0.7, 1.3]},
    "motor_strength": {"range": [0.8, 1.2]},
    "push_velocity": {"range": [0.0, 1.0]},
    "push_interval": {"range": [200, 200], "start": [200, 200]},
    "observation_noise": {"range": [0.0, 0.05]},
    "action_latency": {"range": [0.0, 1.0]},
}
