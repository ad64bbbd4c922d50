"""`envcoder auto` end to end on Cartpole (CPU, no network).

- An LLM run against a fake OpenAI-compatible server serving good candidates, prose around code, malformed
  code, a forbidden import, an endless `lax.while_loop`, NaN rewards, a wrong shape, HTTP 429 and 500, a
  stall past the timeout, a malformed response and an answer without code: the loop completes, records all
  of it, feeds the errors back and ranks the good candidates.
- Resume: a run killed during its second iteration, restarted, makes no proposer call again and ends with
  the same records as the uninterrupted run.
- The offline proposer improves on a deliberately poor starting reward.
"""

import dataclasses
import json
import math
import re
import shutil
import subprocess
import tempfile
import sys
import time
from pathlib import Path

import pytest

from envcoder.cli import main
from envcoder.search import loop
from envcoder.candidates.files import check_name
from envcoder.candidates.variants import freeze_sweep
from envcoder.runs.results import RunResults
from envcoder.search.loop import AutoRun, AutoSettings, load_settings
from envcoder.search.population import halving_slots
from fake_llm import USAGE, FakeLLMServer
from conftest import BENCHMARKS, TESTS

HERE = TESTS

GOOD_A = """import jax.numpy as jnp

def compute_reward(state):
    angle = state["dof_pos"][:, 1]
    upright = jnp.exp(-10.0 * angle * angle)
    return upright, {"upright": upright}
"""
GOOD_B = """def compute_reward(state):
    angle = state["dof_pos"][:, 1]
    alive = 1.0 - angle * angle
    return alive, {"alive": alive}
"""
GOOD_C = """def compute_reward(state):
    centred = 1.0 - 0.1 * jnp.abs(state["dof_pos"][:, 0]) - state["dof_pos"][:, 1] ** 2
    return centred
"""
MALFORMED = "def compute_reward(state)\n    return state['dof_pos'][:, 1]\n"
FORBIDDEN = "import os\n\ndef compute_reward(state):\n    return state['dof_pos'][:, 1]\n"
ENDLESS = """def compute_reward(state):
    # never ends inside XLA, where no signal reaches: only the sandbox's wall-clock kill stops it
    forever = jax.lax.while_loop(lambda c: c >= 0.0, lambda c: c + 1.0, 0.0)
    return state["dof_pos"][:, 1] + forever
"""
NAN = "def compute_reward(state):\n    return jnp.log(state['dof_pos'][:, 1])\n"
LOG = "W = -5.0\n\ndef compute_reward(state):\n    return jnp.log(W + 3.0 + state['dof_pos'][:, 1] ** 2)\n"
"""NaN with its W (log of a negative number); finite with W = -2.0: its constants decide."""
WRONG_SHAPE = "def compute_reward(state):\n    return state['dof_pos']\n"
MEMORY_BOMB = "TABLE = [0.0] * 10**10\n\ndef compute_reward(state):\n    return state['dof_pos'][:, 1]\n"


def fenced(code, prose="Here is my candidate."):
    return f"{prose}\n\n```python\n{code}```\n\nThis should keep the pole upright."


SCRIPT = [
    # iteration 1, first round: slots 0, 1, 2
    ("status", 429), ("text", fenced(GOOD_A)),
    ("status", 500), ("text", fenced(MALFORMED)),
    ("text", fenced(FORBIDDEN)),
    # second round: slots 1 and 2 get their errors back
    ("stall", 3.0), ("text", fenced(ENDLESS)),
    ("text", fenced(NAN)),
    # third round
    ("text", fenced(WRONG_SHAPE)),
    ("text", GOOD_B),  # bare code, no fence
    # iteration 2
    ("raw", {"oops": 1}),
    ("text", fenced(GOOD_C)),
    ("text", "I am sorry, I cannot write that."),
    ("text", fenced(GOOD_A)),
    ("text", fenced(MEMORY_BOMB)),
    ("text", fenced(GOOD_B)),
]
ANSWERS = sum(1 for kind, _ in SCRIPT if kind == "text")


def settings(out, url, **kw):
    return AutoSettings(**{
        "task": "Cartpole", "out": out, "task_description": "Keep the pole upright for as long as possible.",
        "llm": "gpt-4o", "base_url": f"{url}/v1", "candidates_per_iteration": 3, "iterations": 2, "retries": 2,
        "envs_per_candidate": 16, "train_iterations": 4, "final_seeds": 2, "final_max_seeds": 2, "final_top": 2,
        "concurrency": 1, "request_timeout_s": 1.0, "api_retries": 2, "validation_timeout_s": 15.0,
        "validation_workers": 1, "proposer": "offline", **kw})  # by default each candidate trains as written


@pytest.fixture(scope="module")
def llm_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("auto") / "llm"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", "test-key")
        with FakeLLMServer(SCRIPT) as server:
            summary = AutoRun(settings(out, server.url)).run()
    return out, summary, server.requests


def without_compile_timings(record):
    """A summary or iteration record without what each evaluation compiled and how long it and the iteration took
    (measurements of the run, like results.json's timings), for comparing a resumed run with an uninterrupted one."""
    if isinstance(record, dict):
        return {k: without_compile_timings(v) for k, v in record.items()
                if k not in ("compile", "seconds", "training_seconds")}
    if isinstance(record, list):
        return [without_compile_timings(v) for v in record]
    return record


def drafts(out, iteration):
    return {(d["slot"], d["attempt"]): d for d in json.loads((out / f"iter_{iteration:02d}" / "drafts.json").read_text())}


@pytest.mark.slow
def test_every_fault_is_recorded_with_its_reason(llm_run):
    out, summary, requests = llm_run
    assert len(requests) == len(SCRIPT)  # every step served once; the SDK retried 429, 500 and the stall
    first, second = drafts(out, 0), drafts(out, 1)
    assert first[(0, 0)]["ok"] and first[(0, 0)]["source"] == GOOD_A
    assert "syntax error" in first[(1, 0)]["error"]
    assert "import of 'os' is not allowed" in first[(2, 0)]["error"]
    assert "longer than 15 s" in first[(1, 1)]["error"]
    assert "NaN or inf" in first[(2, 1)]["error"]
    assert "returned shape (68, 2), expected (68,)" in first[(1, 2)]["error"]
    assert first[(2, 2)]["ok"] and first[(2, 2)]["source"] == GOOD_B
    assert second[(0, 0)]["error"].startswith("proposer call failed: malformed response")
    assert "no Python code found" in second[(2, 0)]["error"]
    assert "MemoryError" in second[(2, 1)]["error"]  # over the sandbox's memory limit, not this process's
    assert all(second[(slot, attempt)]["ok"] for slot, attempt in [(1, 0), (0, 1), (2, 2)])
    # Only valid candidates reach the evaluation.
    assert sorted(p.stem for p in (out / "iter_00" / "candidates").glob("*.py")) == ["it00_c00", "it00_c02"]
    assert json.loads((out / "iter_00" / "eval" / "failures.json").read_text()) == []


@pytest.mark.slow
def test_errors_and_statistics_are_fed_back(llm_run):
    out, _, requests = llm_run
    fix = json.loads((out / "llm" / "it00_s01_a1.json").read_text())["messages"]
    assert [m["role"] for m in fix] == ["user", "assistant", "user"]
    assert "syntax error" in fix[-1]["content"] and fix[1]["content"] == fenced(MALFORMED)
    reflection = json.loads((out / "llm" / "it01_s00_a0.json").read_text())["messages"][0]["content"]
    for expected in ("Keep the pole upright", "Results of iteration 1", "| it00_c00 |", "| it00_c02 |",
                     "it00_c01: \"it00_c01.py", "returned shape", "Best candidate so far",
                     "reward component `", "task fitness of finished episodes", "```python"):
        assert expected in reflection, expected
    # The system prompt carries the rules and the task reference, as the server received it.
    system = requests[1]["body"]["messages"][0]
    assert system["role"] == "system" and "compute_reward(state)" in system["content"]
    assert "dof_pos [E, 2]" in system["content"] and "upright" in system["content"]


@pytest.mark.slow
def test_good_candidates_are_ranked_and_the_run_is_summarised(llm_run):
    out, summary, _ = llm_run
    record = json.loads((out / "iter_01" / "iteration.json").read_text())
    assert sorted(row["name"] for row in record["table"]) == ["it01_c00", "it01_c01", "it01_c02"]
    assert all(row["status"] == "ok" and 0.0 <= row["fitness"] <= 1.0 for row in record["table"])
    ranking = summary["final_ranking"]  # the two best finds and the task's default shaping
    assert len(ranking) == 3 and all(r["seeds"] == 2 for r in ranking)
    assert "task_default" in [r["name"] for r in ranking]
    assert summary["best"]["name"] == next(r["name"] for r in ranking if r["name"] != "task_default")
    assert summary["task_default"]["text"] in (out / "summary.md").read_text()
    assert (out / "best.py").read_text() in (GOOD_A, GOOD_B, GOOD_C)
    assert summary["proposer_calls"] == 13 and summary["failed_calls"] == 1
    assert (summary["input_tokens"], summary["output_tokens"]) == (ANSWERS * USAGE[0], ANSWERS * USAGE[1])
    assert summary["cost_usd"] == pytest.approx(ANSWERS * (USAGE[0] * 2.5 + USAGE[1] * 10.0) / 1e6)
    text = (out / "summary.md").read_text()
    assert f"Best: **{summary['best']['name']}**" in text and "Proposer calls: 13 (1 failed)" in text


