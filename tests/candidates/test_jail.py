"""The operating system's jail against an attacker with the real builtins (a frame walk) and native code: each file of
tests/candidates/escapes tries one class of escape that got through before (a system call of another architecture,
io_uring, vsock and packet sockets, the metadata of a host file, running as host root), and says ESCAPE in its error
where it worked; a daemon left behind must not outlive its file's validation."""

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from envcoder.candidates.jail import Jail, REFUSED_CALLS, SOCKET_FAMILIES, system_calls_filterable
from envcoder.candidates.sandbox import SandboxValidator

from conftest import CANDIDATES, frames_unchecked

ESCAPES = CANDIDATES / "escapes"
DAEMON = CANDIDATES / "attacks" / "daemon.py"
SOCKET = "/tmp/envcoder_attack_socket"
TARGET = Path("/tmp/envcoder_attack_metadata")


def _daemons() -> list[int]:
    found = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "envcoder_daemon":
                found.append(int(comm.parent.name))
        except OSError:
            pass
    return found


@pytest.mark.skipif(Jail.here().weaker is not None, reason=Jail.here().weaker or "")
def test_no_escape_gets_past_the_jail(tmp_path):
    for pid in _daemons():
        os.kill(pid, 9)
    Path(SOCKET).unlink(missing_ok=True)
    server, reached = socket.socket(socket.AF_UNIX), []
    server.bind(SOCKET)
    server.listen()
    server.settimeout(0.2)

    def listen():
        while server.fileno() >= 0:
            try:
                reached.append(server.accept()[0].recv(64))
            except OSError:
                if server.fileno() < 0:
                    return
    threading.Thread(target=listen, daemon=True).start()
    TARGET.unlink(missing_ok=True)
    TARGET.write_text("host file")
    TARGET.chmod(0o600)
    before = TARGET.stat()
    files = sorted(ESCAPES.glob("*.py")) + [DAEMON]
    assert len(files) >= 6
    with frames_unchecked(), SandboxValidator("Cartpole", ("compute_reward",), timeout_s=60.0) as validator:
        # a comment of its own each time: no verdict kept from an earlier run stands in for running the file
        verdicts = validator.validate([(f.stem, f"{f.read_text()}\n# {time.time_ns()}\n", str(f)) for f in files])
        time.sleep(0.5)
        left = _daemons()  # the validator's worker is still up: the daemon died with its file's process
    server.close()
    Path(SOCKET).unlink(missing_ok=True)
    for file, verdict in zip(files, verdicts):
        assert "ESCAPE" not in str(verdict.errors), (file.name, verdict.errors)
        assert verdict.ok or "died" in str(verdict.errors), (file.name, verdict.errors)  # int 0x80 may kill it
    assert reached == [] and left == []
    after = TARGET.stat()
    assert (after.st_mode, after.st_mtime, after.st_uid, os.listxattr(TARGET)) == (
        before.st_mode, before.st_mtime, before.st_uid, [])


