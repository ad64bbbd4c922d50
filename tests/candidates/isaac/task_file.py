import numpy as np
import os
import torch

from isaacgym import gymtorch
from isaacgym.torch_utils import *
from isaacgymenvs.tasks.base.vec_task import VecTask


class AnymalGPT(VecTask):
    def __init__(self, cfg):
        self.cfg = cfg

    def compute_reward(self, actions):
        self.rew_buf[:], self.rew_dict = compute_reward(self.root_states, self.commands, self.contact_forces[:, self.feet_indices, :], self.torques)


@torch.jit.script
def compute_anymal_observations(root_states, commands):
    # type: (Tensor, Tensor) -> Tensor
    return root_states


@torch.jit.script
def tracking(error: torch.Tensor, sigma: float) -> torch.Tensor:
    return torch.exp(-error / sigma)


@torch.jit.script
def compute_reward(root_states: torch.Tensor, commands: torch.Tensor, feet_forces: torch.Tensor,
                   torques: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    base_quat = root_states[:, 3:7]
    base_lin_vel = quat_rotate_inverse(base_quat, root_states[:, 7:10])
    base_ang_vel = quat_rotate_inverse(base_quat, root_states[:, 10:13])
    lin_error = torch.sum(torch.square(commands[:, :2] - base_lin_vel[:, :2]), dim=1)
    yaw_error = torch.square(commands[:, 2] - base_ang_vel[:, 2])
    lin_reward = tracking(lin_error, 0.25)
    yaw_reward = 0.5 * tracking(yaw_error, 0.25)
    in_contact = (torch.norm(feet_forces, dim=-1) > 1.0).float().sum(dim=1)
    torque_cost = 2.5e-5 * torch.sum(torques ** 2, dim=1)
    reward = torch.clamp(lin_reward + yaw_reward - torque_cost, min=0.0)
    return reward, {"lin_vel": lin_reward, "yaw": yaw_reward, "feet_in_contact": in_contact, "torque": -torque_cost}
