"""Reset distribution: pole angles up to ±1 rad (the default is ±0.1)."""
import jax


def sample_initial_state(key, state):
    return {"dof_pos": state["dof_pos"].at[:, 1].set(jax.random.uniform(key, state["dof_pos"][:, 1].shape,
                                                                         minval=-1.0, maxval=1.0))}
