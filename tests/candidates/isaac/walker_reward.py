import torch
from typing import Tuple, Dict


@torch.jit.script
def compute_reward(root_states: torch.Tensor, potentials: torch.Tensor, prev_potentials: torch.Tensor,
                   up_vec: torch.Tensor, actions: torch.Tensor, dt: float) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    # progress along the potential, an upright bonus and a small action cost
    progress = potentials - prev_potentials
    speed_temperature = 2.0
    speed = torch.tanh(root_states[:, 7] / speed_temperature)
    upright = torch.where(up_vec[:, 2] > 0.9, torch.ones_like(progress), torch.zeros_like(progress))
    action_cost = 0.01 * torch.sum(actions ** 2, dim=-1)
    reward = progress + speed + 0.1 * upright - action_cost
    return reward, {"progress": progress, "speed": speed, "upright": upright, "action_cost": -action_cost}
