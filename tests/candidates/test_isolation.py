"""A corpus of bad candidate files: each gets its own error, nothing leaves the sandbox, and the good
candidate in the same run gets the same results as in a run without the bad ones."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import jax
import numpy as np
import pytest

from envcoder.runs.evaluation import EvalSettings, run_evaluation
from envcoder.shaping.api import CandidateError
from envcoder.runs.watchdog import EXIT_STATUS

from conftest import BUNDLED, CANDIDATES, ROOT, frames_unchecked

CORPUS = CANDIDATES / "bad"
ATTACKS = CANDIDATES / "attacks"
FORGED = CANDIDATES / "forged"
GOOD = BUNDLED / "cartpole" / "good_upright.py"
HELPER_USER = """import jax.numpy as jnp
from envcoder.shaping.helpers import normalize_angle


def compute_reward(state):
    return jnp.cos(normalize_angle(state["dof_pos"][:, 1] + 6.283185307179586))
"""
SOCKET = Path("/tmp/envcoder_attack_socket")
FAKE_KEY = "sk-envcoder-fake-key-that-no-candidate-may-read"
SHELL_NAME = "shell name; $(touch envcoder_sandbox_marker) `id`"
MARKERS = [Path("/tmp/envcoder_sandbox_marker"), Path("/tmp/envcoder_sandbox_marker.npy"),
           Path("/tmp/envcoder_sandbox_marker.txt"), Path.cwd() / "envcoder_sandbox_marker",
           *(Path("/tmp") / f"envcoder_attack_marker_{n}" for n in ("frame", "key", "coroutine", "match")),
           Path("/tmp/envcoder_attack_dump")]

EXPECTED = {
    "syntax_error": "syntax error",
    "missing_function": "defines none of the selected shaping functions",
    "misspelled": "(found compute_rewards: misspelled?)",
    "wrong_signature": "wrong signature",
    "wrong_shape": "in compute_reward(): returned shape (68, 2), expected (68,) (the first axis is the environments: "
                   "validation runs it on 68 sample states",
    "missing_field": "KeyError: 'pole_angle' (the task's state has no field 'pole_angle'",
    "wrong_dtype": "in compute_reward(): returned dtype int32, expected a float array",
    "nan_reward": "in compute_reward(): returned NaN or inf on the sample state",
    "forbidden_import": "import of 'subprocess' is not allowed",
    "file_access": "use of 'open' is not allowed",
    "file_via_jnp": "use of .save is not allowed",
    "huge_allocation": "MiB of working memory",
    # escapes through attribute chains of the allowed modules
    "getattr_computed": "use of 'getattr' is not allowed",
    "format_field": "use of .format is not allowed in candidate code (str.format reads attributes by name",
    "format_map": "use of .format_map is not allowed",
    "numpy_load": "use of .load is not allowed",
    "numpy_fromfile": "use of .fromfile is not allowed",
    "numpy_memmap": "use of .memmap is not allowed",
    "numpy_savetxt": "use of .savetxt is not allowed",
    "host_callback": "use of .pure_callback is not allowed",
    "jax_config_update": "use of .config is not allowed",
    "config_from_import": "`from jax import config` is not allowed",
    "attribute_chain": "in compute_reward(): failed on the sample state: AttributeError: jax.core is not available",
    "dunder_escape": "access to the private attribute '__globals__' is not allowed",
    "envcoder_package": "would bind the whole envcoder package",
    # changing what other candidates share
    "monkeypatch_module": "assigning to the attribute .sum is not allowed",
    "monkeypatch_helper": "assigning to the attribute .quat_rotate is not allowed",
    "mutate_state": "in compute_reward(): changes its argument 'state' in place (item assignment)",
    "mutate_state_method": "in compute_reward(): changes its argument 'state' in place (.pop())",
    # trace-time blow-ups and hangs only a separate process can stop
    "deep_recursion": "in compute_reward(): failed on the sample state: RecursionError",
    # files that are not candidates
    "empty_file": "the file is empty",
    "non_utf8": "is not UTF-8 text (byte 0xff",
    SHELL_NAME: "has characters other than letters, digits",
    # the attacks of tests/candidates/attacks: an escape from Python is held by the operating system's jail
    "frame_walk": "module-level code failed: PermissionError",  # got the real builtins; could not write
    "match_capture": "use of 'object' is not allowed",
    "xla_dump": "`compiler_options` can only be passed to top-level `jax.jit`",
    "helper_table": "access to the private attribute '__dict__' is not allowed",
    "batch_raise": "cannot be compiled for any number of environments: ValueError: not the sandbox",
    "batch_width": "the sizes after the environment axis must not depend on how many environments run",
    "int_component": "names a reward component 1: component names are identifiers",
    "list_reward": "returned shape (1, 68), expected (68,)",
    "leaked_tracer": "changes the module-level value '_seen' in place",
    "mutable_default": "changes its argument '_calls' in place",
    "many_terms": "RecursionError",
    "delete_samples": "IndexError",  # it emptied its own child's sample states: the next file's child has its own
    # programs handed over that differ from what validation ran (the file tells its two traces apart): the worker
    # runs each exported program against its function on the sample states (two batch sizes), and a second trace
    # that differs is refused there (the training process checks each output's declared signature too).
    "second_trace_complex": "its program returns complex64[1, 68] on 1 group(s) of 68 environments, where the "
                            "function returned float32[1, 68]: it behaves otherwise once exported",
    "second_trace_wide": "where the function returned float32[1, 68]: it behaves otherwise once exported",
    "second_trace_observation": "where the function returned float32[1, 68, 4]: it behaves otherwise once exported",
    "second_trace_component": "on 1 group(s) of 68 environments, where the function returned PyTreeDef",
    "second_trace_values": "its program's values on 1 group(s) of 68 environments differ from the function's on "
                           "the same inputs: it behaves otherwise once exported",
    "second_trace_memory": "its program fails on 1 group(s) of 68 environments: JaxRuntimeError: "
                           "RESOURCE_EXHAUSTED: Out of memory allocating 73014444032 bytes",
    # work far beyond the task's own functions, found in XLA's cost analysis of the program before it trains
    "heavy_no_loop": "operations per environment and step at 8 environments",
    # hand-overs forged by a process with the real builtins (tests/candidates/forged): the verifier reads them, not
    # this process, and each is left out under its own name, on one line
    "fuzzed_program": "its program",  # refused, or the verifier died on it
    "tpu_program": "its program is made for the platforms ['tpu'], the run takes ['cpu']",
    "host_callback_program": "its program calls 'xla_ffi_python_cpu_callback', an operation outside pure computation",
    "data_size_check": "its program checks a condition on data where `jax.export` checks only the arguments' sizes",
    "forged_cost_loop": "operations per environment and step at 8 environments",
    "lying_death": "lying_death.py in compute_reward() while tracing it: the validation process died (exit 3): Fatal "
                   "Python error: \\x1b]8;;http://evil\\x07click",
    "fork_storm": "module-level code failed: RuntimeError: STARTED ",
    # files that must not be read
    "fifo": "is not a regular file",
    "dev_zero": "is a link to /dev/zero, outside its folder",
    "outside_link": "outside its folder",
    "huge": "is 51,200 KiB; a candidate file may be at most 256 KiB",
    "long_sweep[" + "A" * 120 + "=1," + "B" * 120 + "=2]": "bytes long (at most 200",
}
HANGS = {
    "endless_loop": "in compute_reward() while tracing it: took longer than 3 s (a Python loop that never ends",
    "unrolled_loop": "in compute_reward() while tracing it",
    "xla_while_forever": "in compute_reward() while running it: took longer than 3 s (a lax.while_loop that never",
    "module_level_hang": "while its module-level code ran: took longer than 3 s",
    "phase_forger": "while tracing it: took longer than 9 s in all (3 × the 3 s a step may take",
    "lying_phase": "lying_phase.py: took longer than 3 s (an endless loop?)",  # its step named another file
}
"""Files that hang, each stopped at its step's time limit (or the file's, for one that reports made-up steps):
checked with a limit of their own (3 s: `test_a_file_that_hangs_is_stopped_where_it_hangs`), not the corpus run's
10 s."""
CONTAINED = ("coroutine_frame", "daemon", "float_pytree", "forged_verdict", "pytree_getattr", "square_memory",
             "unix_socket")
"""Attacks that pass validation: what they did ran in the jail's child only, and their programs are plain
computation (ranked next to the good candidates, which they must not change)."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    for marker in MARKERS:
        marker.unlink(missing_ok=True)
    root = tmp_path_factory.mktemp("isolation")
    corpus, only_good = root / "corpus_files", root / "only_good"
    shutil.copytree(CORPUS, corpus)
    for attack in (*ATTACKS.glob("*.py"), *FORGED.glob("*.py")):
        shutil.copy(attack, corpus / attack.name)
    for name in HANGS:
        (corpus / f"{name}.py").unlink()
    os.mkfifo(corpus / "fifo.py")
    (corpus / "dev_zero.py").symlink_to("/dev/zero")
    (root / "outside.py").write_text("def compute_reward(state):\n    return state['dof_pos'][:, 1]\n")
    (corpus / "outside_link.py").symlink_to(root / "outside.py")
    with open(corpus / "huge.py", "wb") as huge:
        huge.truncate(50 * 2**20)
    (corpus / "long_sweep.py").write_text(f"PARAMS = {{'{'A' * 120}': [1.0], '{'B' * 120}': [2.0]}}\n{'A' * 120} = 1.0\n"
                                          f"{'B' * 120} = 2.0\n\n\ndef compute_reward(state):\n"
                                          f"    return state['dof_pos'][:, 1] * {'A' * 120}\n")
    (corpus / "many_terms.py").write_text("def compute_reward(state):\n    return " +
                                          " + ".join(["state['dof_pos'][:, 1]"] * 5000) + "\n")
    (corpus / "non_utf8.py").write_bytes(b"def compute_reward(state):\n    return state['dof_pos'][:, 1]  # \xff\xfe\n")
    (corpus / f"{SHELL_NAME}.py").write_text("def compute_reward(state):\n    return state['dof_pos'][:, 1]\n")
    only_good.mkdir()
    for directory in (corpus, only_good):  # the same good candidates next to the bad ones, and alone
        shutil.copy(GOOD, directory / "good.py")
        (directory / "helper_user.py").write_text(HELPER_USER)
    results = {}
    os.environ["ENVCODER_FAKE_API_KEY"] = FAKE_KEY
    SOCKET.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX)  # a socket file outside the jail's folders (unix_socket.py's target)
    listener.bind(str(SOCKET))
    listener.listen()
    listener.setblocking(False)
    folders = set(Path(tempfile.gettempdir()).glob(f"envcoder-jail-{os.getpid()}-*"))
    try:
        for name, functions in (("corpus", corpus), ("good", only_good)):
            settings = EvalSettings(task="Cartpole", functions=functions, out=root / name, envs_per_candidate=8,
                                    train_iterations=2, seeds=(0, 1), validation_timeout_s=10.0,
                                    shaper_types=("compute_reward", "compute_observation"),
                                    overrides={"horizon_length": 8, "mini_epochs": 2, "units": (16, 16)})
            with frames_unchecked():  # the attacks reach the real builtins: the jail is what holds them
                results[name] = run_evaluation(settings)
        results["jail_folders_left"] = set(Path(tempfile.gettempdir()).glob(f"envcoder-jail-{os.getpid()}-*")) - folders
        try:
            listener.accept()
            results["socket_reached"] = True
        except BlockingIOError:
            results["socket_reached"] = False
    finally:
        del os.environ["ENVCODER_FAKE_API_KEY"]
        listener.close()
        SOCKET.unlink(missing_ok=True)
    return root, results


