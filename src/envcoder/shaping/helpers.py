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


def get_euler_xyz(q):
    """Roll, pitch, yaw `[...]` each, in [0, 2pi) as Isaac Gym's `get_euler_xyz`, of `q [..., 4]` (w, x, y, z)."""
    w, x, y, z = (q[..., i] for i in range(4))
    roll = jnp.arctan2(2.0 * (w * x + y * z), 1.0 - 2.0 * (x * x + y * y))
    pitch = jnp.arcsin(jnp.clip(2.0 * (w * y - z * x), -1.0, 1.0))
    yaw = jnp.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    return roll % (2.0 * jnp.pi), pitch % (2.0 * jnp.pi), yaw % (2.0 * jnp.pi)


def unscale(x, lower, upper):
    """Map `x` from [lower, upper] to [-1, 1] (Isaac Gym's `unscale`, used for joint positions)."""
    return (2.0 * x - upper - lower) / (upper - lower)


def heading_and_up(root_states, targets):
    """Isaac Gym's locomotion frame terms for a torso whose forward axis is body +x and up axis body +z.

    `root_states [E, 13]`, `targets [E, 3]` -> dict of
    `up_proj [E]` (z of the torso's up axis: 1 upright, 0 lying), `heading_proj [E]` (cosine between the
    torso's forward axis and the horizontal direction to the target), `vel_loc [E, 3]` and
    `angvel_loc [E, 3]` (linear and angular velocity in the torso frame), `roll`, `pitch`, `yaw [E]`,
    `angle_to_target [E]` (target bearing minus yaw, wrapped to [-pi, pi)).
    """
    quat = root_states[..., 3:7]
    to_target = targets - root_states[..., 0:3]
    to_target = to_target.at[..., 2].set(0.0)
    target_dir = to_target / jnp.maximum(jnp.linalg.norm(to_target, axis=-1, keepdims=True), 1e-6)
    forward = quat_rotate(quat, jnp.broadcast_to(jnp.array([1.0, 0.0, 0.0]), root_states[..., 0:3].shape))
    up = quat_rotate(quat, jnp.broadcast_to(jnp.array([0.0, 0.0, 1.0]), root_states[..., 0:3].shape))
    roll, pitch, yaw = get_euler_xyz(quat)
    return {
        "up_proj": up[..., 2],
        "heading_proj": jnp.sum(forward * target_dir, axis=-1),
        "vel_loc": quat_rotate_inverse(quat, root_states[..., 7:10]),
        "angvel_loc": quat_rotate_inverse(quat, root_states[..., 10:13]),
        "roll": normalize_angle(roll), "pitch": normalize_angle(pitch), "yaw": normalize_angle(yaw),
        "angle_to_target": normalize_angle(jnp.arctan2(to_target[..., 1], to_target[..., 0]) - yaw),
    }


HELPERS = {
    "quat_rotate": quat_rotate,
    "quat_rotate_inverse": quat_rotate_inverse,
    "quat_conjugate": quat_conjugate,
    "quat_mul": quat_mul,
    "normalize_angle": normalize_angle,
    "get_euler_xyz": get_euler_xyz,
    "unscale": unscale,
    "heading_and_up": heading_and_up,
}
