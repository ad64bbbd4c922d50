import numpy as np
import os
import torch

from isaacgym import gymtorch
from isaacgym import gymapi
from isaacgym.torch_utils import *
from isaacgymenvs.utils.torch_jit_utils import *
from isaacgymenvs.tasks.base.vec_task import VecTask


class HumanoidGPT(VecTask):

    def __init__(self, cfg, rl_device, sim_device, graphics_device_id, headless, virtual_screen_capture, force_render):
        self.cfg = cfg
        self.randomization_params = self.cfg["task"]["randomization_params"]
        self.randomize = self.cfg["task"]["randomize"]
        super().__init__(config=self.cfg, rl_device=rl_device, sim_device=sim_device)

    def compute_reward(self, actions):
        self.rew_buf[:], self.rew_dict = compute_reward(self.root_states, self.targets, self.dt, self.up_vec,
                                                        self.actions, self.dof_force_tensor)
        self.extras['gpt_reward'] = self.rew_buf.mean()
        for rew_state in self.rew_dict: self.extras[rew_state] = self.rew_dict[rew_state].mean()
        self.gt_rew_buf, self.reset_buf[:], self.consecutive_successes[:] = compute_success(
            self.obs_buf,
            self.reset_buf,
            self.progress_buf,
            self.actions,
            self.up_weight,
            self.heading_weight,
            self.potentials,
            self.prev_potentials,
            self.actions_cost_scale,
            self.energy_cost_scale,
            self.joints_at_limit_cost_scale,
            self.max_motor_effort,
            self.motor_efforts,
            self.termination_height,
            self.death_cost,
            self.max_episode_length
        )

    def compute_observations(self):
        self.obs_buf[:] = compute_humanoid_observations(self.obs_buf, self.root_states)


@torch.jit.script
def compute_success(obs_buf, reset_buf, progress_buf, actions, up_weight, heading_weight, potentials, prev_potentials,
                    actions_cost_scale, energy_cost_scale, joints_at_limit_cost_scale, max_motor_effort, motor_efforts,
                    termination_height, death_cost, max_episode_length):
    # type: (Tensor, Tensor, Tensor, Tensor, float, float, Tensor, Tensor, float, float, float, float, Tensor, float, float, float) -> Tuple[Tensor, Tensor, Tensor]
    reward = potentials - prev_potentials
    return reward, reset_buf, reward


@torch.jit.script
def compute_humanoid_observations(obs_buf, root_states):
    # type: (Tensor, Tensor) -> Tensor
    return obs_buf

from typing import Tuple, Dict
import math
import torch
from torch import Tensor
@torch.jit.script
def compute_reward(root_states: Tensor, targets: Tensor, dt: float, up_vec: Tensor, actions: Tensor,
                   dof_force_tensor: Tensor) -> Tuple[Tensor, Dict[str, Tensor]]:
    torso_position = root_states[:, 0:3]
    velocity = root_states[:, 7:10]
    to_target = targets - torso_position
    to_target[:, 2] = 0.0
    direction = to_target / torch.norm(to_target, p=2, dim=-1, keepdim=True)
    forward_speed = torch.sum(velocity * direction, dim=-1)
    speed_temperature: float = 0.5
    speed_reward = torch.exp(speed_temperature * forward_speed) - 1.0
    upright_reward = torch.clamp(up_vec[:, 2], min=0.0)
    effort = torch.sum(torch.abs(dof_force_tensor), dim=-1) * 1e-3
    action_penalty = 0.01 * torch.sum(actions ** 2, dim=-1)
    total = speed_reward + 0.5 * upright_reward - action_penalty - effort
    return total, {"speed_reward": speed_reward, "upright_reward": upright_reward, "action_penalty": action_penalty,
                   "effort": effort}
