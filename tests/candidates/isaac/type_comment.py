@torch.jit.script
def compute_reward(root_states, dt):
    # type: (Tensor, float) -> Tuple[Tensor, Dict[str, Tensor]]
    return root_states[:, 7] * dt, {"speed": root_states[:, 7]}
