"""The walls behind the verifier (`envcoder.candidates.verifier`, whose forged hand-overs run in
tests/candidates/test_isolation.py's corpus): the static check refuses frame attributes, and a run killed before it
removed its jail folders has them removed by the next."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import CANDIDATES, ROOT


def test_a_frame_walk_is_refused_before_it_runs():
    """The static check refuses frame attributes by name and in strings: the second wall behind the jail."""
    import pytest

    from envcoder.candidates import CandidateError, check_statically

    walk = CANDIDATES / "attacks" / "frame_walk.py"
    named = "import jax.numpy as jnp\nA = 'f_back'\n\n\ndef compute_reward(state):\n    return jnp.cos(state['dof_pos'][:, 1])\n"
    with pytest.raises(CandidateError, match=r"frame_walk.py:6: use of .f_back is not allowed in candidate code"):
        check_statically(walk.read_text(), str(walk), ("compute_reward",))
    with pytest.raises(CandidateError, match=r"text.py:2: the text 'f_back' is not allowed in candidate code"):
        check_statically(named, "text.py", ("compute_reward",))


def test_the_folders_of_a_killed_run_are_removed_by_the_next():
    """A training process killed before it removed its workers' folders: the next process's first worker removes
    them; a living process's folders stay."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = Path(tempfile.mkdtemp(prefix=f"envcoder-jail-{int(gone.stdout)}-"))
    (dead / "states.npz").write_bytes(b"left behind")
    alive = Path(tempfile.mkdtemp(prefix=f"envcoder-jail-{os.getpid()}-"))
    try:
        code = "from envcoder.candidates.pool import remove_abandoned_folders; print(remove_abandoned_folders())"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=120)
        assert str(dead) in out.stdout and not dead.exists() and alive.exists(), out.stderr[-2000:]
    finally:
        shutil.rmtree(dead, ignore_errors=True)
        shutil.rmtree(alive, ignore_errors=True)