def test_each_bad_file_has_its_specific_error(runs):
    root, results = runs
    failures = {f.name: f.error for f in results["corpus"].failures}
    assert len(EXPECTED) >= 30
    unexpected = {name: failures[name] for name in set(failures) - set(EXPECTED)}
    assert set(failures) == set(EXPECTED), unexpected  # a file left out that should not be: its reason shows
    for name, message in EXPECTED.items():
        assert message in failures[name], (name, failures[name])
        assert str(root / "corpus_files" / f"{name.split('[')[0]}.py") in failures[name]
    on_disk = {f["name"] for f in json.loads((root / "corpus" / "failures.json").read_text())}
    assert on_disk == set(EXPECTED)


def test_a_file_that_hangs_is_stopped_where_it_hangs():
    """A Python loop that never ends or is unrolled too far, a `lax.while_loop` that never ends inside XLA (which no
    signal reaches), module-level code that sleeps, and a file that reports a made-up step every second (each
    report restarted the step's deadline before): each is killed, and its verdict names the function and step."""
    from envcoder.candidates.sandbox import SandboxValidator

    files = {name: (CORPUS if (CORPUS / f"{name}.py").exists() else ATTACKS) / f"{name}.py" for name in HANGS}
    with frames_unchecked(), SandboxValidator("Cartpole", ("compute_reward", "compute_observation"), timeout_s=3.0,
                                              workers=2) as validator:
        verdicts = validator.validate([(name, path.read_text(), str(path)) for name, path in files.items()])
    for (name, message), verdict in zip(HANGS.items(), verdicts):
        assert not verdict.ok and message in verdict.error, (name, verdict.errors)
        assert str(files[name]) in verdict.error
        assert list(verdict.errors) == [name] and "\x1b" not in verdict.error and "\n" not in verdict.error


