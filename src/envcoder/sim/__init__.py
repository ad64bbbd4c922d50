"""Batched MuJoCo MJX simulation."""

from envcoder.sim.simulator import Simulator

__all__ = ["Simulator"]
