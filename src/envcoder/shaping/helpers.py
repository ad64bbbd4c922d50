"""Math helpers that candidate files see in their namespace.

Quaternions are in MuJoCo order **(w, x, y, z)** everywhere in envcoder, including the
`root_states[..., 3:7]` slot (Isaac Gym stores (x, y, z, w) there; rewards that only call these
helpers port unchanged, rewards that index quaternion components need the order adjusted).
All functions broadcast over leading axes.
"""

import jax.numpy as jnp


def quat_rotate(q, v):
    """Rotate vectors `v [..., 3]` from the body frame to the world frame by unit quaternions `q [..., 4]` (w, x, y, z)."""
    w, xyz = q[..., :1], q[..., 1:]
    t = 2.0 * jnp.cross(xyz, v)
    return v + w * t + jnp.cross(xyz, t)


def quat_rotate_inverse(q, v):
    """Rotate vectors `v [..., 3]` from the world frame into the body frame of `q [..., 4]` (w, x, y, z)."""
    return quat_rotate(quat_conjugate(q), v)


def quat_conjugate(q):
    """Conjugate (inverse of a unit quaternion), (w, x, y, z) order."""
    return jnp.concatenate([q[..., :1], -q[..., 1:]], axis=-1)


def quat_mul(a, b):
    """Hamilton product `a ⊗ b`, (w, x, y, z) order."""
    aw, ax, ay, az = (a[..., i] for i in range(4))
    bw, bx, by, bz = (b[..., i] for i in range(4))
    return jnp.stack([
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    ], axis=-1)


def normalize_angle(x):
    """Wrap angles to [-pi, pi)."""
    return (x + jnp.pi) % (2.0 * jnp.pi) - jnp.pi


HELPERS = {
    "quat_rotate": quat_rotate,
    "quat_rotate_inverse": quat_rotate_inverse,
    "quat_conjugate": quat_conjugate,
    "quat_mul": quat_mul,
    "normalize_angle": normalize_angle,
}