def _daemons() -> list[str]:
    """Processes named as daemon.py names its grandchild."""
    found = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "envcoder_daemon":
                found.append(comm.parent.name)
        except OSError:
            pass
    return found


def test_nothing_outside_the_sandbox_was_touched(runs):
    root, results = runs
    assert not any(marker.exists() for marker in MARKERS)
    assert not results["socket_reached"], "a candidate connected to a Unix socket file outside its jail"
    assert not _daemons(), "a process a candidate started outlived its validation worker"
    for path in root.rglob("*"):  # the key is nowhere: no candidate could read it
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 2**24:
            assert FAKE_KEY.encode() not in path.read_bytes(), path
    assert not (root / "corpus" / "candidates" / "huge.py").exists()  # refused files are not copied


def test_forged_hand_overs_are_the_forger_s_own_failures(runs):
    """A child that forged its hand-over (damaged bytecode, a TPU program, a size check on the data, a 2^31-step loop
    reported as free, a host call), lied about which file it was checking, wrote terminal escapes or started a fork
    storm: the run ended normally, each is left out under its own name, on one line with its escapes written out in every record, the fork storm stopped short by the jail's process limit, and
    no jail folder of this run is left behind."""
    root, results = runs
    failures = {f.name: f.error for f in results["corpus"].failures}
    assert not {"good", "helper_user"} & set(failures)
    assert int(failures["fork_storm"].split("STARTED ")[1].split()[0]) < 300
    for record in ("failures.json", "report.html", "results.json"):
        text = (root / "corpus" / record).read_text()
        assert "\x1b" not in text and "\x07" not in text, record
    assert results["jail_folders_left"] == set()