@pytest.mark.slow
def test_killed_run_resumes_without_repeating_proposer_calls(llm_run, tmp_path, monkeypatch):
    reference_out, reference, _ = llm_run
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    out = tmp_path / "killed"
    evaluate, calls = loop.run_evaluation, []

    def killed_during_the_second_iteration(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # what Ctrl-C or a kill does to the process, mid-training
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(loop, "run_evaluation", killed_during_the_second_iteration)
    with FakeLLMServer(SCRIPT) as server:
        with pytest.raises(KeyboardInterrupt):
            AutoRun(settings(out, server.url)).run()
    assert (out / "iter_01" / "drafts.json").exists() and not (out / "iter_01" / "iteration.json").exists()
    monkeypatch.setattr(loop, "run_evaluation", evaluate)

    with FakeLLMServer([]) as server:  # any call to it would be a repeated, paid call
        saved = json.loads((out / "auto.json").read_text())
        (out / "auto.json").write_text(json.dumps({**saved, "base_url": f"{server.url}/v1"}))
        resumed = AutoRun(load_settings(out), resume=True).run()
    assert server.requests == []
    assert without_compile_timings(resumed) == without_compile_timings(reference)
    for name in ("iter_00/iteration.json", "iter_01/iteration.json", "iter_01/drafts.json"):
        assert without_compile_timings(json.loads((out / name).read_text())) == without_compile_timings(
            json.loads((reference_out / name).read_text())), name


@pytest.mark.slow
def test_existing_run_directory_points_to_resume(llm_run, capsys):
    out, _, _ = llm_run
    assert main(["auto", "--task", "Cartpole", "--out", str(out)]) == 2
    assert f"envcoder auto --resume {out}" in capsys.readouterr().err
    assert main(["auto", "--resume", str(out), "--task", "Cartpole"]) == 2
    assert "give no --task" in capsys.readouterr().err


def test_sandbox_workers_see_no_credentials(monkeypatch, tmp_path):
    from envcoder.candidates.pool import WORKER_XLA_FLAGS, worker_env

    for name in ("OPENAI_API_KEY", "HF_TOKEN", "MY_SERVICE_CREDS", "JAX_PROXY_KEY"):  # whatever their names
        monkeypatch.setenv(name, "secret")
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_autotune_level=0")  # the training process's; a worker compiles its own way
    env = worker_env(str(tmp_path))
    assert "secret" not in env.values() and env["JAX_PLATFORMS"] == "cpu"
    assert env["HOME"] == env["TMPDIR"] == str(tmp_path / "scratch")  # the one folder a candidate may write to
    assert env["XLA_FLAGS"] == WORKER_XLA_FLAGS == "--xla_backend_optimization_level=0"


def test_sandbox_workers_take_a_share_of_the_cores_and_a_native_crash_says_why():
    """On a 64-core host XLA's thread stacks broke a child's memory limit (every Ant file died while compiling,
    exit -6): a worker runs on at most `CORES` cores. Here (2 cores) the share is checked with `CORES = 1`; and the
    reason for such a crash leads with the line that says why, not with the stack trace's last frames."""
    from envcoder.candidates.pool import FATAL_LINE

    code = ("import os, envcoder.candidates.worker as w; w.CORES = 1; w._fewer_cores(); "
            "print(len(os.sched_getaffinity(0)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"
    stderr = ["F1126 22:44:52.691222    4618 env.cc:93] Check failed: ret == 0 (11 vs. 0) Thread tf_foreach creation "
              "via pthread_create() failed.", "*** Check failure stack trace: ***",
              "    @           0x54b1d5  PyObject_Call", "    @           0x64f814  (unknown)"]
    assert [line for line in stderr if FATAL_LINE.search(line)] == stderr[:1]


def test_sandbox_workers_import_mujoco_whatever_opengl_backend_the_parent_names(monkeypatch):
    """`import mujoco` raises where MUJOCO_GL names a backend it cannot load (`envcoder play` sets MUJOCO_GL for its
    process, OSMesa on a machine without a display); the workers never render, so they do not load one."""
    from envcoder.candidates.pool import worker_env

    monkeypatch.setenv("MUJOCO_GL", "no-such-backend")
    assert subprocess.run([sys.executable, "-c", "import mujoco"], capture_output=True).returncode != 0
    result = subprocess.run([sys.executable, "-c", "import mujoco"], env=worker_env(tempfile.gettempdir()),
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_settings_round_trip_through_auto_json(tmp_path):
    s = settings(tmp_path, "http://127.0.0.1:9", initial=(tmp_path / "a.py",), price=(1.0, 2.0))
    assert AutoSettings.from_json(json.loads(json.dumps(s.to_json()))) == dataclasses.replace(s)


def test_an_evaluation_of_the_run_takes_every_setting_the_two_records_share(tmp_path):
    s = settings(tmp_path, "http://127.0.0.1:9", seed=3, overrides={"gamma": 0.9}, physics="jax", devices=1)
    evaluation = s.evaluation(tmp_path / "f", tmp_path / "e", 2, "halving", fitness="upright")
    assert (evaluation.functions, evaluation.out, evaluation.seeds) == (tmp_path / "f", tmp_path / "e", (3, 4))
    assert (evaluation.schedule, evaluation.rungs, evaluation.train_iterations) == ("halving", 2, s.train_iterations)
    for name in ("task", "shaper_types", "envs_per_candidate", "algo", "overrides", "config_file", "physics",
                 "validation_timeout_s", "validation_memory_gib", "compile_timeout_s", "iteration_timeout_s", "devices"):
        assert getattr(evaluation, name) == getattr(s, name), name
    assert s.evaluation(tmp_path, tmp_path, 1, envs=64).envs_per_candidate == 64 and evaluation.fitness == "upright"


def test_the_final_evaluation_budget_is_resolved_once_and_old_runs_keep_theirs(tmp_path):
    s = settings(tmp_path, "http://127.0.0.1:9")
    assert s.final_envs_per_candidate is None
    assert s.resolved().final_envs_per_candidate == s.envs_per_candidate  # on a CPU: the search's envs
    assert dataclasses.replace(s, final_envs_per_candidate=64).resolved().final_envs_per_candidate == 64
    old = s.to_json()
    del old["final_envs_per_candidate"]  # an auto.json written before --final-envs: its final ran at the search's
    assert AutoSettings.from_json(dict(old, envs_per_candidate=32)).final_envs_per_candidate == 32


def test_sweep_files_become_one_candidate_file_per_variant():
    source = "PARAMS = {'W': [0.5, 2.0],\n          'K': [1]}\nW = 1.0\nK = 3\n\ndef compute_reward(state):\n    return W * K\n"
    variants = dict(freeze_sweep(source))
    assert list(variants) == ["__W-0.5__K-1.0", "__W-2.0__K-1.0"]
    assert "PARAMS" not in variants["__W-2.0__K-1.0"] and "W = 2.0\nK = 1\n" in variants["__W-2.0__K-1.0"]
    close = dict(freeze_sweep("PARAMS = {'W': [0.5, 0.5000001, 1e20]}\nW = 1.0\n"))  # no two share a name
    assert list(close) == ["__W-0.5", "__W-0.5000001", "__W-1e20"]
    for suffix in close:  # each a valid candidate file name
        check_name(f"start{suffix}", "start.py")
    assert freeze_sweep("W = 1.0\n") == [("", "W = 1.0\n")]


def test_a_start_file_that_is_no_plain_sweep_is_left_to_the_sandbox_as_it_is():
    """`auto` reads start files' sweeps in the jail: what is not a plain table of module constants (a name it does
    not define, a syntax error, a NUL byte, more than MAX_VARIANTS combinations) goes to the sandbox whole, which
    refuses it with its reason, instead of ending the run. Of two tables the last holds, as when the module runs
    (such a start ended `auto` with a KeyError in population_rows before): both go."""
    from envcoder.candidates.variants import MAX_VARIANTS

    twice = dict(freeze_sweep("PARAMS = {'NOPE': [1.0]}\nPARAMS = {'K': [1.0, 2.0]}\nK = 1.0\n"))
    assert list(twice) == ["__K-1.0", "__K-2.0"] and "PARAMS" not in twice["__K-2.0"] and "K = 2.0" in twice["__K-2.0"]
    for source in ("PARAMS = {'NOPE': [1.0, 2.0]}\nK = 1.0\n", "def compute_reward(state:\n", "K = 1.0\x00\n",
                   f"PARAMS = {{'A': {list(range(MAX_VARIANTS))}, 'B': [1, 2]}}\nA = 1\nB = 2\n"):
        assert freeze_sweep(source) == [("", source)], source
    annotated = dict(freeze_sweep("PARAMS = {'K': [1.0, 2.0]}\nK: float = 1.0\n"))  # an annotated constant
    assert list(annotated) == ["__K-1.0", "__K-2.0"] and "K = 2.0" in annotated["__K-2.0"]


def sizes(verdict) -> list[tuple]:
    """What validation found of each candidate of a verdict."""
    return [(c.obs_dim, c.action_dim, c.reward_components, c.critic_obs_dim) for c in verdict.candidates]


def test_a_passed_verdict_is_kept_on_disk_and_a_later_validator_skips_the_sandbox(tmp_path, monkeypatch):
    """Also: with `same_code_once` (a population search's validator) a file that differs from one that passed only
    in its float constants takes its verdict and programs with its own constants, unchecked; one whose code failed
    with other constants is checked on its own."""
    from envcoder import compile_cache
    from envcoder.candidates import pool
    from envcoder.candidates.constants import with_constants
    from envcoder.candidates.sandbox import SandboxValidator

    monkeypatch.setattr(compile_cache, "_CACHE_DIR", tmp_path)
    checked = []
    check = pool.Worker.check
    monkeypatch.setattr(pool.Worker, "check", lambda self, name, *rest: checked.append(name) or check(self, name, *rest))
    copy = with_constants(GOOD_A, {"_K_0": -3.0})  # `-10.0` in its function is the constant _K_0
    fixed = with_constants(LOG, {"W": -2.0})
    with SandboxValidator("Cartpole", ("compute_reward",), timeout_s=60.0, same_code_once=True) as first:
        good, bad, good_copy, log_bad, log_fixed = first.validate(
            [("good", GOOD_A), ("bad", NAN), ("good_copy", copy), ("log_bad", LOG), ("log_fixed", fixed)])
        assert sorted(checked) == ["bad", "good", "log_bad", "log_fixed"]  # not good_copy: GOOD_A's code passed
        assert good_copy.ok and [c.name for c in good_copy.candidates] == ["good_copy"]
        assert sizes(good_copy) == sizes(good)
        assert good.candidates[0].function_params == {"compute_reward": {"_K_0": -10.0}}
        assert good_copy.candidates[0].function_params == {"compute_reward": {"_K_0": -3.0}}  # its own, as data
        assert good_copy.candidates[0].source == copy and good_copy.candidates[0].code_key == good.candidates[0].code_key
        assert good_copy.candidates[0].functions["compute_reward"].text == good.candidates[0].functions["compute_reward"].text
        assert "NaN or inf" in log_bad.error and log_fixed.ok  # its code failed with W = -5: checked with W = -2
        assert log_fixed.candidates[0].function_params == {"compute_reward": {"W": -2.0, "_K_0": 3.0}}
        monkeypatch.setattr(pool.Worker, "check", lambda *_: pytest.fail("a source that passed was checked again"))
        [later] = first.validate([("good_later", with_constants(GOOD_A, {"_K_0": -1.0}))])  # a later call's too
        assert later.candidates[0].function_params == {"compute_reward": {"_K_0": -1.0}}
        [renamed] = first.validate([("good_r1", GOOD_A)])  # a search's new seeds of one file: new names
        assert renamed.ok and renamed.name == "good_r1" and [c.name for c in renamed.candidates] == ["good_r1"]
        assert sizes(renamed) == sizes(good)
        # A verdict whose candidate has another name (the bug the renaming had) leaves its file out, saying so.
        from envcoder.candidates.prepare import sandboxed_candidates
        from envcoder.runs.evaluation import EvalSettings
        from envcoder.tasks import get_task

        (tmp_path / "files").mkdir()
        (tmp_path / "files" / "good.py").write_text(GOOD_A)
        misnamed = dataclasses.replace(good, candidates=(dataclasses.replace(good.candidates[0], name="other"),))
        candidates, failures = sandboxed_candidates(
            EvalSettings(task="Cartpole", functions=tmp_path / "files", out=tmp_path / "run"), get_task("Cartpole"),
            validator=type("Validator", (), {"validate": lambda self, drafts: [misnamed]})())
        assert candidates == [] and [f.name for f in failures] == ["good"]
        assert "names the candidate other" in failures[0].error and "please report it" in failures[0].error
    assert good.ok and "NaN or inf" in bad.error
    stored = sorted((tmp_path / "envcoder-verdicts").glob("*.json"), key=lambda f: "good" not in f.read_text())
    assert len(stored) == 2  # the passed verdicts that were checked only: a failure is checked again next time
    with SandboxValidator("Cartpole", ("compute_reward",), timeout_s=60.0) as second:
        [again] = second.validate([("good", GOOD_A, "somewhere/good.py")])
        assert second._idle.qsize() == 0, "a worker was started for a source that passed before"
        assert (sizes(again), again.errors) == (sizes(good), good.errors)
        assert again.candidates[0].function_keys == good.candidates[0].function_keys  # its programs, kept with it
        assert again.candidates[0].functions["compute_reward"].text == good.candidates[0].functions["compute_reward"].text
        # Another source, name, task, limit or platform is another verdict; a damaged entry is checked anew.
        assert second._stored("good", GOOD_A + "\n", "good.py") is None
        assert second._stored("other", GOOD_A, "good.py") is None
        assert SandboxValidator("Cartpole", ("compute_reward",), timeout_s=30.0)._stored("good", GOOD_A, "g.py") is None
        assert SandboxValidator("Cartpole", ("compute_reward",), timeout_s=60.0,
                                platform="cuda")._stored("good", GOOD_A, "g.py") is None
        stored[0].write_text('{"good": {"obs_dim": 4')
        assert second._stored("good", GOOD_A, "good.py") is None


def test_workers_started_ahead_serve_a_validator_of_their_task_only(tmp_path, monkeypatch):
    """`envcoder eval` starts the sandbox's workers before its own imports (`start_workers`); a validator takes
    those of its task, shaper types and memory limit, and ends the others when it closes."""
    import os

    from envcoder import compile_cache
    from envcoder.candidates.pool import start_workers
    from envcoder.candidates.sandbox import SandboxValidator

    monkeypatch.setattr(compile_cache, "_CACHE_DIR", tmp_path)
    [other] = start_workers("CartpoleDiscrete", ("compute_reward",), 4.0, 1)  # another task's
    [ours] = start_workers("cartpole", ("compute_reward",), 4.0, 1)  # the task's name in any case
    with SandboxValidator("Cartpole", ("compute_reward",), timeout_s=60.0) as validator:
        good, bad = validator.validate([("good", GOOD_A), ("bad", NAN)])
        assert good.ok and "NaN or inf" in bad.error
        assert good.candidates[0].action_dim == 1  # Cartpole's (CartpoleDiscrete's policy picks one of 2)
        worker = validator._idle.get()
        assert worker.proc.pid == ours  # taken, not started anew
        validator._idle.put(worker)
    for pid in (ours, other):  # both ended (and reaped) when the validator closed
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_sandbox_checks_candidates_on_rollout_states_not_only_the_reference_pose(monkeypatch):
    """A reward that is finite at the reference pose (step 0) but divides by zero one step later passes the
    reference-pose check and is caught on the short rollout's states. MuJoCo C computes those states: no MJX
    physics is compiled (a sandbox worker's start)."""
    from envcoder.candidates import CandidateError, load_candidate
    from envcoder.candidates.validate import rollout_states, sample_state, validate_candidate
    from envcoder.sim import Simulator
    from envcoder.tasks import get_task

    task = get_task("Cartpole")
    sim = Simulator(task.model_file, task.substeps)

    def no_mjx(*args, **kwargs):
        raise AssertionError("the sample states ran MJX's physics")
    for name in ("reset", "physics_step", "step"):
        monkeypatch.setattr(Simulator, name, no_mjx)
    late = load_candidate("late_nan.py", source="def compute_reward(state):\n"
                                                "    return 1.0 / (1.0 - state['progress_buf'].astype(float))\n")
    validate_candidate(task, sim, late, sample_state(task, sim))  # progress 0 everywhere: finite
    states = rollout_states(task, sim)
    assert states["dof_pos"].shape == (4 * 17, 2) and set(states["progress_buf"].tolist()) == set(range(17))
    with pytest.raises(CandidateError, match="NaN or inf"):
        validate_candidate(task, sim, late, states)


@pytest.mark.slow
def test_auto_killed_with_sigkill_during_an_evaluation_resumes_to_the_same_result(tmp_path):
    from fault_harness import run_killed

    args = ["auto", "--task", "Cartpole", "--initial", str(HERE / "candidates" / "auto" / "poor_weights.py"),
            "--proposer", "offline", "--candidates-per-iteration", "2", "--iterations", "2",
            "--envs-per-candidate", "16",
            "--train-iterations", "3", "--final-seeds", "2", "--final-max-seeds", "2", "--final-top", "1"]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert main([*args, "--out", str(whole)]) == 0
    run_killed("second-evaluation", [*args, "--out", str(killed)])  # in iteration 2's evaluation
    assert (killed / "iter_00" / "iteration.json").exists() and not (killed / "iter_01" / "iteration.json").exists()
    assert main(["auto", "--resume", str(killed)]) == 0
    for name in ("summary.json", "iter_00/iteration.json", "iter_01/iteration.json"):
        assert without_compile_timings(json.loads((killed / name).read_text())) == without_compile_timings(
            json.loads((whole / name).read_text())), name
    assert (killed / "best.py").read_text() == (whole / "best.py").read_text()
    rankings = [json.loads((run / "final" / "eval" / "results.json").read_text())["ranking"] for run in (whole, killed)]
    assert rankings[0] == rankings[1]
    # The evaluation that was killed went on from its last checkpoint (its training was done) instead of starting over.
    resumed = json.loads((killed / "iter_01" / "eval" / "results.json").read_text())["timings"]
    assert resumed["resumed_after_iteration"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("proposer, stopped", [("offline", "final/eval"), ("population", "iter_00/eval")])
def test_auto_stopped_by_ctrl_c_in_an_evaluation_goes_on_from_its_checkpoint(tmp_path, monkeypatch, capsys, proposer,
                                                                            stopped):
    """A Ctrl-C while an evaluation trains (an offline search's final; a population search's iteration, its
    population run) checkpoints it; `auto --resume` trains it on from there (not from its first iteration, as it
    did), says so when stopped, and ends with the summary."""
    import os
    import signal

    from envcoder.runs.background import LoggedProgress

    out, update, fired = tmp_path / "auto", LoggedProgress.update, []

    def ctrl_c_in_the_evaluation(self, task=None, advance=0, **fields):
        update(self, task, advance, **fields)
        if advance and self.completed >= 2 and not fired and (out / stopped / "config.json").exists():
            fired.append(self.completed)
            os.kill(os.getpid(), signal.SIGINT)

    args = ["auto", "--task", "Cartpole", "--initial", str(HERE / "candidates" / "auto" / "poor_weights.py"),
            "--proposer", proposer, "--candidates-per-iteration", "1", "--iterations", "1", "--copies", "2",
            "--envs-per-candidate", "16", "--train-iterations", "6", "--final-seeds", "1", "--final-max-seeds", "1",
            "--final-top", "1", "--out", str(out)]
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        with monkeypatch.context() as stopping:
            stopping.setattr(LoggedProgress, "update", ctrl_c_in_the_evaluation)
            assert main(args) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    assert "an evaluation cut off goes on from its last checkpoint" in " ".join(capsys.readouterr().err.split())
    done = json.loads((out / stopped / "checkpoints" / "progress.json").read_text())["iteration"]
    assert fired and 1 <= done < 6 and not (out / "summary.json").exists()
    assert main(["auto", "--resume", str(out)]) == 0
    resumed = json.loads((out / stopped / "results.json").read_text())
    assert resumed["timings"]["resumed_after_iteration"] == done
    assert json.loads((out / "summary.json").read_text())["final_ranking"]


@pytest.mark.slow  # 40 s here
def test_a_resumed_search_goes_on_with_a_cut_off_evaluation_only_where_it_recorded_the_same_settings(tmp_path,
                                                                                                   monkeypatch):
    """`auto --resume` hands an evaluation that was cut off after recording its settings (config.json) to
    `run_evaluation` to go on from its checkpoint; one whose recorded settings differ (here another number of
    environments) starts over in an empty folder. (The evaluations are stood in for: the first is stopped as a
    Ctrl-C would, and each records what it was asked for.)"""
    calls, stop = [], [True]

    def evaluate(plan, console=None, resume=False, validator=None, restart=None, until=None):
        settings = plan.settings
        calls.append((settings.out, resume, (settings.out / "config.json").exists()))
        settings.out.mkdir(parents=True, exist_ok=True)
        (settings.out / "config.json").write_text(json.dumps(settings.to_config()))
        if stop[0]:
            raise KeyboardInterrupt
        names = sorted(p.stem for p in settings.functions.glob("*.py"))
        ranking = [{"name": n, "fitness_mean": 0.5, "fitness_std": 0.0, "ci_low": 0.5, "ci_high": 0.5, "seeds": 1,
                    "shaped_return": 1.0, "episode_length": 10.0} for n in names]
        groups = [{"candidate": n, "seed": 0, "task_fitness": 0.5, "episode_length": 10.0, "shaped_return": 1.0,
                   "training_task_fitness": 0.5, "diverged_at_iteration": None, "solved_at_iteration": None,
                   "params": {}} for n in names]
        return RunResults.from_json({"task": "Cartpole", "fitness": "upright", "fitness_doc": "", "schedule": "flat",
                                     "higher_is_better": True, "ranking": ranking, "groups": groups, "failures": [],
                                     "timings": {}, "win_probability": {}, "best_still_improving": None,
                                     "not_separable_from_best": []})

    monkeypatch.setattr(loop, "run_evaluation", evaluate)
    args = ["auto", "--task", "Cartpole", "--proposer", "offline", "--candidates-per-iteration", "2",
            "--iterations", "1", "--train-iterations", "3", "--envs-per-candidate", "16"]
    for name, edit in (("same", None), ("changed", 32)):
        out, stop[0] = tmp_path / name, True
        assert main([*args, "--out", str(out)]) == 130
        config = out / "iter_00" / "eval" / "config.json"
        if edit:
            config.write_text(json.dumps({**json.loads(config.read_text()), "envs_per_candidate": edit}))
        stop[0] = False
        assert main(["auto", "--resume", str(out)]) == 0
        assert calls[-2] == (out / "iter_00" / "eval", not edit, not edit), name  # kept, or removed first
    assert calls[-1][0].parts[-2:] == ("final", "eval")


@pytest.mark.slow  # 27 s here: its files validated in the sandbox
def test_halving_search_uses_two_rungs_feeds_back_who_was_dropped_and_evaluates_flat(tmp_path, monkeypatch, capsys):
    """`auto --schedule halving`: each search evaluation runs two rungs; a dropped candidate is fed back with
    the iteration it stopped at and is never a finalist; the final evaluation is flat. (The evaluations are
    stood in for: their training is tested in test_schedule.py.)"""
    seen = []

    def evaluate(plan, console=None, resume=False, validator=None, restart=None, until=None):
        settings = plan.settings
        seen.append((settings.schedule, settings.rungs))
        names = sorted(p.stem for p in settings.functions.glob("*.py"))
        ranking = [{"name": name, "fitness_mean": 0.9 - 0.1 * i, "fitness_std": 0.0, "ci_low": 0.9 - 0.1 * i,
                    "ci_high": 0.9 - 0.1 * i, "seeds": 1, "shaped_return": 1.0, "episode_length": 10.0,
                    "eliminated_at": None if i == 0 or settings.schedule == "flat" else 15}
                   for i, name in enumerate(names)]
        groups = [{"candidate": name, "seed": 0, "task_fitness": r["fitness_mean"], "episode_length": 10.0,
                   "shaped_return": 1.0, "training_task_fitness": r["fitness_mean"], "diverged_at_iteration": None,
                   "solved_at_iteration": None, "params": {}} for name, r in zip(names, ranking)]
        return RunResults.from_json({"task": "Cartpole", "fitness": "upright", "fitness_doc": "", "schedule": "flat",
                                     "higher_is_better": True, "ranking": ranking, "groups": groups, "failures": [],
                                     "timings": {}, "win_probability": {}, "best_still_improving": None,
                                     "not_separable_from_best": []})

    monkeypatch.setattr(loop, "run_evaluation", evaluate)
    out = tmp_path / "auto"
    assert main(["auto", "--task", "Cartpole", "--proposer", "offline", "--candidates-per-iteration", "2",
                 "--iterations", "1", "--train-iterations", "30", "--schedule", "halving", "--final-top", "3",
                 "--out", str(out)]) == 0
    assert seen == [("halving", 2), ("flat", None)]
    table = json.loads((out / "iter_00" / "iteration.json").read_text())["table"]
    dropped = [row for row in table if row["status"] == "dropped by halving after iteration 15"]
    assert len(dropped) == len(table) - 1
    finalists = sorted(p.stem for p in (out / "final" / "candidates").glob("*.py"))
    assert finalists == sorted(row["name"] for row in table if row["status"] == "ok")
    # The console shows the summary rendered (no Markdown source), where best.py is, and each iteration's folder.
    printed = capsys.readouterr().out
    assert f"best candidate: {out / 'best.py'}" in printed and "iteration 1/1 (iter_00)" in printed
    assert "**" not in printed and "|---|" not in printed


@pytest.mark.slow
def test_auto_trains_its_evaluations_with_the_chosen_algorithm(tmp_path, capsys):
    """`auto --algo dqn` on a discrete task: every evaluation (search and final) trains with DQN and the given
    settings; a task the algorithm cannot train is refused before anything runs."""
    out = tmp_path / "dqn"
    assert main(["auto", "--task", "CartpoleDiscrete", "--algo", "dqn", "--candidates-per-iteration", "2",
                 "--iterations", "1", "--copies", "4", "--envs-per-candidate", "16", "--train-iterations", "3",
                 "--final-seeds", "1",
                 "--final-max-seeds", "1",
                 "--final-top", "1", "dqn.batch_size=16", "dqn.replay_buffer_size=256", "--out", str(out)]) == 0
    evaluations = sorted(out.glob("**/config.json"))
    assert len(evaluations) == 4  # the search's, its two halving rungs' and the final one
    for config in evaluations:
        recorded = json.loads(config.read_text())
        assert recorded["algo"] == "dqn" and recorded["dqn"]["batch_size"] == 16 and "ppo" not in recorded
        assert (config.parent / "dqn.yaml").exists()
    assert json.loads((out / "summary.json").read_text())["final_ranking"]
    assert main(["auto", "--task", "Cartpole", "--algo", "dqn", "--out", str(tmp_path / "refused")]) == 2
    assert "discrete actions" in capsys.readouterr().err and not (tmp_path / "refused").exists()


def test_the_final_names_the_task_default_and_says_by_how_much_the_best_beats_it(tmp_path, monkeypatch, capsys):
    """The final evaluation trains the best find, the best start and `task_default` together, in rounds of seeds;
    the summary says whether the best beats the task default, by how much and how surely. (The evaluations are stood
    in for, with a fitness per candidate and seed that is ±0.1 by the seed's parity.)"""
    from conftest import FakeEvaluations
    from envcoder.runs import evaluation

    def value(name, seed):
        mean = 0.4 if name == "task_default" else 0.1 if name.startswith("init_") else 0.85
        return mean + (0.1 if seed % 2 == 0 else -0.1)
    fake = FakeEvaluations(value)
    monkeypatch.setattr(evaluation, "evaluate_once", fake)  # each evaluation, and each round of the final one
    out = tmp_path / "auto"
    assert main(["auto", "--task", "Cartpole", "--initial", str(HERE / "candidates" / "auto" / "poor_weights.py"),
                 "--proposer", "offline", "--candidates-per-iteration", "2", "--iterations", "1", "--final-top", "1",
                 "--final-seeds", "4", "--out", str(out)]) == 0
    finals = [(names, seeds) for names, seeds in fake.calls if "task_default" in names]
    assert len(finals) == 1 and finals[0][1] == (0, 1, 2, 3)  # 4 seeds, separable at once: no round added
    summary = json.loads((out / "summary.json").read_text())
    names = [r["name"] for r in summary["final_ranking"]]
    assert names[1:] == ["task_default", "init_poor_weights"] and summary["best"]["name"] == names[0]
    # 0.85 against 0.40 over 4 seeds each (s = 0.1155): 0.45 ± t(0.975, 6) · 0.0816 = 0.45 ± 0.200, t = 5.51
    verdict = summary["task_default"]
    assert verdict["difference"] == pytest.approx(0.45) and verdict["beats"]
    assert verdict["ci"] == pytest.approx([0.2502, 0.6498], abs=1e-4)
    assert verdict["p_beats"] == pytest.approx(0.9992, abs=1e-4)
    text = f"{names[0]} beats the task default by 0.45 [95% CI 0.2502, 0.6498] (P(beats) = 1.00)."
    assert verdict["text"] == text and text in (out / "summary.md").read_text()
    assert summary["final_seeds"]["stopped"] == "separable"
    assert "beats the task default by 0.45" in " ".join(capsys.readouterr().out.split())
    readable = summary["readable"]  # a child of the offline search says what changed (flat already: as it reads)
    assert (out / "best.py").read_text().startswith("# offline: ") and readable["same_program"], readable
    how = "written flat (helpers inlined" if readable["inlined"] else "as it reads (flat already"
    assert f"`best_readable.py` is best.py {how}" in (out / "summary.md").read_text() and readable["change"]


def test_each_evaluation_s_line_says_when_every_policy_fails_early(tmp_path, monkeypatch, capsys):
    """Where no candidate's episodes last a quarter of Cartpole's 500 steps (each lasts 60 here), the line `auto`
    prints for each evaluation says so, and so does the summary of its final, with the longest-lived: its ranking
    compares policies that all fail."""
    from conftest import FakeEvaluations
    from envcoder.runs import evaluation

    monkeypatch.setattr(evaluation, "evaluate_once", FakeEvaluations(lambda name, seed: 0.1, episode_length=60.0))
    assert main(["auto", "--task", "Cartpole", "--initial", str(HERE / "candidates" / "auto" / "poor_weights.py"),
                 "--proposer", "offline", "--candidates-per-iteration", "2", "--iterations", "1", "--final-top", "1",
                 "--final-seeds", "2", "--out", str(tmp_path / "auto")]) == 0
    printed = capsys.readouterr().out
    lines = [line for line in printed.splitlines() if "every policy fails early" in line]
    assert len(lines) == 1 and "(the longest episodes: 60 of 500 steps)" in lines[0], lines
    summary = json.loads((tmp_path / "auto" / "summary.json").read_text())
    assert summary["episodes_end_early"]["episode_length"] == 60.0  # the final evaluation's
    said = "Every policy fails early: init_poor_weights's episodes last longest in the final evaluation, 60 of 500"
    assert said in " ".join(printed.split()) and said.replace("Every", "**Every").replace("early:", "early:**") in (
        tmp_path / "auto" / "summary.md").read_text()


@pytest.mark.slow
def test_auto_validates_the_files_it_trains_once_and_its_evaluation_checks_nothing_again(tmp_path, monkeypatch):
    """A start file with a sweep of a float and an int becomes one file per variant; `auto` validates those files
    (not the sweep) with its drafts, so every evaluation of the search finds each file's verdict remembered and no
    worker checks a file again. (The training is stood in for; each evaluation validates its files as a run does.)"""
    import zlib

    from conftest import FakeEvaluations
    from envcoder.candidates import pool
    from envcoder.candidates.prepare import sandboxed_candidates
    from envcoder.runs import evaluation
    from envcoder.tasks import get_task

    checked, evaluated = [], []
    check = pool.Worker.check
    monkeypatch.setattr(pool.Worker, "check", lambda self, name, *rest: checked.append(name) or check(self, name, *rest))
    fake = FakeEvaluations(lambda name, seed: 0.4 if name == "task_default" else zlib.crc32(name.encode()) % 90 / 100)

    def evaluate(plan, console=None, resume=False, validator=None, restart=None, until=None):
        before = len(checked)
        candidates, failures = sandboxed_candidates(plan.settings, get_task("Cartpole"), validator)
        evaluated.append((sorted(c.name for c in candidates), checked[before:], failures))
        return fake(plan, console, resume, validator, restart)
    monkeypatch.setattr(evaluation, "evaluate_once", evaluate)
    (tmp_path / "starts").mkdir()
    source = (HERE / "candidates" / "auto" / "poor_weights.py").read_text()
    fresh = f"# {time.time_ns()}: no verdict of an earlier run is stored for it\n"
    (tmp_path / "starts" / "swept.py").write_text(fresh + "PARAMS = {'STEP_COST': [0.8, 0.2], 'EVERY': [1, 2]}\n"
                                                  "EVERY = 1\n" + source.replace("STEP_COST - ", "STEP_COST * EVERY - "))
    out = tmp_path / "auto"
    assert main(["auto", "--task", "Cartpole", "--initial", str(tmp_path / "starts"), "--proposer", "offline",
                 "--candidates-per-iteration", "1", "--iterations", "1", "--final-top", "1",
                 "--out", str(out)]) == 0
    variants = [f"init_swept__STEP_COST-{w}__EVERY-{k}" for w in ("0.8", "0.2") for k in ("1.0", "2.0")]
    assert set(variants) <= set(checked)  # with the drafts, each as the file it is trained as
    assert "init_swept" not in checked  # not the sweep itself
    first, *later = evaluated
    assert first[0] == sorted(["it00_c00", *variants]) and not first[2]
    assert all(not newly for _, newly, _ in evaluated), evaluated  # nothing checked again by any evaluation
    assert later and any("task_default" in names for names, _, _ in later)


@pytest.mark.slow
def test_the_first_proposals_build_only_on_starting_files_that_validate(tmp_path, monkeypatch):
    """A start that fails its check (here a reward written for Isaac Gym that takes a name Cartpole's Isaac class
    lacks) is reported and is nobody's parent: the offline search's children all come from the start that runs.
    (The training is stood in for.)"""
    import zlib

    from conftest import FakeEvaluations
    from envcoder.runs import evaluation

    fake = FakeEvaluations(lambda name, seed: 0.4 if name == "task_default" else zlib.crc32(name.encode()) % 90 / 100)
    monkeypatch.setattr(evaluation, "evaluate_once", fake)
    (tmp_path / "starts").mkdir()
    (tmp_path / "starts" / "good.py").write_text((HERE / "candidates" / "auto" / "poor_weights.py").read_text())
    (tmp_path / "starts" / "bad.py").write_text(
        "import torch\n\n\ndef compute_reward(pole_angle: torch.Tensor, dt: float):\n"
        "    upright = torch.cos(pole_angle) * 2.0\n    return upright, {'upright': upright}\n")
    out = tmp_path / "auto"
    assert main(["auto", "--task", "Cartpole", "--initial", str(tmp_path / "starts"), "--proposer", "offline",
                 "--candidates-per-iteration", "3", "--iterations", "1", "--final-top", "1",
                 "--out", str(out)]) == 0
    drafts = json.loads((out / "iter_00" / "drafts.json").read_text())
    bad = next(d for d in drafts if d["name"] == "init_bad")
    assert not bad["ok"] and "takes 'pole_angle'" in bad["error"]
    children = [d for d in drafts if d["slot"] is not None]
    assert len(children) >= 3 and all(d["ok"] for d in children), [d["error"] for d in children]
    assert all(d["source"].startswith("# offline: from init_good") for d in children)


def test_halving_gives_each_kept_set_of_constants_neighbouring_groups_of_its_file():
    copies = [f"f-{k}" for k in range(8)]
    assert halving_slots(copies, list("abcdefgh"), 1) == list("aabbccdd")
    assert halving_slots(copies, list("abcd"), 2) == list("aaaabbbb")
    assert halving_slots(copies, list("ab"), 3) == halving_slots(copies, list("ab"), 9) == list("aaaaaaaa")
    assert halving_slots(copies[:5], list("abcde"), 1) == list("aaabb")  # 5 groups, 2 kept: the best has 3
    assert halving_slots(["g-0"], ["x"], 1) == ["x"]  # a file without constants: one group, its one set


def test_the_halving_trains_each_file_again_with_the_constants_it_came_with():
    """A file whose copy 0 an exploit step took over: its constants as proposed take the second place of the first
    rung (two of its four groups, new seeds), named `<file>-proposed`, and win where they train best from scratch; a
    copy 0 never taken over already has them (as the run wrote them), a file that came with none is left alone."""
    from types import SimpleNamespace

    from envcoder.search.population import Halving, as_proposed

    rows = [{"name": f"f-{k}", "fitness": fit, "status": "ok", "source": f"f with w={w}"}
            for k, (fit, w) in enumerate([(0.5, 0.01), (0.9, 0.02), (0.7, 0.03), (0.6, 0.04)])]
    rows += [{"name": "g-0", "fitness": 0.8, "status": "ok", "source": "g as run"},
             {"name": "h-0", "fitness": None, "status": "diverged", "source": "h as run"}]
    lineage = [{"group": "f-0#3", "from": "f-1#4"}]  # f's copy 0 (seed 3) took over f-1's state, constants perturbed
    files = {"f": "f with w=2.5", "g": "g as proposed", "h": "h as proposed", "k": "k as proposed"}
    proposed = as_proposed(files, rows, lineage)
    assert proposed == {"f": "f with w=2.5", "g": "g as run"}  # h's copy 0 diverged with them; k has no row

    def ranked(table):  # best first by fitness, higher is better; no fitness: not ranked
        return sorted((r for r in table if r["fitness"] is not None), key=lambda r: -r["fitness"])
    halving = Halving(rows, ranked, True, "final", proposed)
    slots = halving.slots(1)
    assert [slots[f"f-{k}r1"] for k in range(4)] == ["f with w=0.02", "f with w=0.02", "f with w=2.5", "f with w=2.5"]
    assert (slots["g-0r1"], slots["h-0r1"]) == ("g as run", "h as run")
    fitness = {"f-0r1": 0.6, "f-1r1": 0.7, "f-2r1": 1.0, "f-3r1": 0.9, "g-0r1": 0.5, "h-0r1": 0.1}
    halving.record(1, slots, [SimpleNamespace(name=n, fitness_mean=v, shaped_return=0.0, episode_length=1.0,
                                              auc=math.nan) for n, v in fitness.items()])
    slots = halving.slots(2)
    assert [slots[f"f-{k}r2"] for k in range(4)] == ["f with w=2.5"] * 4  # the better of the two from scratch
    table = {row["name"]: row for row in halving.rows(2, iteration=0)}
    assert table["f-proposed"]["source"] == "f with w=2.5" and table["f-proposed"]["rung"] == 2
    assert table["f-proposed"]["seeds"] == 2 and table["f-proposed"]["fitness"] == pytest.approx(0.95)
    dropped = table["f-1"]
    assert (dropped["status"], dropped["rung"], dropped["fitness"]) == ("dropped", 1, pytest.approx(0.65))
    # Ranked first by the population run, the file's own constants keep their place (the second set goes on too).
    first = Halving(rows, ranked, True, "final", {"f": "f with w=0.02"}).slots(1)
    assert [first[f"f-{k}r1"] for k in range(4)] == ["f with w=0.02"] * 2 + ["f with w=0.03"] * 2


@pytest.mark.parametrize("proposer", ["population", "random"])
def test_only_a_population_search_trains_a_file_as_proposed_in_its_first_rung(proposer, tmp_path, monkeypatch):
    """Each copy 0 (a file with the constants it came with) ranks last in the population run: a population search's
    first rung trains it in second place for every proposed file (not the starting one), a random search's (no
    exploit step, each copy judged by a run from scratch) keeps its two best copies. (The training is stood in for.)"""
    from conftest import FakeEvaluations
    from envcoder.runs import evaluation

    def value(name, seed):  # copies 1, 2, 3: 0.6, 0.7, 0.8; copy 0: 0.1
        copy = name.rsplit("-", 1)[-1].split("r")[0]
        return 0.4 if name == "task_default" else 0.1 if copy == "0" else 0.5 + 0.1 * int(copy) if copy.isdigit() \
            else 0.5
    monkeypatch.setattr(evaluation, "evaluate_once", FakeEvaluations(value))
    out = tmp_path / proposer
    assert main(["auto", "--task", "Cartpole", "--initial", str(HERE / "candidates" / "auto" / "poor_weights.py"),
                 "--proposer", proposer, "--copies", "4", "--candidates-per-iteration", "1", "--iterations", "2",
                 "--final-top", "1", "--out", str(out)]) == 0
    for iteration in (out / "iter_00", out / "iter_01"):
        files = {p.stem[:-2] for p in (iteration / "candidates").glob("*-0.py")}
        assert len(files) == (1 if proposer == "random" else 2 if iteration.name == "iter_00" else 3)
        for file in files:
            rung_1 = [(iteration / "rung_1" / "candidates" / f"{file}-{k}r1.py").read_text() for k in range(4)]
            copies = [(iteration / "candidates" / f"{file}-{k}.py").read_text() for k in range(4)]
            proposed = proposer == "population" and not file.startswith("init_")
            assert rung_1 == [copies[3]] * 2 + [copies[0] if proposed else copies[2]] * 2, file


def test_a_seeds_search_trains_every_copy_as_proposed_and_ranks_each_file_by_its_mean(tmp_path, monkeypatch):
    """`--proposer seeds`: every copy of a file is the file itself, the population run never exploits, and the
    halving rungs train each file's one set of constants in all its groups; its row's fitness is the mean over
    those 8 groups (copy k of rung r scores 0.1·k + 0.01·r, the child 0.5 more: 0.15 + 0.015 + 0.5). (The
    training is stood in for.)"""
    from conftest import FakeEvaluations
    from envcoder.runs import evaluation

    def value(name, seed):  # the final's files and task_default: 0.4
        copy = re.fullmatch(r".*-(\d+)(?:r(\d+))?", name)
        return 0.4 if copy is None else (0.1 * int(copy[1]) + 0.01 * int(copy[2] or 0)
                                         + (0.0 if name.startswith("init_") else 0.5))
    monkeypatch.setattr(evaluation, "evaluate_once", FakeEvaluations(value))
    out = tmp_path / "seeds"
    assert main(["auto", "--task", "Cartpole", "--initial", str(HERE / "candidates" / "auto" / "poor_weights.py"),
                 "--proposer", "seeds", "--copies", "4", "--candidates-per-iteration", "1", "--iterations", "1",
                 "--final-top", "1", "--out", str(out)]) == 0
    iteration = out / "iter_00"
    files = {p.stem[:-2] for p in (iteration / "candidates").glob("*-0.py")}
    assert len(files) == 2
    for file in files:
        copies = [(iteration / "candidates" / f"{file}-{k}.py").read_text() for k in range(4)]
        assert copies == [copies[0]] * 4, file
        for rung in (1, 2):
            assert [(iteration / f"rung_{rung}" / "candidates" / f"{file}-{k}r{rung}.py").read_text()
                    for k in range(4)] == copies, (file, rung)
    assert json.loads((iteration / "eval" / "config.json").read_text())["population"]["interval"] == 0
    ranked = {row["name"]: row for row in json.loads((iteration / "iteration.json").read_text())["table"]
              if row["status"] == "ok"}
    child = next(name for name in ranked if not name.startswith("init_"))
    assert ranked[child]["seeds"] == 8 and ranked[child]["fitness"] == pytest.approx(0.665)
    summary = (out / "summary.md").read_text()
    assert "Seeds search: 8 copies trained, each with its file's constants as written; no exploit step." in summary
    assert "each file trained again from scratch with new seeds in all its groups" in summary


def test_a_halving_set_is_described_to_the_model_by_its_training_from_scratch(tmp_path):
    """The reflection prompt's training statistics of a row: a halving set's are its groups' in its last rung (the
    groups whose file is its source, averaged), not the population run's copy of the same name; an evaluated row's
    are its evaluation's."""
    from envcoder.search.prompts import row_statistics

    def metrics(where, rows):
        (where / "eval").mkdir(parents=True)
        lines = ["candidate,seed,iteration,task_fitness,reward/alive"] + [",".join(map(str, r)) for r in rows]
        (where / "eval" / "metrics.csv").write_text("\n".join(lines) + "\n")
    metrics(tmp_path / "iter_00", [("f-1", 0, 0, 9.0, 9.0), ("f-1", 0, 1, 9.0, 9.0)])
    rung = tmp_path / "iter_00" / "rung_2"
    metrics(rung, [("f-0r2", 5, 0, 1.0, 0.5), ("f-0r2", 5, 1, 2.0, 0.5), ("f-1r2", 6, 0, 3.0, 1.5),
                   ("f-1r2", 6, 1, 4.0, 1.5), ("g-0r2", 7, 0, 7.0, 7.0), ("g-0r2", 7, 1, 7.0, 7.0)])
    (rung / "candidates").mkdir()
    for name, source in (("f-0r2", "f as proposed"), ("f-1r2", "f as proposed"), ("g-0r2", "g")):
        (rung / "candidates" / f"{name}.py").write_text(source)
    halving_set = {"name": "f-1", "iteration": 0, "rung": 2, "source": "f as proposed"}
    assert row_statistics(tmp_path, halving_set) == {"reward/alive": [1.0, 1.0], "task_fitness": [2.0, 3.0]}
    evaluated = {"name": "f-1", "iteration": 0, "source": "f with w=0.02"}
    assert row_statistics(tmp_path, evaluated) == {"reward/alive": [9.0, 9.0], "task_fitness": [9.0, 9.0]}
    assert row_statistics(tmp_path, {**halving_set, "source": "not trained"}) is None
    assert row_statistics(tmp_path, None) is None


@pytest.mark.slow
def test_a_start_with_no_constant_to_tune_joins_the_final_once(tmp_path):
    """The sparse Cartpole start (its fitness as the reward: its one float a threshold, no constant) trains as one
    copy, which is the file itself; the final's finds are the search's children, not that copy a second time (it had
    taken a finalist's place from the sparse Anymal start)."""
    start = HERE.parent / "benchmarks" / "search_starts" / "sparse" / "cartpole.py"
    out = tmp_path / "sparse"
    assert main(["auto", "--task", "Cartpole", "--initial", str(start), "--candidates-per-iteration", "2",
                 "--iterations", "1", "--copies", "2", "--envs-per-candidate", "16", "--train-iterations", "6",
                 "--final-seeds", "1", "--final-max-seeds", "1", "--final-top", "2", "--out", str(out)]) == 0
    record = json.loads((out / "iter_00" / "iteration.json").read_text())
    assert any(row["name"] == "init_cartpole-0" and row["status"] == "ok" for row in record["table"])  # ranked
    final = [r["name"] for r in json.loads((out / "summary.json").read_text())["final_ranking"]]
    assert len(final) == 4 and {"init_cartpole", "task_default"} < set(final), final  # and two children:
    assert sorted(n.split("-")[0] for n in final if n.startswith("it00_")) == ["it00_c00", "it00_c01"], final


@pytest.mark.slow
def test_with_an_llm_the_population_tunes_the_constants_of_its_candidates(tmp_path, monkeypatch):
    """`--llm` with `--proposer population`: the model writes two candidates, each trains as two copies whose
    constants the population tunes; the table has a row per copy with the constants it trained with last."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    with FakeLLMServer([("text", fenced(GOOD_A)), ("text", fenced(GOOD_B))]) as server:
        summary = AutoRun(settings(tmp_path / "run", server.url, proposer="population", copies=2, iterations=1,
                                   candidates_per_iteration=2)).run()
    record = json.loads((tmp_path / "run" / "iter_00" / "iteration.json").read_text())
    copies = [row for row in record["table"] if not row.get("rung")]
    assert sorted(row["name"] for row in copies) == ["it00_c00-0", "it00_c00-1", "it00_c01-0", "it00_c01-1"]
    sources = {row["name"]: row["source"] for row in copies}
    assert sources["it00_c00-0"].split("exp(")[0] == GOOD_A.split("exp(")[0]  # the model's code, its numbers tuned
    assert sources["it00_c00-1"] != GOOD_A and "def compute_reward(state):" in sources["it00_c00-1"]
    assert record["population"]["groups"] == 4 and summary["proposer"] == "gpt-4o (population)"
    assert summary["proposer_calls"] == 2
    # One halving rung (2 copies halved to one): each file's better set of constants, 2 new seeds from scratch.
    kept = [row for row in record["table"] if row.get("rung")]
    assert sorted((row["name"].split("-")[0], row["seeds"], row["status"]) for row in kept) == [
        ("it00_c00", 2, "ok"), ("it00_c01", 2, "ok")]
    assert {row["source"] for row in kept} <= {row["source"] for row in copies}


def test_a_search_without_a_model_refuses_an_llm(tmp_path, capsys):
    assert main(["auto", "--task", "Cartpole", "--llm", "gpt-4o", "--proposer", "random",
                 "--out", str(tmp_path / "r")]) == 2
    assert "--proposer random is a search without a model: leave out --llm" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_the_search_benchmarks_fresh_seed_check_by_hand():
    """`benchmarks/search.py verify`: the gap closed from fresh seeds, its bootstrap interval and the mean over
    searches, against numbers worked by hand (tracking error: lower is better)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("search_benchmark",
                                                  BENCHMARKS / "search.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # Start 1.0, default 0.2: a find at 0.6 closes half the gap; with no spread over seeds the interval is a point.
    half = bench.gap_statistics([0.6, 0.6], [1.0, 1.0], [0.2, 0.2], higher_is_better=False)
    assert (half["gap_closed"], half["ci_low"], half["ci_high"]) == pytest.approx((0.5, 0.5, 0.5))
    # A find at 0.2 and 0.6: mean 0.4, 75%; its resampled means are 0.2, 0.4 or 0.6, so the interval is 50-100%.
    spread = bench.gap_statistics([0.2, 0.6], [1.0, 1.0], [0.2, 0.2], higher_is_better=False)
    assert (spread["gap_closed"], spread["ci_low"], spread["ci_high"]) == pytest.approx((0.75, 0.5, 1.0))
    assert bench.gap_statistics([0.9], [0.0], [1.0], higher_is_better=True)["gap_closed"] == pytest.approx(0.9)
    # Two searches' finds, 50% and 100%: mean 75%; resampling the searches gives 50, 75 or 100%.
    over = bench.mean_gap_statistics({"a": [0.6], "b": [0.2]}, [1.0], [0.2], higher_is_better=False)
    assert (over["mean_gap_closed"], over["ci_low"], over["ci_high"]) == pytest.approx((0.75, 0.5, 1.0))
    assert over["at_least_80_percent"] == 1 and over["searches"] == 2
    assert "no gap" in bench.mean_gap_statistics({"a": [0.6]}, [0.2], [1.0], higher_is_better=False)["error"]
    # A start and a default that the seeds do not separate leave the gap undefined; the find's lead is still given.
    close = bench.gap_statistics([0.6, 0.7], [0.30, 0.50], [0.35, 0.45], higher_is_better=True)
    assert not close["gap_defined"] and close["find_beats_default_by"] == pytest.approx(0.25)
    assert close["find_beats_default_ci"] == pytest.approx([0.15, 0.35]) and close["p_find_beats_default"] == 1.0
    assert half["gap_defined"] and "no gap" in bench.mean_gap_statistics(
        {"a": [0.6]}, [0.30, 0.50], [0.35, 0.45], higher_is_better=True)["error"]
    # Parts pool their seeds; a diverged seed is left out; one seed in two parts is an error.
    part = lambda seed, value: {"groups": [{"candidate": "x", "seed": seed, "task_fitness": value}]}  # noqa: E731
    assert bench.fresh_seeds([part(0, 1.0), part(1, None), part(2, 3.0)]) == {"x": [1.0, 3.0]}
    with pytest.raises(ValueError, match="seed 0"):
        bench.fresh_seeds([part(0, 1.0), part(0, 2.0)])
    # The median over searches: 50% and 100% and 90%, median 90%; its interval resamples the searches.
    three = bench.mean_gap_statistics({"a": [0.6], "b": [0.2], "c": [0.28]}, [1.0], [0.2], higher_is_better=False)
    assert three["median_gap_closed"] == pytest.approx(0.9) and three["median_ci"] == pytest.approx([0.5, 1.0])
    assert three["per_search"] == pytest.approx({"a": 0.5, "b": 1.0, "c": 0.9})


def test_a_search_from_other_starts_gives_its_hns_against_the_sparse_start_retrained_beside_it(tmp_path, capsys):
    """`search.py verify --with-sparse` (and `hns --with-sparse`): a search from a Eureka response closes the gap
    to the default from that response, and its HNS is measured from the sparse start trained beside it (worked by
    hand: response 2.0, default 4.0, sparse 1.0, find 3.0: gap closed 0.5, HNS 2/3)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("search_benchmark", BENCHMARKS / "search.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    run = tmp_path / "searches" / "s0"
    run.mkdir(parents=True)
    (run / "best.py").write_text("def compute_reward(state):\n    return state['x']\n")
    (run / "search.json").write_text(json.dumps({"task": "Ant", "best_start": {"name": "init_response9"},
                                                 "best_find": {"name": "child"}, "gap_closed": 0.5}))
    out = tmp_path / "verify"
    (out / "part_0").mkdir(parents=True)
    groups = [{"candidate": name, "seed": seed, "task_fitness": value} for name, value in
              (("find_searches_s0", 3.0), ("start_response9", 2.0), ("task_default", 4.0), ("sparse", 1.0))
              for seed in (1000, 1001)]
    (out / "part_0" / "results.json").write_text(json.dumps({"higher_is_better": True, "groups": groups}))
    assert bench.verify(["--runs", str(run), "--starts", str(tmp_path), "--out", str(out), "--report-only"]) == 0
    entry = json.loads((out / "verify.json").read_text())["searches"]["find_searches_s0"]
    assert entry["gap_closed"] == pytest.approx(0.5) and entry["hns"]["gap_closed"] == pytest.approx(2 / 3)
    assert entry["hns"]["gap_defined"] and entry["hns"]["start"] == pytest.approx(1.0)
    assert "HNS against the sparse start retrained beside them (1.000): find_searches_s0 0.67 [0.67, 0.67]" in \
        " ".join(capsys.readouterr().out.split())


def test_the_fresh_seed_check_pools_the_references_of_other_verifies(tmp_path, capsys):
    """`search.py verify --pool`: another verify's sparse start and default runs join this one's, so HNS divides by
    all of them (worked by hand: start 1.5, default 4.0 pooled, the find 3.0 closes 60%); with `--join` its searches
    join the row over searches too (its find at 4.0 closes 100%); a verify retrained with other arguments is refused,
    not pooled."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("search_benchmark",
                                                  BENCHMARKS / "search.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    run = tmp_path / "searches" / "s0"
    run.mkdir(parents=True)
    (run / "best.py").write_text("def compute_reward(state):\n    return state['x']\n")
    (run / "search.json").write_text(json.dumps({"task": "Ant", "best_start": {"name": "init_sparse"},
                                                 "best_find": {"name": "child"}, "gap_closed": 0.5}))
    out = tmp_path / "verify"
    (out / "part_0").mkdir(parents=True)
    groups = [{"candidate": name, "seed": seed, "task_fitness": value} for name, value in
              (("find_searches_s0", 3.0), ("start_sparse", 1.0), ("task_default", 3.0)) for seed in (1000, 1001)]
    (out / "part_0" / "results.json").write_text(json.dumps({"higher_is_better": True, "groups": groups}))
    other = tmp_path / "other"
    other.mkdir()
    (other / "verify.json").write_text(json.dumps({"task": "Ant", "arguments": [], "per_seed": {
        "start_sparse": [2.0, 2.0], "task_default": [5.0, 5.0], "find_elsewhere": [4.5, 3.5]}, "searches": {
        "find_elsewhere": {"run": "elsewhere/s1", "gap_closed_in_its_final": 0.9, "start_name": "start_sparse",
                           "best_find_in_its_final": "it01_c02", "start": 2.0, "gap_closed": 0.7}}}))
    common = ["--runs", str(run), "--starts", str(tmp_path), "--out", str(out), "--report-only"]
    moved = tmp_path / "moved" / "s0"
    shutil.copytree(run, moved)  # verified as searches/s0: under another path it is another candidate
    assert bench.verify(["--runs", str(moved), *common[2:]]) == 0
    assert "find_moved_s0: not among the candidates" in capsys.readouterr().err
    assert bench.verify(common) == 0
    alone = json.loads((out / "verify.json").read_text())["searches"]["find_searches_s0"]
    assert alone["gap_closed"] == pytest.approx(1.0) and alone["find_beats_default_by"] == pytest.approx(0.0)
    assert bench.verify([*common, "--pool", str(other)]) == 0
    report = json.loads((out / "verify.json").read_text())
    pooled = report["searches"]["find_searches_s0"]
    assert pooled["gap_closed"] == pytest.approx(0.6) and pooled["find_beats_default_by"] == pytest.approx(-1.0)
    assert pooled["seeds"] == {"find": 2, "start": 4, "default": 4} and report["pooled_from"] == [str(other)]
    assert report["per_seed"]["start_sparse"] == [1.0, 1.0]  # this verify's own runs, as trained
    printed = " ".join(capsys.readouterr().out.split())
    assert "start_sparse 4 runs, task_default 4 runs" in printed and "per search 0.60; median 0.60" in printed
    assert bench.verify([*common, "--join", str(other), "--pool", str(other)]) == 0  # its runs count once
    report = json.loads((out / "verify.json").read_text())
    assert report["searches"]["find_searches_s0"]["gap_closed"] == pytest.approx(0.6)
    printed = " ".join(capsys.readouterr().out.split())
    theirs = report["searches"]["other/find_elsewhere"]
    assert theirs["gap_closed"] == pytest.approx(1.0) and theirs["verify"] == str(other)  # not their own 0.7
    assert "over 2 searches from start_sparse: per search 0.60, 1.00; median 0.80" in printed
    assert "other/find_elsewhere" not in report["per_seed"]  # a verify pooling this one does not count it twice
    # A second verify of the same search on other seeds (the same file under the same name): one search, its runs
    # pooled (4.5, 3.5, 2.0, 2.0: mean 3.0; start 1.0 twice and 1.5 four times, mean 8/6; default 3.0 twice and 4.0
    # four times, 22/6: it closes 10/14 of the gap, not two searches at 16/14 and 4/14).
    again = tmp_path / "again"
    for folder, runs in ((other, [4.5, 3.5]), (again, [2.0, 2.0])):
        (folder / "functions").mkdir(parents=True, exist_ok=True)
        (folder / "functions" / "find_elsewhere.py").write_text("def compute_reward(state):\n    return 1.0\n")
        record = json.loads((other / "verify.json").read_text())
        record["per_seed"] |= {"find_elsewhere": runs, "start_sparse": [1.5, 1.5], "task_default": [4.0, 4.0]}
        (folder / "verify.json").write_text(json.dumps(record))
    assert bench.verify([*common, "--join", str(other), str(again)]) == 0
    report = json.loads((out / "verify.json").read_text())
    assert set(report["searches"]) == {"find_searches_s0", "other/find_elsewhere"}
    theirs = report["searches"]["other/find_elsewhere"]
    assert theirs["seeds"]["find"] == 4 and theirs["gap_closed"] == pytest.approx(10 / 14)
    assert theirs["pooled_with"] == [str(again)]
    assert "over 2 searches from start_sparse" in " ".join(capsys.readouterr().out.split())
    (other / "verify.json").write_text(json.dumps({"task": "Ant", "arguments": ["--iterations", "300"],
                                                   "per_seed": {"start_sparse": [2.0], "task_default": [5.0]}}))
    assert bench.verify([*common, "--pool", str(other)]) == 2
    assert "pool verifies of one setting" in capsys.readouterr().err


def test_the_fresh_seed_check_does_not_count_a_start_its_search_kept_as_a_find(tmp_path, capsys):
    """A search whose final ranked its start first writes the start as `best.py`: `verify` says so, and where the
    start itself beats the task's default (the Humanoid's sparse reward at 1,024 envs × 300), that search is not
    counted among the finds that beat the default. Known by search.json's `best_is_start`, or, for a search from
    before it, by `best.py` against the start that the verify trained."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("search_benchmark",
                                                  BENCHMARKS / "search.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    sparse = "def compute_reward(state):\n    return state['x']\n"
    out = tmp_path / "verify"
    (out / "functions").mkdir(parents=True)
    (out / "functions" / "start_sparse.py").write_text(sparse)
    runs = []
    for name, best, said in (("kept", sparse, {"best_is_start": True}), ("older", sparse, {}),
                             ("found", sparse + "# a child\n", {"best_is_start": False})):
        run = tmp_path / "searches" / name
        run.mkdir(parents=True)
        (run / "best.py").write_text(best)
        (run / "search.json").write_text(json.dumps({"task": "Humanoid", "best_start": {"name": "init_sparse"},
                                                     "best_find": {"name": "child"}, "gap_closed": 0.0, **said}))
        runs.append(str(run))
    (out / "part_0").mkdir()
    groups = [{"candidate": name, "seed": seed, "task_fitness": value + 0.1 * seed} for name, value in (
        ("find_searches_kept", 2.0), ("find_searches_older", 2.0), ("find_searches_found", 2.0),
        ("start_sparse", 2.0), ("task_default", 1.0)) for seed in (0, 1)]
    (out / "part_0" / "results.json").write_text(json.dumps({"higher_is_better": True, "groups": groups}))
    assert bench.verify(["--runs", *runs, "--starts", str(tmp_path), "--out", str(out), "--report-only"]) == 0
    report = json.loads((out / "verify.json").read_text())
    assert [report["searches"][f"find_searches_{n}"]["find_is_start"] for n in ("kept", "older", "found")] == [
        True, True, False]
    assert all(e["p_find_beats_default"] == 1.0 for e in report["searches"].values())
    counts = report["over_searches"]["start_sparse"]
    assert (counts["beat_default_at_95"], counts["start_kept_beats_default_at_95"]) == (1, 2)
    printed = " ".join(capsys.readouterr().out.split())
    assert "find_searches_kept (best.py is the start: the search kept it)" in printed
    assert "1 finds beat the default at P ≥ 0.95 (and 2 whose best.py is the start, which beats it)" in printed


def _stand_in_evaluation(values: dict[str, float], higher_is_better: bool, trained: list):
    """A stand-in for verify's `envcoder eval --functions F --task-default --seeds N --seed S --out O` processes: each
    candidate's fitness is `values[name]` plus its seed's parity as a tenth; `trained` gets each one's (folder of
    functions, candidate names)."""
    class Evaluation:
        def __init__(self, command, **_):
            option = {k: v for k, v in zip(command, command[1:]) if k.startswith("--")}
            functions = Path(option["--functions"])
            names = sorted(f.stem for f in functions.glob("*.py")) + ["task_default"]
            trained.append((functions, names))
            seeds = range(int(option["--seed"]), int(option["--seed"]) + int(option["--seeds"]))
            groups = [{"candidate": n, "seed": s, "task_fitness": values[n] + 0.1 * (s % 2)} for n in names
                      for s in seeds]
            Path(option["--out"]).mkdir(parents=True)
            (Path(option["--out"]) / "results.json").write_text(json.dumps({"higher_is_better": higher_is_better,
                                                                           "groups": groups}))

        def wait(self):
            return 0

    return Evaluation


def test_the_fresh_seed_check_does_not_train_a_kept_start_again(tmp_path, monkeypatch, capsys):
    """A find that is its search's start is not retrained: the verify trains the start, the other finds and the task
    default only, and the kept start's runs are the start's (HNS 0), here and in a verify that joins this one. (The
    evaluations are stood in for: each candidate's fitness is fixed, its seed added as a tenth.)"""
    import importlib.util

    spec = importlib.util.spec_from_file_location("search_benchmark",
                                                  BENCHMARKS / "search.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    values = {"start_sparse": 1.0, "task_default": 3.0, "find_searches_found": 4.0}
    trained = []
    monkeypatch.setattr(bench.subprocess, "Popen", _stand_in_evaluation(values, True, trained))
    sparse = "def compute_reward(state):\n    return state['x']\n"
    (tmp_path / "sparse.py").write_text(sparse)
    runs = []
    for name, best in (("kept", sparse), ("found", sparse + "# a child\n")):
        run = tmp_path / "searches" / name
        run.mkdir(parents=True)
        (run / "best.py").write_text(best)
        (run / "search.json").write_text(json.dumps({"task": "Ant", "best_start": {"name": "init_sparse"},
                                                     "best_find": {"name": "child"}, "gap_closed": 0.0,
                                                     "best_is_start": best == sparse}))
        runs.append(str(run))
    first, second = tmp_path / "verify", tmp_path / "verify_2"
    assert bench.verify(["--runs", *runs, "--starts", str(tmp_path), "--out", str(first), "--seeds", "2"]) == 0
    assert [names for _, names in trained] == [["find_searches_found", "start_sparse", "task_default"]]
    report = json.loads((first / "verify.json").read_text())
    kept = report["searches"]["find_searches_kept"]
    assert kept["runs_are_the_starts"] and kept["gap_closed"] == pytest.approx(0.0)
    assert report["searches"]["find_searches_found"]["gap_closed"] == pytest.approx(1.5)
    assert "find_searches_kept" not in report["per_seed"] and "not among the candidates" not in capsys.readouterr().err
    assert bench.verify(["--runs", runs[1], "--starts", str(tmp_path), "--out", str(second), "--seeds", "2",
                         "--seed", "2000", "--join", str(first)]) == 0
    joined = json.loads((second / "verify.json").read_text())["searches"]["verify/find_searches_kept"]
    assert joined["find_is_start"] and joined["gap_closed"] == pytest.approx(0.0)
    assert joined["seeds"]["find"] == 4  # the pooled start's runs: this verify's and the joined one's


def test_a_second_verify_of_the_same_searches_pools_their_runs(tmp_path, monkeypatch, capsys):
    """`verify --pool` (or `--join`) of a verify that retrained the same find, the same file under the same name, on
    other seeds: the find's runs are pooled with this verify's, not counted as a second search. Worked by hand: the
    first verify's find runs 4.0 and 4.1, the second's 2.0 and 2.1, start 1.0/1.1 and default 3.0/3.1 in both; alone
    the second closes 50% of the gap, pooled 100%. A find whose file changed since is not pooled. (The evaluations
    are stood in for.)"""
    import importlib.util

    spec = importlib.util.spec_from_file_location("search_benchmark",
                                                  BENCHMARKS / "search.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    values = {"start_sparse": 1.0, "task_default": 3.0, "find_searches_found": 4.0}
    monkeypatch.setattr(bench.subprocess, "Popen", _stand_in_evaluation(values, True, []))
    sparse = "def compute_reward(state):\n    return state['x']\n"
    (tmp_path / "sparse.py").write_text(sparse)
    run = tmp_path / "searches" / "found"
    run.mkdir(parents=True)
    (run / "best.py").write_text(sparse + "# a child\n")
    (run / "search.json").write_text(json.dumps({"task": "Ant", "best_start": {"name": "init_sparse"},
                                                 "best_find": {"name": "child"}, "gap_closed": 1.0}))
    common = ["--runs", str(run), "--starts", str(tmp_path), "--seeds", "2"]
    first, second = tmp_path / "verify", tmp_path / "verify_2"
    assert bench.verify([*common, "--out", str(first)]) == 0
    values["find_searches_found"] = 2.0
    assert bench.verify([*common, "--out", str(second), "--seed", "1016"]) == 0
    alone = json.loads((second / "verify.json").read_text())["searches"]["find_searches_found"]
    assert alone["gap_closed"] == pytest.approx(0.5) and alone["seeds"]["find"] == 2
    for option in ("--pool", "--join"):
        capsys.readouterr()
        assert bench.verify([*common, "--out", str(second), "--report-only", option, str(first)]) == 0
        report = json.loads((second / "verify.json").read_text())
        pooled = report["searches"]["find_searches_found"]
        assert pooled["gap_closed"] == pytest.approx(1.0) and pooled["seeds"] == {"find": 4, "start": 4, "default": 4}
        assert list(report["searches"]) == ["find_searches_found"] and report["finds_pooled"] == ["find_searches_found"]
        assert report["per_seed"]["find_searches_found"] == [2.0, 2.1]  # this verify's own runs, as trained
        printed = " ".join(capsys.readouterr().out.split())
        assert "their runs pooled: find_searches_found 4 runs" in printed and "over 1 searches" in printed
    (run / "best.py").write_text(sparse + "# another child, in the same folder\n")
    assert bench.verify([*common, "--out", str(tmp_path / "verify_3"), "--seed", "2000", "--pool", str(first)]) == 0
    other = json.loads((tmp_path / "verify_3" / "verify.json").read_text())
    assert other["searches"]["find_searches_found"]["seeds"]["find"] == 2 and other["finds_pooled"] == []


@pytest.mark.slow  # 2-3 min here: two searches and their verify on the CPU
def test_one_row_of_the_hns_table_in_one_command(tmp_path, capsys):
    """`search.py hns`: searches from the task's sparse start, one per seed, then their finds retrained on fresh
    seeds beside the sparse start and the default, and the row of HNS; run again, the searches that ended are kept
    and the verify is reported again, not retrained; a verify of other searches is not overwritten."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("search_benchmark",
                                                  BENCHMARKS / "search.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "hns"
    command = ["--task", "Cartpole", "--search-seeds", "0", "1", "--out", str(out), "--verify-seeds", "2",
               "--search-args", "--candidates-per-iteration 1 --iterations 1 --copies 2 --envs-per-candidate 8 "
               "--train-iterations 2 --final-envs 8 --final-seeds 2 --final-max-seeds 2 --final-top 1 "
               "--halving-rungs 0", "--verify-args", "--envs-per-candidate 8 --iterations 2"]
    assert bench.hns(command) == 0
    searches = [json.loads((out / f"search_{s}" / "search.json").read_text()) for s in (0, 1)]
    assert [s["arguments"][:2] for s in searches] == [["--seed", "0"], ["--seed", "1"]]
    report = json.loads((out / "verify" / "verify.json").read_text())
    assert sorted(report["searches"]) == ["find_hns_search_0", "find_hns_search_1"]
    assert {len(v) for v in report["per_seed"].values()} == {2}  # two fresh seeds for each candidate
    assert report["arguments"] == ["--envs-per-candidate", "8", "--iterations", "2"]
    row = report["over_searches"]["start_cartpole"]
    printed = " ".join(capsys.readouterr().out.split())
    if "error" in row:  # (runs this small may not separate the sparse start from the default)
        assert f"over the searches from start_cartpole: {row['error']}" in printed
    else:
        first = row["per_search"]["find_hns_search_0"]
        assert f"over 2 searches from start_cartpole: per search {first:.2f}" in printed
    stamps = [(out / f"search_{s}" / "search.json").stat().st_mtime_ns for s in (0, 1)]
    assert bench.hns(command) == 0  # again: nothing retrained
    assert [(out / f"search_{s}" / "search.json").stat().st_mtime_ns for s in (0, 1)] == stamps
    assert json.loads((out / "verify" / "verify.json").read_text())["per_seed"] == report["per_seed"]
    assert bench.hns([*command[:2], "--search-seeds", "0", *command[5:]]) == 2
    assert "holds a verify of other searches" in capsys.readouterr().err


def test_a_row_from_a_folder_of_poor_starts_in_one_command(tmp_path, monkeypatch, capsys):
    """`search.py hns --starts FOLDER`: each search starts from the folder, and the verify retrains each find beside
    the start that was best in its search, taken from that folder (search.md § 30's row). (The searches and the
    evaluations are stood in for: a search's find and best start are fixed by its seed, each candidate's fitness is
    fixed, its seed added as a tenth.)"""
    import importlib.util

    spec = importlib.util.spec_from_file_location("search_benchmark",
                                                  BENCHMARKS / "search.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    starts = tmp_path / "poor"
    starts.mkdir()
    for name in ("wrong_sign", "wide_kernel"):
        (starts / f"{name}.py").write_text(f"def compute_reward(state):  # {name}\n    return state['x']\n")
    searched = []

    def search(command, env, stdout, stderr):  # `search.py --task T --starts S --out O -- --seed N ...`
        option = dict(zip(command, command[1:]))
        searched.append((option["--starts"], int(option["--seed"])))
        out = Path(option["--out"])
        out.mkdir(parents=True)
        (out / "best.py").write_text(f"def compute_reward(state):  # seed {option['--seed']}\n    return 2.0\n")
        best = {"20": "init_wrong_sign", "21": "init_wide_kernel"}[option["--seed"]]
        (out / "search.json").write_text(json.dumps({"task": "Anymal", "best_start": {"name": best},
                                                     "best_find": {"name": "child"}, "gap_closed": 0.9,
                                                     "best_is_start": False}))
    values = {"start_wrong_sign": 1.0, "start_wide_kernel": 1.2, "task_default": 0.2, "find_rows_search_20": 0.2,
              "find_rows_search_21": 0.8}
    trained = []
    monkeypatch.setattr(bench.subprocess, "run", search)
    monkeypatch.setattr(bench.subprocess, "Popen", _stand_in_evaluation(values, False, trained))
    out = tmp_path / "rows"
    assert bench.hns(["--task", "Anymal", "--starts", str(starts), "--search-seeds", "20", "21", "--out", str(out),
                      "--verify-seeds", "2"]) == 0
    assert searched == [(str(starts), 20), (str(starts), 21)]
    [(functions, names)] = trained
    assert names == ["find_rows_search_20", "find_rows_search_21", "start_wide_kernel", "start_wrong_sign",
                     "task_default"]
    for start in ("wrong_sign", "wide_kernel"):
        assert (functions / f"start_{start}.py").read_text() == (starts / f"{start}.py").read_text()
    report = json.loads((out / "verify" / "verify.json").read_text())
    rows = report["over_searches"]  # each find against its own search's best start: (1.05 - 0.25) / (1.05 - 0.25)
    assert rows["start_wrong_sign"]["per_search"] == pytest.approx({"find_rows_search_20": 1.0})
    assert rows["start_wide_kernel"]["per_search"] == pytest.approx({"find_rows_search_21": 0.4})  # 0.4 / 1.0
    assert report["over_all_starts"]["at_least_80_percent"] == 1
    printed = " ".join(capsys.readouterr().out.split())
    assert "over 1 searches from start_wide_kernel: per search 0.40" in printed
    assert "over all 2 searches, each against the start that was best in it: 1 at 0.80 or more" in printed
    with pytest.raises(SystemExit):
        bench.hns(["--task", "Anymal", "--starts", str(tmp_path / "none"), "--search-seeds", "1", "--out", str(out)])
    assert "give a starting file or a folder of them" in capsys.readouterr().err


def test_the_hns_row_retrains_each_task_at_its_stated_budget():
    """`search.py hns` retrains finds at the search's final budget, the Humanoid's at 4,096 envs and Cartpole's at 64
    envs × 20 iterations (where their sparse start and default separate), and `--verify-args` overrides each."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("search_benchmark",
                                                  BENCHMARKS / "search.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.verify_arguments("Ant") == ["--envs-per-candidate", "1024", "--iterations", "300"]
    assert bench.verify_arguments("Humanoid") == ["--envs-per-candidate", "4096", "--iterations", "300"]
    assert bench.verify_arguments("Cartpole") == ["--envs-per-candidate", "64", "--iterations", "20"]
    assert bench.verify_arguments("Humanoid", "--envs-per-candidate 8 --iterations 2") == [
        "--envs-per-candidate", "8", "--iterations", "2"]


def test_the_hns_row_continues_what_a_time_limit_cut(tmp_path, monkeypatch):
    """`search.py hns` launched again after Ctrl-C or a device call's time limit: a search that had begun continues
    (`envcoder auto --resume`), a verify part that had begun continues from its checkpoint (`envcoder eval --resume`),
    and a part that finished is not trained again. (The commands are recorded here, not run.)"""
    import importlib.util

    spec = importlib.util.spec_from_file_location("search_benchmark", BENCHMARKS / "search.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    launched = []

    class Recorded:  # a process that ends at once, as a part interrupted again would (exit status 130)
        def __init__(self, argv, **_):
            launched.append([str(a) for a in argv])

        def wait(self):
            return 130

    monkeypatch.setattr(bench.subprocess, "run", lambda argv, **_: launched.append([str(a) for a in argv]))
    monkeypatch.setattr(bench.subprocess, "Popen", Recorded)
    starts, out = tmp_path / "starts", tmp_path / "hns"
    starts.mkdir()
    (starts / "poor.py").write_text("# a start\n")
    (out / "search_0").mkdir(parents=True)
    (out / "search_0" / "auto.json").write_text("{}")  # begun, no search.json: cut short
    command = ["--task", "Cartpole", "--starts", str(starts), "--search-seeds", "0", "--out", str(out),
               "--verify-seeds", "2"]
    assert bench.hns(command) == 1  # the search is still without a find: nothing to verify
    assert launched[0][-2:] == ["--", "--resume"] and "--seed" not in launched[0]
    (out / "search_0" / "search.json").write_text(json.dumps({"task": "Cartpole", "best_is_start": False,
                                                               "best_start": {"name": "init_poor"},
                                                               "best_find": {"name": "it00_c00"}}))
    (out / "search_0" / "best.py").write_text("# the find\n")
    (out / "verify" / "part_0").mkdir(parents=True)
    (out / "verify" / "part_0" / "config.json").write_text("{}")  # begun: a checkpoint to continue from
    launched.clear()
    assert bench.hns(command) == 130  # interrupted again: says so, and does not report
    assert launched == [[sys.executable, "-c", "from envcoder.cli import run; run()", "eval", "--resume",
                         str(out / "verify" / "part_0")]]
    fitness = {"find_hns_search_0": 0.9, "start_poor": 0.2, "task_default": 1.0}
    (out / "verify" / "part_0" / "results.json").write_text(json.dumps({"higher_is_better": True, "groups": [
        {"candidate": name, "seed": seed, "task_fitness": value + seed / 100} for name, value in fitness.items()
        for seed in (0, 1)]}))  # finished: kept, and reported
    launched.clear()
    assert bench.hns(command) == 0 and launched == []
    report = json.loads((out / "verify" / "verify.json").read_text())
    assert report["searches"]["find_hns_search_0"]["gap_closed"] == pytest.approx(0.875)  # (0.905-0.205)/0.8


def test_the_summary_counts_what_its_run_directories_hold(tmp_path, monkeypatch, capsys):
    """The summary's account adds up: the files it says it validated (proposed and starting), the groups each stage
    trained (counted here from the candidate files and seeds each evaluation was given), and a difference against
    the task default whose interval stays inside what two fitness values in [0, 1] can differ by. (The evaluations
    are stood in for: the task default 0.0, every other candidate 0 or 1 by the seed's parity.)"""
    from conftest import FakeEvaluations
    from envcoder.runs import evaluation

    fake = FakeEvaluations(lambda name, seed: 0.0 if name == "task_default" else float(seed % 2))
    monkeypatch.setattr(evaluation, "evaluate_once", fake)
    out = tmp_path / "auto"
    assert main(["auto", "--task", "Cartpole", "--initial", str(HERE / "candidates" / "auto" / "poor_weights.py"),
                 "--candidates-per-iteration", "2", "--iterations", "1", "--copies", "2", "--final-top", "1",
                 "--final-seeds", "2", "--final-max-seeds", "2", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["files"] == {"valid": 3, "proposed": 2, "starting": 1}

    def groups(pattern):  # each evaluation's candidate files × its seeds, as the fake was called
        dirs = set(out.glob(pattern))
        return sum(len(names) * len(seeds) for (names, seeds), where in zip(fake.calls, fake.outs) if where in dirs)
    assert summary["trained"] == {"search": groups("iter_*/eval"), "halving": groups("iter_*/rung_*/eval"),
                                  "final": groups("final/eval")}
    assert summary["trained"]["search"] == len(list((out / "iter_00" / "candidates").glob("*.py")))
    text = " ".join((out / "summary.md").read_text().split())
    assert ("3 candidate files (2 proposed, 1 starting) over 1 iteration; groups trained: "
            f"{summary['trained']['search']} in the search's evaluations") in text
    assert "no model, no tokens, no cost" in text and "tokens in 0" not in text
    low, high = summary["task_default"]["ci"]  # 0.5 ± t(0.975, 1) · 0.5 = [-5.85, 6.85] unclipped
    assert (low, high) == (-1.0, 1.0) and "clipped to ±1" in summary["task_default"]["text"]
    printed = " ".join(capsys.readouterr().out.split())
    assert "best so far:" in printed and "(every 1 iterations)" not in text


def test_a_budget_ends_the_search_where_another_iteration_and_the_final_would_not_fit(tmp_path, monkeypatch, capsys):
    """`--budget MINUTES`: after each iteration the search goes on only where another iteration and the final
    evaluation (estimated from the iterations so far) fit; the final always runs, and the summary counts the
    iterations that ran; where the first iteration and the final alone pass the budget, it says what to make smaller.
    No iteration trains past the budget: a population run's training stops at its end, and a halving rung starts
    only where it is expected to end before it. (The evaluations are stood in for.)"""
    from conftest import FakeEvaluations
    from envcoder.runs import evaluation

    fake = FakeEvaluations(lambda name, seed: 0.2 if name == "task_default" else 0.5)
    monkeypatch.setattr(evaluation, "evaluate_once", fake)
    common = ["auto", "--task", "Cartpole", "--initial", str(HERE / "candidates" / "auto" / "poor_weights.py"),
              "--candidates-per-iteration", "1", "--copies", "2", "--final-top", "1", "--iterations", "3"]
    assert main([*common, "--budget", "0.0001", "--out", str(tmp_path / "tight")]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "budget: 1 iteration in" in printed and "would pass 0.0001 min: the search ends here" in printed
    assert "iteration 1 of at most 3 in 0.0001 min (iter_00)" in printed
    assert "past the budget: the final is made smaller to fit what is left, and a smaller iteration " \
           "(--candidates-per-iteration, --copies, --envs-per-candidate) fits it better" in printed
    # Nothing is left: the final trains its one find, the start and the default × 2 seeds (Cartpole's CPU default: 16).
    assert "the final trains 1 find × 2 seeds (set: 1 find × 16 seeds)" in printed and "and still passes it" in printed
    assert json.loads((tmp_path / "tight" / "final" / "sizes.json").read_text()) == {
        "final_top": 1, "final_seeds": 2, "final_max_seeds": 2}
    summary = json.loads((tmp_path / "tight" / "summary.json").read_text())
    assert len(summary["iterations"]) == 1 and not (tmp_path / "tight" / "iter_01").exists()
    assert [len(r["seeds"]) for r in summary["final_seeds"]["rounds"]] == [2]
    # By hand, 9 minutes: an iteration of 300 s that trained 163,840 envs; the final trains 4 files (2 finds, the
    # start, the default) × 4 seeds × 1,024 envs = 16,384 envs at the same rate, 30 s. 300 + 300 + 30 > 540: it ends,
    # and the final fits; an iteration of 500 s makes its final 50 s, and 550 s alone pass the budget.
    from envcoder.search.auto_settings import AutoSettings

    s = AutoSettings(task="Cartpole", out=tmp_path, budget_minutes=9, final_top=2, final_seeds=4, final_max_seeds=4,
                     final_envs_per_candidate=1024, proposer="offline")
    assert s.next_iteration([{"seconds": 200, "environments": 163_840}], 1, 200) == ({}, None)  # 200 + 200 + 20 fit
    sizes, ends = s.next_iteration([{"seconds": 300, "environments": 163_840}], 1, 300)
    assert sizes is None and "another (about 5.0 min) and the final evaluation (about 0.5 min) would pass 9 min" in ends
    assert "past the budget" not in ends
    assert "with the final it takes about 9.2 min, past the budget" in s.next_iteration(
        [{"seconds": 500, "environments": 163_840}], 1, 500)[1]
    # What the final trains where less is left, at each iteration's rate: 300 s spent, 240 left, the final as set fits
    # (30 s); 500 s spent, 40 left: 4 files × 3 seeds × 1,024 envs take 37.5 s; 520 s, 20 left: 3 files (1 find) × 2
    # seeds, 19.5 s; 530 s, 10 left: the same, the smallest, past it.
    assert s.final_within_budget([{"seconds": 300, "environments": 163_840}], 1, 300) == (
        {"final_top": 2, "final_seeds": 4, "final_max_seeds": 4}, None)
    assert s.final_within_budget([{"seconds": 500, "environments": 163_840}], 1, 500)[0] == {
        "final_top": 2, "final_seeds": 3, "final_max_seeds": 3}
    sizes, words = s.final_within_budget([{"seconds": 520, "environments": 163_840}], 1, 520)
    assert sizes == {"final_top": 1, "final_seeds": 2, "final_max_seeds": 2} and words.endswith("to fit")
    assert s.final_within_budget([{"seconds": 530, "environments": 163_840}], 1, 530)[1].endswith(
        "and still passes it")
    rounds = dataclasses.replace(s, final_max_seeds=16)  # up to 16 seeds: 120 s; with 400 s spent, 140 s left
    assert rounds.final_within_budget([{"seconds": 300, "environments": 163_840}], 1, 300)[1] is None
    assert rounds.final_within_budget([{"seconds": 400, "environments": 163_840}], 1, 400)[0] == {
        "final_top": 2, "final_seeds": 4, "final_max_seeds": 4}  # first without the rounds of added seeds
    assert summary["final_ranking"] and summary["trained"]["final"] > 0
    # No iteration trains past the budget: the population run was given its end, which had passed (the stand-in
    # says that it trained 10 of its 20 iterations, as a run says it), and no halving rung started after it; the
    # final was not given one.
    assert [u is not None for u in fake.untils[:2]] == [True, False] and len(fake.untils) == 2
    assert "budget: the time of --budget 0.0001 is up, no halving rung starts: the population run's copies are " \
           "ranked as they trained" in printed
    record = json.loads((tmp_path / "tight" / "iter_00" / "iteration.json").read_text())
    assert record["halving_rungs"] == 0 and record["halving"] == [] and record["stopped_by_budget_after"] == 10
    assert summary["trained"]["halving"] == 0 and record["best"] in {row["name"] for row in record["table"]}
    assert record["seconds"] > 0 and record["environments"] == summary["trained"]["search"] * 64 * 10 / 20
    assert record["halving_rungs_skipped_by_budget"] == 1  # copies 2: 1 rung set
    assert "| 1 | 2 | 2 / 2 |" in (tmp_path / "tight" / "summary.md").read_text() and \
        "(--budget stopped its training after 10 iterations and skipped 1 halving rung) |" in (
            tmp_path / "tight" / "summary.md").read_text()
    # Every fitness in four significant digits, trailing zeros kept (a best of 5.0005 read "5" beside 3.419).
    assert re.search(r"\| init_poor_weights-\d \| 0\.5000 \| ", (tmp_path / "tight" / "summary.md").read_text())
    assert main([*common, "--budget", "600", "--out", str(tmp_path / "roomy")]) == 0
    assert "the search ends here" not in capsys.readouterr().out
    roomy = json.loads((tmp_path / "roomy" / "summary.json").read_text())
    assert len(roomy["iterations"]) == 3 and not (tmp_path / "roomy" / "final" / "sizes.json").exists()
    assert roomy["trained"]["halving"] > 0 and not any(it["stopped_by_budget_after"] for it in roomy["iterations"])
    # A run that says it took 100 s (its programs compiled in none of them): a halving rung is expected to take as
    # long, which would end past a budget of 1 minute, so none starts; the population run trained to its end.
    monkeypatch.setattr(evaluation, "evaluate_once", FakeEvaluations(lambda name, seed: 0.5, seconds=100.0))
    assert main([*common, "--budget", "1", "--out", str(tmp_path / "no_rung")]) == 0
    assert "budget: halving rung 1/1 (about 1.7 min) would end past --budget 1" in " ".join(
        capsys.readouterr().out.split())
    record = json.loads((tmp_path / "no_rung" / "iter_00" / "iteration.json").read_text())
    assert record["halving_rungs"] == 0 and "stopped_by_budget_after" not in record
    assert record["halving_rungs_skipped_by_budget"] == 1
    assert {row["status"] for row in record["table"]} == {"start", "ok"}  # the copies ranked, none a "copy"
    assert [len(r["seeds"]) for r in roomy["final_seeds"]["rounds"]] == [16]  # the final as set
    assert main([*common, "--budget", "0", "--out", str(tmp_path / "none")]) == 2
    assert "--budget 0: pass a number of minutes above 0" in capsys.readouterr().err


def test_a_budget_sizes_a_population_search_s_last_iteration_to_fewer_copies_where_only_that_fits(tmp_path):
    """`--budget`: where another iteration as set would pass the budget but one with fewer copies fits, a population
    search's next iteration trains the most copies that fit (and no more halving rungs than halve them). Its time:
    each iteration's part that did not train, its population run's training and its rungs' times the rungs of the
    next, scaled by max(1, the next's groups / its groups), then the mean. By hand, 9 minutes, 12 children and the 2
    best finds carried (14 files): one iteration of 260 s at 56 groups, whose population run trained 100 s and its
    two rungs 50 s each (60 s did not train); the final, 26 s (260 s for 163,840 envs, the final's 4 files × 4 seeds
    × 1,024 envs at that rate). As set: 260 + 260 + 26 > 540; 3 copies (42 groups, 1 rung): 60 + 100 + 50 = 210 s,
    and 260 + 210 + 26 = 496 fit."""
    s = AutoSettings(task="Cartpole", out=tmp_path, budget_minutes=9, final_top=2, final_seeds=4, final_max_seeds=4,
                     final_envs_per_candidate=1024, proposer="population", copies=4, halving_rungs=2,
                     candidates_per_iteration=12)
    first = {"seconds": 260, "training_seconds": [100, 50, 50], "environments": 163_840, "copies": 4,
             "halving_rungs": 2, "population": {"groups": 56}}
    sizes, words = s.next_iteration([first], 1, 260)
    assert sizes == {"copies": 3, "halving_rungs": 1}
    assert words == ("budget: 1 iteration in 4.3 min; another as set (about 4.3 min) and the final evaluation (about "
                     "0.4 min) would pass 9 min: the next trains 3 copies of each candidate (set: 4), 1 halving rung "
                     "(set: 2), about 3.5 min")
    # 300 s (120 + 60 + 60 trained; the final 30 s): 3 or 2 copies (1 rung) take 240 s, 570 in all; 1 copy (no rung)
    # 180 s, 510: it fits. 400 s (160 + 80 + 80; the final 40 s): 1 copy takes 240 s, 680 in all: the search ends.
    assert s.next_iteration([{**first, "seconds": 300, "training_seconds": [120, 60, 60]}], 1, 300)[0] == {
        "copies": 1, "halving_rungs": 0}
    sizes, words = s.next_iteration([{**first, "seconds": 400, "training_seconds": [160, 80, 80]}], 1, 400)
    assert sizes is None and words.endswith("the search ends here")
    # More groups than an iteration had take proportionally longer: the first iteration's 49 groups (12 children ×
    # 4 copies and the start) against the next's 56, 260 × 56 / 49 s; 3 copies (42 groups) no less than at 49.
    assert s.iteration_seconds([{**first, "population": {"groups": 49}}], 4) == pytest.approx(260 * 56 / 49)
    assert s.iteration_seconds([{**first, "population": {"groups": 49}}], 3) == pytest.approx(210)
    # A 1-copy iteration of 100 s at 14 groups, whose population run trained 40 s and which had no rung: as set it
    # scales to (100 + 2 × 50) × 56 / 14 = 800 s (its rungs at the others' 50 s), so with the first (260 s), 530.
    small = {"seconds": 100, "training_seconds": [40], "environments": 3_584, "copies": 1, "halving_rungs": 0,
             "population": {"groups": 14}}
    assert s.iteration_seconds([first, small], 4) == pytest.approx(530)
    # A record from before the runs' times were kept: its seconds shared by its 3 runs, nothing fixed.
    assert s.iteration_seconds([{"seconds": 300, "environments": 163_840}], 2) == pytest.approx(200)
    # A search without copies (offline) ends instead.
    assert dataclasses.replace(s, proposer="offline").next_iteration([first], 1, 260)[0] is None


def test_an_iteration_made_smaller_by_the_budget_trains_its_copies_and_a_resumed_run_keeps_them(tmp_path,
                                                                                               monkeypatch):
    """The loop trains an iteration at the sizes `next_iteration` chose (fewer copies, fewer rungs), records them in
    its iteration.json, and writes them to iter_KK/sizes.json, which a resumed run reads back instead of deciding
    again. (The evaluations are stood in for; so is the decision, whose arithmetic the test above checks.)"""
    from conftest import FakeEvaluations
    from envcoder.runs import evaluation

    fake = FakeEvaluations(lambda name, seed: 0.2 if name == "task_default" else 0.5)
    monkeypatch.setattr(evaluation, "evaluate_once", fake)
    decided = []

    def smaller(self, records, starts, elapsed):
        decided.append(len(records))
        return ({}, None) if not records else ({"copies": 1, "halving_rungs": 0}, "budget: the next trains 1 copy")
    monkeypatch.setattr(AutoSettings, "next_iteration", smaller)
    out = tmp_path / "run"
    common = ["--candidates-per-iteration", "2", "--copies", "4", "--final-top", "1", "--iterations", "2"]
    assert main(["auto", "--task", "Cartpole", "--initial", str(HERE / "candidates" / "auto" / "poor_weights.py"),
                 *common, "--budget", "60", "--out", str(out)]) == 0
    first, second = (json.loads((out / f"iter_0{i}" / "iteration.json").read_text()) for i in (0, 1))
    assert (first["copies"], first["halving_rungs"], second["copies"], second["halving_rungs"]) == (4, 2, 1, 0)
    assert json.loads((out / "iter_01" / "sizes.json").read_text()) == {"copies": 1, "halving_rungs": 0}
    assert not (out / "iter_00" / "sizes.json").exists() and not list((out / "iter_01").glob("rung_*"))
    assert {p.stem.rsplit("-", 1)[1] for p in (out / "iter_01" / "candidates").glob("*.py")} == {"0"}
    assert {p.stem.rsplit("-", 1)[1] for p in (out / "iter_00" / "candidates").glob("*.py")} >= {"0", "1", "2", "3"}
    assert len(first["training_seconds"]) == 3 and len(second["training_seconds"]) == 1  # population run, rungs
    # Resumed in the smaller iteration: its sizes are read back, not decided again.
    shutil.rmtree(out / "final")
    (out / "iter_01" / "iteration.json").unlink()
    (out / "summary.json").unlink()
    calls = len(decided)
    assert main(["auto", "--resume", str(out)]) == 0
    assert len(decided) == calls + 1  # iteration 0 only (it has no sizes.json); iteration 1 read its own back
    assert json.loads((out / "iter_01" / "iteration.json").read_text())["copies"] == 1
    table = (out / "summary.md").read_text()
    assert "| iteration | copies |" in table and "\n| 1 | 4 | " in table and "\n| 2 | 1 | " in table


def test_a_resumed_search_trains_its_final_at_the_sizes_its_budget_chose(tmp_path, monkeypatch):
    """A search stopped in a final that `--budget` made smaller goes on with the sizes it recorded (final/sizes.json),
    not with sizes decided again from the resumed process's time. (The evaluations are stood in for.)"""
    from conftest import FakeEvaluations
    from envcoder.runs import evaluation

    fake = FakeEvaluations(lambda name, seed: 0.2 if name == "task_default" else 0.5)

    def stopped_in_the_final(plan, *args, **kwargs):
        if Path(plan.settings.out).parent.name == "final":
            raise KeyboardInterrupt
        return fake(plan, *args, **kwargs)
    monkeypatch.setattr(evaluation, "evaluate_once", stopped_in_the_final)
    out = tmp_path / "run"
    assert main(["auto", "--task", "Cartpole", "--initial", str(HERE / "candidates" / "auto" / "poor_weights.py"),
                 "--candidates-per-iteration", "1", "--copies", "2", "--final-top", "1", "--iterations", "2",
                 "--budget", "0.0001", "--out", str(out)]) == 130
    assert json.loads((out / "final" / "sizes.json").read_text())["final_seeds"] == 2
    (out / "final" / "sizes.json").write_text(json.dumps({"final_top": 1, "final_seeds": 3, "final_max_seeds": 3}))
    monkeypatch.setattr(evaluation, "evaluate_once", fake)
    assert main(["auto", "--resume", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [len(r["seeds"]) for r in summary["final_seeds"]["rounds"]] == [3]  # the recorded sizes, not 2 again


@pytest.mark.parametrize("proposer", ["offline", pytest.param("population", marks=pytest.mark.slow)])
def test_a_structural_find_is_also_written_flat_and_checked_to_be_the_same_program(tmp_path, monkeypatch, proposer):
    """The find, a structural child of the start (the stand-in evaluations rank such children first), is also
    written flat (`best_readable.py`), checked in the sandbox to be the same program as `best.py`, and summary.md
    says what changed from the start, in words and as a diff (also after a population search, whose starting
    files train as copies and join the final as themselves)."""
    from conftest import FakeEvaluations
    from envcoder.runs import evaluation

    out = tmp_path / "auto"

    def value(name, seed):
        if name == "task_default":
            return 0.4
        files = [f for f in out.glob(f"**/candidates/{name}.py") if f.parent.parent.name != "eval"]  # not the copies
        return 0.9 if files and "_split" in files[0].read_text() else 0.1
    monkeypatch.setattr(evaluation, "evaluate_once", FakeEvaluations(value))
    assert main(["auto", "--task", "Cartpole", "--initial", str(HERE / "candidates" / "auto" / "poor_weights.py"),
                 "--proposer", proposer, "--candidates-per-iteration", "6", "--iterations", "1", "--final-top", "1",
                 "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    readable = summary["readable"]
    assert "_split" in (out / "best.py").read_text() and readable["same_program"], readable
    flat = (out / "best_readable.py").read_text()
    assert "_split" not in flat and flat.count("def ") == 1 and readable["start"] == "init_poor_weights"
    text = (out / "summary.md").read_text()
    assert "`best_readable.py` is best.py written flat" in text and "```diff\n--- start\n+++ find" in text
    assert f"Against the best starting file, init_poor_weights: {readable['change']}." in text


def test_auto_s_defaults_are_sized_from_the_device_and_the_task(tmp_path):
    """Unset sizes come from `SIZES` for this device (the CPU here) with what `TASK_SIZES` changes for the task
    (Cartpole's search ranks at 20 training iterations, with 8 children × 8 copies, 2 iterations and a final of 16
    seeds), the training iterations capped by the task's own `max_epochs` or set by an `ALGO.max_epochs` override; a
    value given is kept; a budget lifts the iteration default to `BUDGET_ITERATIONS`."""
    from envcoder.search.auto_settings import BUDGET_ITERATIONS, SIZES, AutoSettings

    cpu = SIZES["cpu"]
    s = AutoSettings(task="CartpoleDiscrete", out=tmp_path).resolved()
    assert (s.candidates_per_iteration, s.iterations, s.copies, s.envs_per_candidate, s.final_seeds, s.final_top) == (
        cpu["candidates_per_iteration"], cpu["iterations"], cpu["copies"], cpu["envs_per_candidate"],
        cpu["final_seeds"], cpu["final_top"])
    assert s.train_iterations == min(cpu["train_iterations"], 60)  # its max_epochs is 60
    assert s.final_envs_per_candidate == s.envs_per_candidate  # on a CPU, the search's
    s = AutoSettings(task="Cartpole", out=tmp_path).resolved()
    assert (s.candidates_per_iteration, s.iterations, s.copies, s.envs_per_candidate, s.train_iterations) == (
        8, 2, 8, 64, 20)
    assert (s.final_seeds, s.final_max_seeds, s.final_top, s.final_envs_per_candidate, s.halving_rungs) == (
        16, 16, 2, 64, 3)
    given = AutoSettings(task="Anymal", out=tmp_path, copies=8, envs_per_candidate=16, overrides={"max_epochs": 7})
    assert (given.resolved().copies, given.resolved().train_iterations, given.resolved().final_envs_per_candidate) \
        == (8, 7, 16)
    assert AutoSettings(task="Cartpole", out=tmp_path, budget_minutes=5).resolved().iterations == BUDGET_ITERATIONS


def test_auto_s_gpu_defaults_are_what_the_task_changes_of_the_benchmarked_setting(tmp_path, monkeypatch):
    """On an accelerator the unset sizes are `SIZES["gpu"]` with what `TASK_SIZES` changes for the task (the
    Humanoid's search trains 6 files × 2 copies × 1,024 envs, no halving rung, one find in the final); a task with
    no entry gets the benchmarked setting (its halving rungs as many as halve its copies), and a value given on the
    command line is kept."""
    import jax

    from envcoder.search.auto_settings import SIZES, TASK_SIZES, AutoSettings

    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    sizes = ("candidates_per_iteration", "copies", "envs_per_candidate", "final_envs_per_candidate", "train_iterations")
    humanoid = AutoSettings(task="Humanoid", out=tmp_path).resolved()
    assert [getattr(humanoid, name) for name in sizes] == [5, 2, 1024, 1024, 300]
    assert (humanoid.halving_rung_count, humanoid.final_top) == (0, 1)
    assert TASK_SIZES["gpu"]["Humanoid"] == {"candidates_per_iteration": 5, "copies": 2, "envs_per_candidate": 1024,
                                             "halving_rungs": 0, "final_top": 1}
    ant = AutoSettings(task="Ant", out=tmp_path).resolved()
    assert [getattr(ant, name) for name in sizes] == [SIZES["gpu"][name] for name in sizes]
    assert (ant.halving_rungs, ant.halving_rung_count, ant.final_top) == (2, 2, 2)  # recorded: resumed as it ran
    given = AutoSettings(task="Humanoid", out=tmp_path, copies=4, envs_per_candidate=512, halving_rungs=2).resolved()
    assert (given.copies, given.envs_per_candidate, given.candidates_per_iteration) == (4, 512, 5)
    assert given.halving_rung_count == 2 and given.resolved() == given


@pytest.mark.slow
def test_auto_parses_no_candidate_text_in_its_own_process(tmp_path, monkeypatch):
    """Start files that broke `auto` while it read them in the training process (two sweep tables, a sweep of an
    annotated constant, a syntax error, a NUL byte, a million combinations) and a good one, searched by the offline
    and the population proposer: both runs end with exit 0, the bad starts left out with their reasons, and no
    candidate's text is parsed or tokenized in this process: sweeps, children, copies and constants are written in
    the sandbox (`SandboxValidator.jailed`)."""
    import ast
    import tokenize
    import zlib

    from conftest import FakeEvaluations
    from envcoder.runs import evaluation

    mark = "# candidate " + "text"  # (pytest parses this file: the mark is not in it)
    parse, tokens, seen = ast.parse, tokenize.generate_tokens, []

    def guarded_parse(source, *args, **kwargs):
        if mark in str(source):
            seen.append(("parsed", str(source)))
            raise AssertionError("a candidate's text was parsed in the training process")
        return parse(source, *args, **kwargs)

    def guarded_tokens(readline):
        def read():
            line = readline()
            if mark in line:
                seen.append(("tokenized", line))
                raise AssertionError("a candidate's text was tokenized in the training process")
            return line
        return tokens(read)
    monkeypatch.setattr(ast, "parse", guarded_parse)
    monkeypatch.setattr(tokenize, "generate_tokens", guarded_tokens)
    starts = tmp_path / "starts"
    starts.mkdir()
    good = (HERE / "candidates" / "auto" / "poor_weights.py").read_text()
    reward = "\n\ndef compute_reward(state):\n    return K * state['dof_pos'][:, 1]\n"
    bad = {"two_tables": "PARAMS = {'K': [1.0]}\nPARAMS = {'NOPE': [1.0, 2.0]}\nK = 1.0" + reward,
           "annotated": "PARAMS = {'K': [1.0, 2.0]}\nK: float = 1.0" + reward,
           "syntax": "def compute_reward(state:\n", "nul": "K = 1.0\x00" + reward,
           "million": "PARAMS = {" + ", ".join(f"'K{i}': [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]"
                                               for i in range(6)) + "}\n" + "".join(f"K{i} = 1.0\n" for i in range(6))
           + reward.replace("K *", "K0 *")}
    for name, source in {"good": good, **bad}.items():
        (starts / f"{name}.py").write_text(f"{mark}\n{source}")
    monkeypatch.setattr(evaluation, "evaluate_once", FakeEvaluations(
        lambda name, seed: 0.4 if name == "task_default" else zlib.crc32(name.encode()) % 100 / 100))
    for proposer in ("offline", "population"):
        out = tmp_path / proposer
        assert main(["auto", "--task", "Cartpole", "--initial", str(starts), "--proposer", proposer,
                     "--candidates-per-iteration", "4", "--iterations", "2", "--final-top", "1",
                     "--out", str(out)]) == 0
        first = json.loads((out / "iter_00" / "iteration.json").read_text())
        failed = {f["name"]: f["error"] for f in first["failures"]}
        assert "syntax error" in failed["init_syntax"] and "null bytes" in failed["init_nul"], failed
        assert "PARAMS makes 1,000,000 combinations; at most 1,024" in failed["init_million"], failed
        assert "defines no constant NOPE" in failed["init_two_tables"], failed
        assert any(row["name"].startswith("init_good") for row in first["table"])
        assert json.loads((out / "summary.json").read_text())["best"] is not None
    assert not seen, seen


def test_auto_on_poor_starts_prints_a_page_that_says_first_whether_anything_was_found(tmp_path, monkeypatch, capsys):
    """`envcoder auto` with its CPU defaults from the search benchmark's poor Cartpole starts (training faked): at most
    80 lines on the console, a line per iteration and rung; the summary's first words say whether a find beat the
    starts and the default, each with its interval; best_readable.py and a diff exist; a candidate that led an
    iteration and is not in the final is explained; what the evaluations print goes to console.log."""
    import zlib

    from conftest import FakeEvaluations
    from envcoder.runs import evaluation

    def fitness(name, seed):  # the starts poor, the default 0.5, proposals spread
        if name == "task_default":
            return 0.5
        return 0.1 if name.startswith("init_") else zlib.crc32(f"{name}{seed}".encode()) % 100 / 100
    monkeypatch.setattr(evaluation, "evaluate_once", FakeEvaluations(fitness))
    out = tmp_path / "auto"
    assert main(["auto", "--task", "Cartpole", "--initial", str(BENCHMARKS / "search_starts" / "cartpole"),
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    lines = printed.rstrip("\n").splitlines()
    assert len(lines) <= 80, printed
    assert sum(line.startswith("  halving rung") for line in lines) == 6
    assert sum(line.startswith("  population run") for line in lines) == 2
    summary = json.loads((out / "summary.json").read_text())
    found = next(line for line in lines if "Found:" in line or "Nothing found" in line or "No find beats" in line)
    assert lines.index(found) < lines.index(next(line for line in lines if line.startswith("Best:"))), printed
    flat = " ".join(printed.split())
    from envcoder.search.summary import beats_references

    if beats_references(summary):  # "Found" only where the final shows it beats both with P(beats) >= 0.9
        assert f"Found: {summary['best']['name']}" in flat, flat
    else:
        assert "Found:" not in flat and "No find beats both the best starting file and the task default" in flat
    assert "the best starting file (init_" in flat, flat
    assert "the task default: it is" in flat or "beats the task default" in flat
    start = summary["found"]["against_start"]["name"]
    for name in (summary["best"]["name"], start):  # the commands that act on the answer, as printed
        assert f"envcoder play {out} --candidate {name} --video {out}/videos/{name}.gif" in printed, printed
    assert f"envcoder report {out}" in printed and f"envcoder play {out} --candidate" in (out / "summary.md").read_text()
    assert (out / "best_readable.py").exists() and "```diff" in (out / "summary.md").read_text()
    finalists = {p.stem for p in (out / "final" / "candidates").glob("*.py")}
    for it in summary["iterations"]:
        if it["best"] not in finalists:
            assert f"{it['best']}, which led iteration {it['iteration'] + 1}, is not in the final under that name:" \
                in flat, flat
    log = (out / "console.log").read_text()
    assert log.count("groups train together") == 2 and "groups train together" not in printed
