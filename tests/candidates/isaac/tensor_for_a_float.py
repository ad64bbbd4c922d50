@torch.jit.script
def compute_reward(root_states: torch.Tensor, actions: torch.Tensor, contact_force_scale: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    # TorchScript refuses a Python float for an argument declared a Tensor: Isaac Gym never ran this
    return root_states[:, 7] - torch.sum(actions ** 2, dim=-1) * contact_force_scale, {}
