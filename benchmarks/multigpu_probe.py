"""Small programs over every visible device, each in its own process, to find what crashes a sharded compile.

    python benchmarks/multigpu_probe.py            # runs every probe, one line each: name, exit status, seconds

A probe that ends by a signal prints its faulthandler stack (stderr tail) after its line.
"""

from __future__ import annotations

import faulthandler
import subprocess
import sys
import time

faulthandler.enable()


def _mesh():
    import jax
    import numpy as np
    return jax.sharding.Mesh(np.array(jax.devices()), ("g",))


def _run(body, *args):
    import jax
    from jax.sharding import PartitionSpec as P
    n = len(jax.devices())
    f = jax.jit(jax.shard_map(body, mesh=_mesh(), in_specs=(P("g"),) * len(args), out_specs=P("g"), check_vma=False))
    jax.block_until_ready(f(*args))


def plain():
    import jax.numpy as jnp
    import jax
    _run(lambda x: jnp.sin(x) * 2, jnp.ones((len(jax.devices()) * 4, 8)))


def qr_init():
    import jax
    keys = jax.random.split(jax.random.key(0), len(jax.devices()) * 2)
    init = jax.nn.initializers.orthogonal()
    _run(lambda k: jax.vmap(lambda kk: init(kk, (16, 4)))(k), jax.random.key_data(keys))


def _keys_orthogonal(k):
    import jax
    init = jax.nn.initializers.orthogonal()
    return jax.vmap(lambda kk: init(jax.random.wrap_key_data(kk), (16, 4)))(k)


def qr_init_data():
    import jax
    keys = jax.random.key_data(jax.random.split(jax.random.key(0), len(jax.devices()) * 2))
    _run(_keys_orthogonal, keys)


def captured_committed():
    import jax
    import jax.numpy as jnp
    c = jax.device_put(jnp.arange(8.0), jax.devices()[0])
    _run(lambda x: x + c, jnp.ones((len(jax.devices()) * 4, 8)))


def captured_uncommitted():
    import jax.numpy as jnp
    import jax
    c = jnp.arange(8.0)
    _run(lambda x: x + c, jnp.ones((len(jax.devices()) * 4, 8)))


def _mjx(device):
    import jax
    import jax.numpy as jnp
    import mujoco
    from mujoco import mjx
    from envcoder.tasks import get_task
    task = get_task("Cartpole")
    m = mujoco.MjModel.from_xml_path(str(task.model_file))
    model = mjx.put_model(m, device=device) if device is not None else mjx.put_model(m)
    d0 = mjx.make_data(model)

    def body(q):
        def one(qq):
            return mjx.step(model, d0.replace(qpos=qq)).qpos
        return jax.vmap(one)(q)
    _run(body, jnp.zeros((len(jax.devices()) * 4, m.nq)))


def mjx_committed():
    import jax
    _mjx(jax.devices()[0])


def mjx_uncommitted():
    _mjx(None)


PROBES = [plain, qr_init, qr_init_data, captured_committed, captured_uncommitted, mjx_committed, mjx_uncommitted]


if __name__ == "__main__":
    if len(sys.argv) > 1:
        globals()[sys.argv[1]]()
        sys.exit(0)
    for probe in PROBES:
        tick = time.time()
        p = subprocess.run([sys.executable, __file__, probe.__name__], capture_output=True, text=True, timeout=300)
        print(f"{probe.__name__:24s} exit {p.returncode:4d}  {time.time() - tick:5.1f} s", flush=True)
        if p.returncode != 0:
            print("   " + "\n   ".join((p.stderr or p.stdout).strip().splitlines()[-12:]), flush=True)
