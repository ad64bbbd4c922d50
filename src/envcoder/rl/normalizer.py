"""Running mean/variance normalizers (rl_games' RunningMeanStd), one per candidate."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

EPSILON = 1e-5


class RunningMeanStd(NamedTuple):
    mean: jnp.ndarray
    var: jnp.ndarray
    count: jnp.ndarray

    @classmethod
    def create(cls, shape=()):
        return cls(jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.asarray(1e-4, jnp.float32))

    def update(self, batch: jnp.ndarray) -> "RunningMeanStd":
        """Fold in `batch [N, *shape]` with the parallel mean/variance formula."""
        batch_mean = jnp.mean(batch, axis=0)
        batch_var = jnp.var(batch, axis=0)
        batch_count = jnp.asarray(batch.shape[0], jnp.float32)
        delta = batch_mean - self.mean
        total = self.count + batch_count
        mean = self.mean + delta * batch_count / total
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / total
        return RunningMeanStd(mean, m2 / total, total)

    def normalize(self, x: jnp.ndarray, clip: float | None = None) -> jnp.ndarray:
        y = (x - self.mean) / jnp.sqrt(self.var + EPSILON)
        return y if clip is None else jnp.clip(y, -clip, clip)

    def denormalize(self, y: jnp.ndarray) -> jnp.ndarray:
        return y * jnp.sqrt(self.var + EPSILON) + self.mean