def test_contained_attacks_are_ranked_as_plain_programs(runs):
    _, results = runs
    ranked = {r.name for r in results["corpus"].ranking}
    failures = {f.name: f.error for f in results["corpus"].failures}
    assert ranked == {"good", "helper_user", *CONTAINED}, {n: failures.get(n) for n in set(CONTAINED) - ranked}


def test_good_candidate_unaffected_by_bad_neighbours(runs):
    """The good candidates' groups give the numbers of a run without the bad and contained files, to
    test_equivalence's tolerance: with more groups beside them their rows sit elsewhere in the batch, and on some CPUs
    (AVX-512 FP16/AMX) XLA's vectorized code rounds a row by its place (34.362164 against 34.362167 there; bit for
    bit on the CI machines before 2026-11-26). Anything that crossed between groups would be far larger."""
    _, results = runs
    good = [g for g in results["corpus"].groups if g.candidate in ("good", "helper_user")]
    assert len(good) == len(results["good"].groups) == 4  # two seeds each
    for with_bad, alone in zip(good, results["good"].groups):
        assert with_bad.candidate == alone.candidate and with_bad.seed == alone.seed
        for key in ("task_fitness", "episode_length", "shaped_return", "training_task_fitness"):
            np.testing.assert_allclose(getattr(with_bad, key), getattr(alone, key), rtol=1e-5, atol=1e-6, err_msg=key)


