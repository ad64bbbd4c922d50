import torch
from typing import Tuple, Dict


@torch.jit.script
def compute_reward(obs_buf: torch.Tensor, reset_dist: float) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    # keep the pole up and the cart near the middle
    pole_angle = obs_buf[:, 2]
    centred = 1.0 - torch.abs(obs_buf[:, 0]) / reset_dist
    upright = torch.cos(pole_angle)
    return upright + 0.1 * centred, {"upright": upright, "centred": centred}
