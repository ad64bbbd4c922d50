"""Batched MuJoCo MJX simulation.

`Simulator` is imported when first used: a module that needs only `envcoder.sim.randomization` (the shaping API,
which the command line's parser reads) does not import MJX (1-2 s), so `envcoder eval` starts the sandbox's workers
sooner."""

__all__ = ["Simulator"]


def __getattr__(name: str):
    if name != "Simulator":
        raise AttributeError(f"module 'envcoder.sim' has no attribute {name!r}")
    from envcoder.sim.simulator import Simulator

    globals()["Simulator"] = Simulator
    return Simulator