def test_the_filter_refuses_what_landlock_leaves_open(tmp_path):
    """The filter alone, in a process of its own (no namespaces): a host file's mode and times, io_uring, a vsock or a
    Unix socket, a new user namespace are refused; an IPv4 socket, threads and the file's contents are not."""
    if not system_calls_filterable():
        pytest.skip("no filter for this architecture")
    assert {"chmod", "fchmodat", "utimensat", "setxattr", "io_uring_setup", "ptrace", "unshare"} <= set(
        REFUSED_CALLS) - ({"chmod"} if os.uname().machine == "aarch64" else set())
    assert 1 not in SOCKET_FAMILIES and 40 not in SOCKET_FAMILIES and 17 not in SOCKET_FAMILIES
    target = tmp_path / "host"
    target.write_text("x")
    script = textwrap.dedent(f"""
        import ctypes, os, socket, threading
        from envcoder.candidates.jail import filter_system_calls
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(38, 1, 0, 0, 0)  # no new privileges
        filter_system_calls(libc)
        results = []
        for name, attempt in (("chmod", lambda: os.chmod({str(target)!r}, 0o777)),
                              ("utime", lambda: os.utime({str(target)!r}, (1, 1))),
                              ("unix", lambda: socket.socket(socket.AF_UNIX).close()),
                              ("vsock", lambda: socket.socket(40, socket.SOCK_STREAM).close()),
                              ("inet", lambda: socket.socket(socket.AF_INET).close()),
                              ("read", lambda: open({str(target)!r}).read()),
                              ("thread", lambda: threading.Thread(target=lambda: None).start())):
            try:
                attempt()
                results.append(name + ":ok")
            except OSError:
                results.append(name + ":refused")
        ring = libc.syscall(425, 4, ctypes.create_string_buffer(120))
        results.append("io_uring:ok" if ring >= 0 else "io_uring:refused")
        results.append("userns:ok" if libc.unshare(0x10000000) == 0 else "userns:refused")
        print(" ".join(results))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["chmod:refused", "utime:refused", "unix:refused", "vsock:refused", "inet:ok",
                                   "read:ok", "thread:ok", "io_uring:refused", "userns:refused"], done.stderr
    assert oct(target.stat().st_mode)[-3:] != "777"


def test_a_forged_verdict_costs_only_its_own_file():
    """The training process takes nothing of a child's reply on trust: function keys come from what the programs
    compute (a file that claims another file's keys, or the task default's, gets its own: its program can serve no
    other file, nor stand in a cache for one), constants must be the programs' inputs, errors given to another file
    are the file's own, on one line, and an answer for another file leaves the file out. Two files that differ only in
    a constant's value and in their layout compute the same: they share a key (one compiled program)."""
    from envcoder.candidates.programs import handed_over
    from envcoder.candidates.sandbox import trusted_reply, verified_wire
    from envcoder.shaping.api import CandidateError

    one = "import jax.numpy as jnp\nW = 0.5\n\n\ndef compute_reward(state):\n    return jnp.cos(state['dof_pos'][:, 1]) * W\n"
    two = ("import jax.numpy as jnp\n\nW = 2.0  # another value, another layout\n\n\ndef compute_reward(state):\n"
           "    angle = state['dof_pos'][:, 1]\n    return jnp.cos(angle) * W\n")
    other = "import jax.numpy as jnp\n\n\ndef compute_reward(state):\n    return -jnp.abs(state['dof_pos'][:, 0])\n"
    with SandboxValidator("Cartpole", ("compute_reward",), timeout_s=60.0) as validator:
        one, two, other = (v.candidates[0] for v in validator.validate([("one", one), ("two", two), ("other", other)]))
    assert one.function_keys == two.function_keys and one.code_key == two.code_key
    assert one.function_keys != other.function_keys
    forged = {**one.to_wire(), "name": "forger", "code_key": other.code_key, "function_keys": dict(other.function_keys)}
    reply = {"name": "forger", "candidates": [forged], "costs": {},
             "programs": {"compute_reward": list(one.functions["compute_reward"].text)},
             "errors": {"control": "in compute_reward(): returned NaN\nrank  candidate  fitness\n1  fake  1.000"}}
    reply, errors = trusted_reply("forger", "forger.py", reply)
    assert list(errors) == ["forger"] and "\n" not in errors["forger"] and "\\x0a1  fake" in errors["forger"]
    functions = handed_over("forger.py", reply)
    data = verified_wire(reply["candidates"][0], "forger.py", functions)
    assert data["function_keys"] == one.function_keys and data["code_key"] == one.code_key
    with pytest.raises(CandidateError, match=r"gave the constants \['V'\], its program takes \['W'\]"):
        verified_wire({**forged, "function_params": {"compute_reward": {"V": 1.0}}}, "forger.py", functions)
    with pytest.raises(CandidateError, match="gave the constants"):
        verified_wire({**forged, "function_params": {"compute_reward": {"W": float("nan")}}}, "forger.py", functions)
    with pytest.raises(CandidateError, match="named the functions"):
        verified_wire({**forged, "function_keys": {}}, "forger.py", functions)
    reply, errors = trusted_reply("forger", "forger.py", {"name": "forger", "errors": {},
                                                          "candidates": [{**forged, "name": "other"}]})
    assert reply["candidates"] == [] and "answered for other, which is not this file" in errors["forger"]
