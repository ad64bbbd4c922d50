import torch
from isaacgym.torch_utils import *
from isaacgymenvs.tasks.base.vec_task import VecTask


class AntGPT(VecTask):
    def compute_reward(self, actions):
        self.rew_buf[:], self.rew_dict = compute_reward(root_states=self.root_states, targets=self.targets,
                                                        potentials=self.potentials, prev_potentials=self.prev_potentials,
                                                        dt=self.dt)


@torch.jit.script
def smooth_step(x: torch.Tensor, edge: float = 1.0) -> torch.Tensor:
    return torch.clamp(x / edge, 0.0, 1.0)


@torch.jit.script
def compute_reward(root_states: torch.Tensor, targets: torch.Tensor, potentials: torch.Tensor,
                   prev_potentials: torch.Tensor, dt: float, progress_scale: float = 1.0
                   ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    progress = (potentials - prev_potentials) * progress_scale
    height = smooth_step(root_states[:, 2] - 0.3, edge=0.2)
    heading = get_basis_vector(root_states[:, 3:7], torch.tensor([[1.0, 0.0, 0.0]]).repeat(root_states.shape[0], 1))
    heading_reward = heading[:, 0]
    total = progress + height + 0.1 * heading_reward
    return total, {"progress": progress, "height": height, "heading": heading_reward}