def test_seed_statistics_in_results(runs):
    _, results = runs
    (ranked,) = [r for r in results["good"].ranking if r.name == "good"]
    per_seed = [g.task_fitness for g in results["good"].groups if g.candidate == "good"]
    assert ranked.seeds == 2 and ranked.fitness_mean == pytest.approx(sum(per_seed) / 2)
    assert ranked.ci_low <= ranked.fitness_mean <= ranked.ci_high


LOOPS_ON_THE_DEVICE = """
import jax
import jax.numpy as jnp


def compute_reward(state):
    # Only in training: the sandbox's sample states end at step 16; then a loop that never ends inside XLA.
    late = jnp.any(state["progress_buf"] >= 17)
    count = jax.lax.while_loop(lambda c: late & jnp.isfinite(c), lambda c: c + 1.0, jnp.float32(0.0))
    return state["dof_pos"][:, 1] + 0.0 * count
"""


def _eval(functions: Path, out: Path, *options: str) -> subprocess.CompletedProcess:
    """`envcoder eval` on Cartpole as a user runs it, in a process of its own (its watchdog may end or restart it)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "ENVCODER_CACHE_DIR": jax.config.jax_compilation_cache_dir}
    return subprocess.run([sys.executable, "-c", "from envcoder.cli import run; run()", "eval", "--task", "Cartpole",
                           "--functions", str(functions), "--out", str(out), "--envs-per-candidate", "8",
                           "--iterations", "4", "--iteration-timeout", "5", *options, "ppo.horizon_length=8",
                           "ppo.mini_epochs=1", "ppo.save_frequency=2"], env=env, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.slow
def test_a_candidate_that_hangs_in_training_costs_only_itself(tmp_path):
    """What passes the sandbox and hangs only in training (here: on states later than the sample's, inside XLA)
    is left out: the run restarts from its last checkpoint without it, records why, ranks the others and ends
    normally; the good candidate's results are those of a run without the hung one."""
    functions, alone = tmp_path / "functions", tmp_path / "alone"
    for folder in (functions, alone):
        folder.mkdir()
        shutil.copy(GOOD, folder / "good.py")
    (functions / "hangs.py").write_text(LOOPS_ON_THE_DEVICE)
    proc = _eval(functions, tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "leaving out hangs and going on from the last checkpoint" in proc.stderr
    assert "Traceback" not in proc.stderr
    run = tmp_path / "run"
    failures = {f["name"]: f["error"] for f in json.loads((run / "failures.json").read_text())}
    assert "left out after training iteration" in failures["hangs"] and "lax.while_loop" in failures["hangs"]
    results = json.loads((run / "results.json").read_text())
    assert [r["name"] for r in results["ranking"]] == ["good"]
    assert _eval(alone, tmp_path / "run_alone").returncode == 0
    with_hung = {(g["candidate"], g["seed"]): g for g in results["groups"]}
    for g in json.loads((tmp_path / "run_alone" / "results.json").read_text())["groups"]:
        assert with_hung[(g["candidate"], g["seed"])]["task_fitness"] == g["task_fitness"]


FINITE_LOOP = """import jax
import jax.numpy as jnp


def compute_reward(state):
    steps = jax.lax.while_loop(lambda c: c < 3.0, lambda c: c + 1.0, jnp.float32(0.0))
    return jnp.cos(state["dof_pos"][:, 1]) + 0.0 * steps
"""


@pytest.mark.slow
def test_which_of_several_candidates_hung_is_found_by_halves(tmp_path):
    """Two candidates could have hung (both have a `lax.while_loop`; one ends, one does not on later states): the run
    trains again from its checkpoint without one of them; it hangs again or gets past the hang, which names the
    culprit, and restarts without it alone (`test_a_hang_is_found_by_halves_in_few_restarts` walks both ways). The
    innocent one with a loop and the good one are ranked, each with
    the results of a run without the hung one (no checkpoint is written while halving)."""
    functions, alone = tmp_path / "functions", tmp_path / "alone"
    for folder in (functions, alone):
        folder.mkdir()
        shutil.copy(GOOD, folder / "good.py")
        (folder / "b_loop.py").write_text(FINITE_LOOP)
    (functions / "a_hangs.py").write_text(LOOPS_ON_THE_DEVICE)
    proc = _eval(functions, tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ("2 candidates could be the cause: training again from the last checkpoint without " in proc.stderr
            and "leaving out a_hangs and going on from the last checkpoint" in proc.stderr), proc.stderr
    assert "Traceback" not in proc.stderr
    run = tmp_path / "run"
    failures = {f["name"]: f["error"] for f in json.loads((run / "failures.json").read_text())}
    assert "found among the candidates with a lax.while_loop by training half of them" in failures["a_hangs"]
    results = json.loads((run / "results.json").read_text())
    assert sorted(r["name"] for r in results["ranking"]) == ["b_loop", "good"]
    assert _eval(alone, tmp_path / "run_alone").returncode == 0
    with_hung = {(g["candidate"], g["seed"]): g for g in results["groups"]}
    for g in json.loads((tmp_path / "run_alone" / "results.json").read_text())["groups"]:
        assert with_hung[(g["candidate"], g["seed"])]["task_fitness"] == g["task_fitness"]


@pytest.mark.parametrize("culprit", range(7))
def test_a_hang_is_found_by_halves_in_few_restarts(tmp_path, monkeypatch, culprit):
    """The watchdog's search for the candidate that hung, one of 7 whose programs have no `lax.while_loop`, against a
    stand-in run: a restart hangs again while the culprit trains, and gets past the hang while it is left out
    (`hang_passed`). It ends with the culprit alone in `hung.json`, after at most 1 + ceil(log2 7) restarts."""
    from types import SimpleNamespace

    from envcoder.runs import watchdog
    from envcoder.runs.directory import RunDirectory

    run_dir = RunDirectory(tmp_path / "run")
    names = [f"c{i}" for i in range(7)]
    candidates = [SimpleNamespace(name=n, functions={"compute_reward": None}, source="") for n in names]
    restarts = []

    class Restarted(Exception):
        pass

    def restart(message, command):
        restarts.append(message)
        raise Restarted
    monkeypatch.setattr(watchdog, "restart", restart)
    with pytest.raises(Restarted):  # the first hang
        watchdog.leave_out(run_dir, candidates, frozenset(), len(names), 3, "iteration 3 hung", ["eval"])
    while "bisecting" in run_dir.read_hung()[-1]:
        out = {n for entry in run_dir.read_hung() for n in entry["candidates"]}
        with pytest.raises(Restarted):
            if f"c{culprit}" in out:  # the run gets past the hang
                watchdog.hang_passed(run_dir, ["eval"])
            else:
                watchdog.leave_out(run_dir, candidates, frozenset(out), len(names), 3, "iteration 3 hung", ["eval"])
    assert run_dir.read_hung() == [{"candidates": [f"c{culprit}"], "after_iteration": 3, "reason": (
        "iteration 3 hung (no lax.while_loop explains it: found by training half of the candidates at a time)")}]
    assert len(restarts) <= 4 and restarts[-1].endswith(f"leaving out c{culprit} and going on from the last "
                                                        "checkpoint")


def test_what_a_fault_suspects_is_left_out_alone_or_found_by_halves(tmp_path, monkeypatch):
    """Suspects named (the candidates that need much of the memory that ran out): one is left out at once, with the
    fault as its reason; of two, the search by halves starts among them only."""
    from types import SimpleNamespace

    from envcoder.runs import watchdog
    from envcoder.runs.directory import RunDirectory

    candidates = [SimpleNamespace(name=n, functions={"compute_reward": None}, source="") for n in "abc"]
    restarts = []
    monkeypatch.setattr(watchdog, "restart", lambda message, command: restarts.append(message))
    oom = "out of device memory while training iteration 2: Out of memory allocating 68719476736 bytes"
    one = RunDirectory(tmp_path / "one")
    watchdog.leave_out(one, candidates, frozenset(), 3, 2, oom, ["eval"], suspects=["b"])
    assert one.read_hung() == [{"candidates": ["b"], "after_iteration": 2, "reason": oom}]
    assert restarts[-1] == f"{oom}; leaving out b and going on from the last checkpoint"
    two = RunDirectory(tmp_path / "two")
    watchdog.leave_out(two, candidates, frozenset(), 3, 2, oom, ["eval"], suspects=["c", "a"])
    assert two.read_hung()[0]["candidates"] == ["c"] and two.read_hung()[0]["bisecting"]["suspects"] == ["c", "a"]
    # Got past it: two iterations after the one that failed (metrics are read one late), or at the end of training.
    halving = two.read_hung()[0]
    assert [watchdog.past_fault(halving, done, 10) for done in (2, 3, 4)] == [False, False, True]
    assert watchdog.past_fault(halving, 3, 3) and watchdog.past_fault(halving, 2, 10, stopped=True)
    assert not watchdog.past_fault(halving, 9, 10, evaluated=True)  # it failed in training, not in the evaluation


@pytest.mark.slow
def test_the_watchdog_ends_a_run_whose_only_candidates_hang(tmp_path):
    """With nothing left to train, the hung run ends with one line naming the candidate; the run directory stays
    readable. (A Python loop can no longer hang the training process: it traces no candidate code.)"""
    functions = tmp_path / "functions"
    functions.mkdir()
    (functions / "hangs.py").write_text(LOOPS_ON_THE_DEVICE)
    proc = _eval(functions, tmp_path / "run")
    assert proc.returncode == EXIT_STATUS, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("envcoder: error: ") and ("did not finish in 5 s; the candidates with a lax.while_loop, "
                                                      "which can run for ever on the device: hangs;") in last, last
    assert json.loads((tmp_path / "run" / "config.json").read_text())["candidates"] == ["hangs"]


def test_a_candidate_writes_only_to_a_size_limited_scratch_folder_of_its_worker(tmp_path):
    """The jail's mount namespace: the worker mounts a tmpfs on its scratch folder that only it sees, so what a
    candidate's process writes there (8 files of 63 MiB filled the disk's temporary folder before) stops at its
    size; the folder outside the namespace stays empty."""
    from envcoder.candidates.jail import Jail, start_jailed, unshare_command

    if not Jail.here().mount_namespace:
        pytest.skip(Jail.here().weaker or "no mount namespace here")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    code = ("import errno, sys; from envcoder.candidates.jail import mount_scratch\n"
            f"assert mount_scratch({str(scratch)!r}, 2**20)\n"
            "try:\n"
            f"    open({str(scratch / 'big')!r}, 'wb').write(bytes(2 * 2**20))\n"
            "except OSError as err:\n"
            "    print('refused', errno.errorcode[err.errno])\n")
    src = str(ROOT / "src")
    proc = start_jailed(unshare_command(), [sys.executable, "-c", code], stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": src})
    out, err = proc.communicate(timeout=60)
    assert out.decode().strip() == "refused ENOSPC", err.decode()
    assert list(scratch.iterdir()) == []  # the tmpfs was the namespace's own


def test_a_program_is_weighed_at_the_run_s_size_before_it_trains(tmp_path):
    """The worker measures each program's cost at two sizes (XLA's cost and memory analyses); the training process
    extrapolates them to its own size and refuses what would stall or overfill the run. A reward that builds an
    array of every pair of environments costs nothing much at the sample's size and grows as the square: refused at
    4,096 environments for its work, at 16 groups of 64 on a small device for its memory; the good file passes."""
    import math

    from envcoder.candidates.costs import COST_FACTOR, check_costs, cost_at
    from envcoder.candidates.sandbox import SandboxValidator

    from envcoder.candidates.prepare import sandboxed_candidates
    from envcoder.runs.eval_settings import EvalSettings
    from envcoder.tasks import get_task

    (tmp_path / "good.py").write_text(GOOD.read_text())
    (tmp_path / "square.py").write_text((ATTACKS / "square_memory.py").read_text())
    run = EvalSettings(task="Cartpole", functions=tmp_path, out=tmp_path / "out", seeds=tuple(range(16)),
                       envs_per_candidate=64)
    with SandboxValidator("Cartpole", ("compute_reward",), timeout_s=60.0) as validator:
        good, square = (v.candidates[0] for v in validator.validate([
            ("good", GOOD.read_text(), str(GOOD)), ("square", (ATTACKS / "square_memory.py").read_text(), "square.py")]))
        # A run's preparation asks for its device's memory and refuses what would overfill it there.
        kept, failures = sandboxed_candidates(run, get_task("Cartpole"), validator, device_memory=lambda: 2**27)
        assert [c.name for c in kept] == ["good"] and [f.name for f in failures] == ["square"]
        assert "GiB of working memory at 16 group(s) of 64 environments" in failures[0].error
        assert [c.name for c in sandboxed_candidates(run, get_task("Cartpole"), validator)[0]] == ["good", "square"]
    cost = square.functions["compute_reward"].cost
    assert cost["envs"] == [64, 256] and cost["own"]["flops"] > 0
    ratio = cost["temporary"][1] / cost["temporary"][0]
    assert ratio > 10  # 4× the environments, 16× the pairs
    assert math.isclose(cost_at(cost, "temporary", 512), cost["temporary"][1] * 2 ** math.log(ratio, 4))
    assert cost_at(good.functions["compute_reward"].cost, "flops", 4096) < COST_FACTOR * 1e4 * 4096
    check_costs(good, 16, 4096, 80 * 2**30)
    check_costs(square, 1, 64, 80 * 2**30)
    with pytest.raises(CandidateError, match=r"operations per environment and step at 4096 environments, [\d,]+× the "
                                             r"task's own compute_reward\(\)"):
        check_costs(square, 1, 4096, 80 * 2**30)
    with pytest.raises(CandidateError, match=r"GiB of working memory at 16 group\(s\) of 64 environments, more than "
                                             "50% of the device's"):
        check_costs(square, 16, 64, 2**27)
    # What the device's memory running out in training suspects: the candidates that need a share of it.
    from envcoder.candidates.costs import memory_need
    from envcoder.runs.memory import OOM_SUSPECT_SHARE

    assert memory_need(square, 1, 2048) > OOM_SUSPECT_SHARE * 80 * 2**30
    assert memory_need(good, 1, 2048) < 1e-4 * 80 * 2**30


def test_only_a_candidate_that_does_real_work_beside_the_others_is_named_heavy():
    """Per environment and step: three candidates of a few operations (a constant, `1 - angle²`, the README's
    good_upright, about 20) and one of a million. good_upright is 10× the median, yet a few dozen operations slow no
    one; the million-operation one is named, with its ratio to the median."""
    from types import SimpleNamespace

    from envcoder.candidates.costs import COST_FLOOR, HEAVY_FACTOR, heavier_than_neighbours

    def candidate(name, flops_per_env):
        cost = {"envs": [64, 256], "flops": [flops_per_env * 64, flops_per_env * 256]}
        return SimpleNamespace(name=name, functions={"compute_reward": SimpleNamespace(cost=cost)})

    few = [candidate("alive", 1.0), candidate("angle", 2.0), candidate("poor", 2.0), candidate("good", 22.0)]
    assert heavier_than_neighbours(few, 256) == []
    assert heavier_than_neighbours(few + [candidate("heavy", 1e6)], 4096) == [("heavy", 1e6 / 2.0)]
    edge = HEAVY_FACTOR * COST_FLOOR["flops"]  # over 10× the median, but not over 10× the floor: not named
    assert heavier_than_neighbours(few + [candidate("edge", edge)], 256) == []
