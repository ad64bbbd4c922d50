@torch.jit.script
def compute_reward(root_states: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    return root_states[:, 7].logaddexp(root_states[:, 8]), {}
