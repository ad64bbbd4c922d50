"""Checkpoints and `envcoder eval --resume`: a run killed mid-training and resumed ends exactly as the
uninterrupted run (CPU is deterministic), and each candidate's best checkpoint holds its best fitness."""

import csv
import dataclasses
import importlib.machinery
import json
import os
import random
import shutil
import subprocess
import sys
import types
from pathlib import Path

import jax
import numpy as np
import pytest

from conftest import BUNDLED
from fault_harness import run_killed
from envcoder.cli import main
from envcoder.atomic import write_atomically
from envcoder.runs import checkpoint as ckpt
from envcoder.runs.directory import RunDirectory

ITERATIONS = 6


def eval_args(functions, out, *overrides):
    return ["eval", "--task", "Cartpole", "--functions", str(functions), "--envs-per-candidate", "16",
            "--iterations", str(ITERATIONS), "ppo.save_frequency=2", "ppo.save_best_after=2", *overrides,
            "--seeds", "2", "--out", str(out)]


class FakeWandb:
    """Stands in for the `wandb` module: records every run's init arguments, logged steps and summary."""

    def __init__(self):
        self.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
        self.errors = types.SimpleNamespace(Error=RuntimeError)
        self.inits, self.logged, self.summaries, self.finished = [], {}, {}, []

    def init(self, **kwargs):
        self.inits.append(kwargs)
        run_id = kwargs["id"]
        return types.SimpleNamespace(
            log=lambda values, step: self.logged.setdefault(run_id, {}).setdefault(step, []).append(values),
            summary=self.summaries.setdefault(run_id, {}), finish=lambda: self.finished.append(run_id))


WANDB = FakeWandb()  # the `runs` fixture's killed and resumed runs log to it


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    functions = root / "functions"
    functions.mkdir()
    for name in ("good_upright", "alive_bonus"):
        shutil.copy(BUNDLED / "cartpole" / f"{name}.py", functions)
    assert main(eval_args(functions, root / "whole")) == 0

    append = RunDirectory.append_metrics

    def killed_at_iteration_3(self, iteration, *args):  # after the checkpoint of iteration 2, before that of 4
        if iteration == 3:
            raise KeyboardInterrupt
        return append(self, iteration, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "wandb", WANDB)
        with pytest.MonkeyPatch.context() as killing:
            killing.setattr(RunDirectory, "append_metrics", killed_at_iteration_3)
            assert main(eval_args(functions, root / "killed", "--wandb", "--wandb-project", "cartpole-tests")) == 130
        assert json.loads((root / "killed" / "checkpoints" / "progress.json").read_text())["iteration"] == 2
        assert not (root / "killed" / "results.json").exists()
        assert main(["eval", "--resume", str(root / "killed")]) == 0
    return root


def _numbers(row: dict) -> dict:
    """A metrics.csv row's values as numbers (blank: None), its text fields as they are."""
    def number(value):
        try:
            return float(value) if value != "" else None
        except ValueError:
            return value
    return {k: number(v) for k, v in row.items()}


def metrics(path):
    rows = list(csv.DictReader((path / "metrics.csv").open()))
    return [{k: v for k, v in row.items() if k != "env_steps_per_s"} for row in rows]  # timing differs


def test_resumed_run_equals_the_uninterrupted_one(runs):
    whole, resumed = runs / "whole", runs / "killed"
    a, b = json.loads((whole / "results.json").read_text()), json.loads((resumed / "results.json").read_text())
    assert a["ranking"] == b["ranking"] and a["groups"] == b["groups"]
    assert b["timings"]["resumed_after_iteration"] == 2
    assert metrics(whole) == metrics(resumed)  # rows of iteration 2 written before the kill are not doubled
    with np.load(whole / "checkpoints" / "train_state.npz") as x, np.load(resumed / "checkpoints" / "train_state.npz") as y:
        assert x.files == y.files and all(np.array_equal(x[k], y[k]) for k in x.files)


def test_wandb_gets_one_run_per_group_continued_on_resume(runs):
    wandb, killed = WANDB, runs / "killed"
    ids = json.loads((killed / "wandb.json").read_text())
    labels = ["good_upright#0", "good_upright#1", "alive_bonus#0", "alive_bonus#1"]
    assert sorted(ids) == sorted(labels) and len(set(ids.values())) == 4
    assert len(wandb.inits) == 8  # 4 before the kill, the same 4 again on resume
    for first, again in ((wandb.inits[i], wandb.inits[i + 4]) for i in range(4)):
        assert first["id"] == again["id"] == ids[first["name"]] and again["resume"] == "allow"
        assert first["project"] == "cartpole-tests" and first["group"] == "killed" and first["dir"] == str(killed)
        candidate, seed = first["name"].split("#")
        assert first["config"]["candidate"] == candidate and first["config"]["seed"] == int(seed)
        assert first["config"]["ppo"]["save_frequency"] == 2 and first["config"]["task"] == "Cartpole"
    rows = list(csv.DictReader((runs / "whole" / "metrics.csv").open()))
    for label in labels:
        logged = wandb.logged[ids[label]]
        # Iteration 2 was logged before the kill and again after the checkpoint, with the same values.
        assert sorted(logged) == list(range(ITERATIONS)) and len(logged[2]) == 2
        assert [{k: v for k, v in values.items() if k != "env_steps_per_s"} for values in logged[2]] == [
            {k: v for k, v in logged[2][0].items() if k != "env_steps_per_s"}] * 2
        name, seed = label.split("#")
        for row in (r for r in rows if r["candidate"] == name and r["seed"] == seed):
            expected = {k: float(v) for k, v in row.items() if k not in ("iteration", "candidate", "seed") and v}
            values = logged[int(row["iteration"])][-1]
            assert values.keys() == expected.keys()
            assert {k: v for k, v in values.items() if k != "env_steps_per_s"} == pytest.approx(
                {k: v for k, v in expected.items() if k != "env_steps_per_s"}, rel=1e-6)
    groups = {f"{g['candidate']}#{g['seed']}": g for g in json.loads((killed / "results.json").read_text())["groups"]}
    for label in labels:
        assert wandb.summaries[ids[label]]["final/task_fitness"] == groups[label]["task_fitness"]
    assert sorted(wandb.finished) == sorted(ids.values())


def test_best_checkpoint_holds_each_candidates_best_training_fitness(runs):
    rows = list(csv.DictReader((runs / "whole" / "metrics.csv").open()))
    for label in ("good_upright#0", "good_upright#1", "alive_bonus#0", "alive_bonus#1"):
        name, seed = label.split("#")
        # save_best_after=2: from the second iteration (index 1) on.
        fitness = [(int(r["iteration"]), float(r["task_fitness"])) for r in rows
                   if r["candidate"] == name and r["seed"] == seed and r["task_fitness"] and int(r["iteration"]) >= 1]
        best_iteration, best = max(fitness, key=lambda f: (f[1], -f[0]))
        with np.load(runs / "whole" / "checkpoints" / label / "best.npz") as data:
            # The policy that collected those episodes: before that iteration's update.
            assert data["task_fitness"] == pytest.approx(best) and int(data["iteration"]) == best_iteration
        with np.load(runs / "whole" / "checkpoints" / label / "last.npz") as data:
            assert int(data["iteration"]) == ITERATIONS and int(data["obs_dim"]) == 4


@pytest.mark.slow  # 30-35 s: the evaluation episode's compile and the video
@pytest.mark.skipif(os.environ.get("MUJOCO_GL") != "osmesa",
                    reason="rendering on a machine without a display needs OSMesa: apt-get install libosmesa6 "
                           "(.ci/run installs it, so CI always runs this test)")
def test_play_prints_episode_statistics_and_writes_a_video(runs, tmp_path, capsys):
    import imageio

    video = tmp_path / "good.mp4"
    status = main(["play", "--run", str(runs / "whole"), "--candidate", "good_upright", "--seed", "1",
                   "--episodes", "2", "--video", str(video), "--width", "160", "--height", "120",
                   "--trajectory", str(tmp_path / "good.npz")])
    assert status == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "good_upright#1 (best.npz" in out and "mean" in out
    said = " ".join(out.split())  # before the silent first compile and before rendering, a line each
    assert said.index("good_upright#1: compiling the policy") < said.index("rendering ") < said.index("video: ")
    lengths = [int(line.split("│")[3]) for line in out.splitlines() if line.count("│") == 5 and
               line.split("│")[1].strip().isdigit()]
    assert len(lengths) == 2 and all(1 <= n <= 500 for n in lengths)
    with np.load(tmp_path / "good.npz") as saved:  # the episodes' poses, each control step's start
        assert saved["qpos"].shape == (500, 2, 2) and list(saved["episode_length"]) == lengths
        assert saved["qpos"][0, 0, 1] != saved["qpos"][1, 0, 1] and float(saved["control_dt"]) == pytest.approx(0.02)
        qpos, qvel, n = saved["qpos"][:, 0], saved["qvel"][:, 0], lengths[0] - 1  # and velocities: the poses' rates
        assert qvel.shape == qpos.shape
        np.testing.assert_allclose((qpos[1:n] - qpos[:n - 1]) / 0.02, (qvel[1:n] + qvel[:n - 1]) / 2, rtol=0.1,
                                   atol=0.05)
    reader = imageio.get_reader(video)
    frames = sum(1 for _ in reader)
    assert frames == sum(lengths)  # one frame per control step of every episode
    first = reader.get_data(0)
    assert first.shape == (120, 160, 3) and first.std() > 0  # a picture, not a blank frame
    run = tmp_path / "run"  # a GIF in the run's videos/ (the README's way): its report shows it
    shutil.copytree(runs / "whole", run)
    gif = run / "videos" / "good.gif"
    assert main(["play", "--run", str(run), "--candidate", "good_upright", "--seed", "1", "--episodes", "1",
                 "--video", str(gif), "--width", "80", "--height", "60"]) == 0
    assert '<img src="videos/good.gif"' in (run / "report.html").read_text()
    from PIL import Image

    with Image.open(gif) as image:  # Pillow merges identical consecutive frames, adding up their delays
        durations = []
        for i in range(image.n_frames):
            image.seek(i)
            durations.append(image.info["duration"])
        assert image.size == (80, 60) and sum(durations) == pytest.approx(lengths[0] * 20, rel=0.01)  # 50 fps
    assert main(["play", "--run", str(runs / "whole"), "--candidate", "nope"]) == 2
    assert "has no candidate 'nope'" in capsys.readouterr().err
    assert main(["play", str(runs / "whole"), "--candidate", "good_upright", "--trajectory",
                 str(tmp_path / "none" / "poses.npz")]) == 2
    assert "poses.npz: its folder does not exist (make it first)" in capsys.readouterr().err


@pytest.mark.slow  # 20 s here: a fresh process renders a GIF
def test_play_without_an_opengl_backend_ends_with_one_line(runs, tmp_path, monkeypatch, capsys):
    import mujoco

    monkeypatch.setenv("MUJOCO_GL", os.environ.get("MUJOCO_GL", "osmesa"))  # play sets it; undone after the test

    def no_gl(*args, **kwargs):  # what PyOpenGL does when MUJOCO_GL names a library that is not installed
        raise AttributeError("'NoneType' object has no attribute 'glGetError'")

    monkeypatch.setattr(mujoco, "Renderer", no_gl)
    status = main(["play", "--run", str(runs / "whole"), "--candidate", "good_upright", "--video",
                   str(tmp_path / "x.gif"), "--width", "80", "--height", "60"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "cannot render the video: MuJoCo's OpenGL backend" in err and "libosmesa6" in err
    assert not (tmp_path / "x.gif").exists()


@pytest.mark.slow
def test_play_as_the_readme_shows_it_renders_with_mujoco_gl_unset(runs, tmp_path, monkeypatch):
    """`envcoder play --video X.gif` in a fresh process whose environment names no OpenGL backend: it picks one
    that works here (EGL, then OSMesa) before MuJoCo is imported, prints no GLFW warnings and writes the GIF."""
    from PIL import Image

    from envcoder.runs.gl import choose_gl_backend

    monkeypatch.setenv("MUJOCO_GL", "unset")
    monkeypatch.delenv("MUJOCO_GL")
    if choose_gl_backend() is None:
        pytest.skip("neither EGL nor OSMesa renders on this machine (apt-get install libosmesa6)")
    env = {k: v for k, v in os.environ.items() if k != "MUJOCO_GL"}
    env["ENVCODER_CACHE_DIR"] = jax.config.jax_compilation_cache_dir or ""  # the suite's compiled programs
    video = tmp_path / "good_upright.gif"
    done = subprocess.run([sys.executable, "-m", "envcoder.cli", "play", "--run", str(runs / "whole"), "--candidate",
                           "good_upright", "--video", str(video), "--width", "80", "--height", "60"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "GLFW" not in done.stderr and f"video: {video}" in done.stdout
    with Image.open(video) as image:
        assert image.format == "GIF" and image.size == (80, 60) and image.n_frames > 1


def test_a_video_that_cannot_be_written_is_refused_before_anything_is_played(runs, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MUJOCO_GL", os.environ.get("MUJOCO_GL", "egl"))  # play would choose one; undone after
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # the video extra is not installed
    args = ["play", "--run", str(runs / "whole"), "--candidate", "good_upright", "--video"]
    assert main([*args, str(tmp_path / "x.mp4")]) == 2
    captured = capsys.readouterr()
    assert 'needs the video extra: pip install -e ".[video]", or write a .gif' in captured.err
    assert captured.err.count("\n") == 1 and "deterministic episodes" not in captured.out
    assert main([*args, str(tmp_path / "x.avi")]) == 2 and "write a .mp4 or a .gif" in capsys.readouterr().err


def test_unexpected_errors_are_one_line_and_debug_shows_the_traceback(runs, monkeypatch, capsys):
    from envcoder.runs import evaluation

    def broken(*args, **kwargs):
        raise RuntimeError("something nobody foresaw\nwith a second line")

    monkeypatch.setattr(evaluation, "run_evaluation", broken)
    args = ["eval", "--task", "Cartpole", "--out", str(runs / "never")]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err == ("envcoder eval: error: RuntimeError: something nobody foresaw (run again with --debug for the "
                   "traceback)\n")
    with pytest.raises(RuntimeError, match="nobody foresaw"):
        main([*args, "--debug"])


def test_policy_and_train_state_round_trip(tmp_path):
    params = {"actor": {"w": np.arange(6.0).reshape(2, 3), "b": np.ones(3)}, "log_std": np.zeros(3)}
    obs_rms = (np.ones(4), np.full(4, 2.0), np.asarray(7.0))
    ckpt.save_policy(tmp_path / "p.npz", params, obs_rms, obs_dim=4, action_dim=3, iteration=9, fitness=0.5)
    loaded, rms, meta = ckpt.load_policy(tmp_path / "p.npz", params, obs_rms)
    assert jax.tree.all(jax.tree.map(np.array_equal, loaded, params)) and jax.tree.all(jax.tree.map(np.array_equal, rms, obs_rms))
    assert meta == {"obs_dim": 4, "action_dim": 3, "iteration": 9, "task_fitness": 0.5}
    ckpt.save_train_state(tmp_path, params, {"iteration": 3})
    state, progress = ckpt.load_train_state(tmp_path, params)
    assert progress == {"iteration": 3} and jax.tree.all(jax.tree.map(np.array_equal, state, params))
    (tmp_path / "progress.json").write_text('{"iteration": 1}')  # a kill between the two writes leaves it behind
    assert ckpt.read_progress(tmp_path) == {"iteration": 3}  # the state's own copy counts
    with pytest.raises(ValueError, match="changed since it was written"):
        ckpt.load_train_state(tmp_path, {**params, "log_std": np.zeros(5)})
    assert not list(tmp_path.glob("*.tmp"))  # written atomically: no temporary file left behind


def test_a_write_that_fails_midway_leaves_the_previous_file_and_no_temporary_one(tmp_path, monkeypatch):
    path = tmp_path / "deep" / "results.json"
    write_atomically(path, "old")
    with pytest.raises(TypeError):  # fails while writing the temporary file
        write_atomically(path, object())

    def replace_fails(*_):
        raise OSError("disk full")
    with monkeypatch.context() as patch:  # fails at the rename
        patch.setattr(os, "replace", replace_fails)
        with pytest.raises(OSError, match="disk full"):
            write_atomically(path, "new")
    assert path.read_text() == "old" and [p.name for p in path.parent.iterdir()] == ["results.json"]
    write_atomically(path, b"new")
    assert path.read_bytes() == b"new" and [p.name for p in path.parent.iterdir()] == ["results.json"]


def test_resume_refuses_changed_candidates_and_extra_options(runs, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(runs / "whole", copy)
    (copy / "results.json").unlink()  # cut off before its results: a run to go on with
    config = json.loads((copy / "config.json").read_text())
    functions = tmp_path / "functions"
    shutil.copytree(config["functions"], functions)
    (functions / "alive_bonus.py").write_text((functions / "alive_bonus.py").read_text() + "\n# edited\n")
    (copy / "config.json").write_text(json.dumps({**config, "functions": str(functions)}))
    assert main(["eval", "--resume", str(copy)]) == 2
    assert "alive_bonus.py changed since the run started" in capsys.readouterr().err
    assert main(["eval", "--resume", str(copy), "--task", "Cartpole"]) == 2
    assert "give no --task" in capsys.readouterr().err
    assert main(["eval", "--resume", str(tmp_path / "nothing")]) == 2
    assert "is not an `envcoder eval` run directory" in capsys.readouterr().err


def test_ctrl_c_during_training_checkpoints_the_next_iteration_and_resumes_from_it(runs, tmp_path, monkeypatch,
                                                                                   capsys):
    """The first Ctrl-C while training asks for a checkpoint after the iteration under way (the run's own
    checkpoints are off here: without it, a Ctrl-C would lose all the work); the run then ends with 130, and
    resuming it gives the uninterrupted run's results. The Ctrl-C comes from the main thread as the progress counts
    iteration 2 (from the metrics' writer thread it came late on a loaded machine, once after the last iteration)."""
    import signal

    from envcoder.runs.background import LoggedProgress

    functions = Path(json.loads((runs / "whole" / "config.json").read_text())["functions"])
    update = LoggedProgress.update

    def ctrl_c_at_iteration_2(self, task=None, advance=0, **fields):
        update(self, task, advance, **fields)
        if advance and self.completed == 3:  # iterations 0, 1 and 2 recorded
            os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        with pytest.MonkeyPatch.context() as killing:
            killing.setattr(LoggedProgress, "update", ctrl_c_at_iteration_2)
            assert main(eval_args(functions, tmp_path / "r", "ppo.save_frequency=0")) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    done = json.loads((tmp_path / "r" / "checkpoints" / "progress.json").read_text())["iteration"]
    printed = " ".join(capsys.readouterr().out.split())
    assert 3 <= done < ITERATIONS and f"Ctrl-C: stopped after training iteration {done} of {ITERATIONS}, checkpointed" in printed
    assert main(["eval", "--resume", str(tmp_path / "r")]) == 0
    a = json.loads((runs / "whole" / "results.json").read_text())
    b = json.loads((tmp_path / "r" / "results.json").read_text())
    assert a["ranking"] == b["ranking"] and a["groups"] == b["groups"]
    assert b["timings"]["resumed_after_iteration"] == done


def test_a_ctrl_c_that_python_swallows_is_raised_again_where_the_run_may_stop():
    """A KeyboardInterrupt raised inside a garbage collector's callback (JAX's, while it traces) is printed as
    "Exception ignored" and lost, and the run went on; the run's handler remembers it and raises it again at the
    next point where training may stop."""
    import signal

    from envcoder.runs.background import DeferredInterrupt

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        with DeferredInterrupt(lambda: False) as interrupt:
            try:  # where a gc callback would swallow it
                os.kill(os.getpid(), signal.SIGINT)
                sum(range(1000))
            except KeyboardInterrupt:
                pass
            with pytest.raises(KeyboardInterrupt):
                interrupt.check()
    finally:
        signal.signal(signal.SIGINT, previous)


def test_resume_of_a_finished_run_shows_its_results_and_trains_nothing(runs, tmp_path, capsys):
    copy = tmp_path / "finished"
    shutil.copytree(runs / "whole", copy)
    before = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()}
    capsys.readouterr()
    assert main(["eval", "--resume", str(copy)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{copy} is finished: nothing to resume. Its results:" in out
    assert "good_upright" in out and "alive_bonus" in out and "compiling" not in out and "resuming" not in out
    assert {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()} == before  # nothing written
    from envcoder.atomic import file_mode

    modes = {oct(p.stat().st_mode & 0o777) for p in (runs / "whole").rglob("*") if p.is_file()}
    assert modes == {oct(file_mode())}  # every file of a run as `open` makes one, not 0o600 for some


@pytest.mark.slow  # 45 s
def test_score_to_win_freezes_each_solved_candidate_and_stops_when_all_are(runs, capsys):
    """The threshold is picked from the uninterrupted run's fitness so that every group reaches it, at
    different iterations, before the last: each group solves at the first iteration its fitness reaches it,
    its rows until then are the uninterrupted run's (also while others are frozen), it is not updated
    afterwards, and the run stops early."""
    reference = list(csv.DictReader((runs / "whole" / "metrics.csv").open()))
    groups = sorted({(r["candidate"], r["seed"]) for r in reference})
    fitness = {g: [(int(r["iteration"]), float(r["task_fitness"])) for r in reference
                   if (r["candidate"], r["seed"]) == g and r["task_fitness"]] for g in groups}

    def solved_at(threshold):
        return {g: min((i for i, value in f if value >= threshold), default=ITERATIONS) for g, f in fitness.items()}

    def spread(threshold):
        at = solved_at(threshold).values()
        return max(at) < ITERATIONS - 1, len(set(at))
    threshold = max(sorted({value for f in fitness.values() for _, value in f}), key=spread)
    expected = solved_at(threshold)
    assert spread(threshold) >= (True, 2)  # all solve before the last iteration, not all at once

    out = runs / "solved"
    config = runs / "whole" / "config.json"
    functions = json.loads(config.read_text())["functions"]
    assert main(eval_args(functions, out, f"ppo.score_to_win={threshold!r}")) == 0
    printed = capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    solved = {(g["candidate"], str(g["seed"])): g["solved_at_iteration"] for g in results["groups"]}
    assert solved == expected
    assert results["timings"]["stopped_after_iteration"] == max(expected.values()) + 1
    assert f"every candidate is solved or diverged: stopping after {max(expected.values()) + 1} of" in printed
    assert printed.count("solved good_upright#") + printed.count("solved alive_bonus#") == 4

    by_key = {(r["iteration"], r["candidate"], r["seed"]): r for r in metrics(runs / "whole")}
    for row in metrics(out):
        g, iteration = (row["candidate"], row["seed"]), int(row["iteration"])
        if iteration < expected[g]:  # the frozen groups' programs beside it round otherwise in the 7th digit
            assert _numbers(row) == pytest.approx(_numbers(by_key[(row["iteration"], *g)]), rel=1e-5, abs=1e-7)
        else:  # solved: the policy that reached the threshold is kept, no update is applied
            assert row["solved"] == "1.0" and row["actor_loss"] == "" and row["kl"] == ""

    # The driver had dispatched one more iteration before it read that every group was solved; that iteration
    # changed nothing: the run equals one that was given exactly that many iterations.
    exact = runs / "solved_exact"
    stopped = results["timings"]["stopped_after_iteration"]
    assert main(eval_args(functions, exact, f"ppo.score_to_win={threshold!r}")[:-4] + [
        "--iterations", str(stopped), "--seeds", "2", "--out", str(exact)]) == 0
    assert json.loads((exact / "results.json").read_text())["groups"] == results["groups"]
    with np.load(out / "checkpoints" / "train_state.npz") as x, np.load(exact / "checkpoints" / "train_state.npz") as y:
        assert all(np.array_equal(x[k], y[k]) for k in x.files)


def test_background_writer_keeps_order_and_reports_the_first_failure():
    from envcoder.runs.background import BackgroundWriter

    done = []
    writer = BackgroundWriter(max_pending=2)
    for i in range(20):
        writer.submit(lambda i=i: done.append(i))
    writer.close()
    assert done == list(range(20))

    def fail():
        raise OSError("disk full")
    writer, done = BackgroundWriter(), []
    writer.submit(lambda: done.append(1))
    writer.submit(fail)
    writer.submit(lambda: done.append(2))  # after a failure nothing more is written
    with pytest.raises(OSError, match="disk full"):
        writer.close()
    assert done == [1]


def assert_same_run(whole: Path, other: Path, context: str = "") -> None:
    a, b = json.loads((whole / "results.json").read_text()), json.loads((other / "results.json").read_text())
    assert a["ranking"] == b["ranking"] and a["groups"] == b["groups"], context
    assert metrics(whole) == metrics(other), context
    with np.load(whole / "checkpoints" / "train_state.npz") as x, np.load(other / "checkpoints" / "train_state.npz") as y:
        assert x.files == y.files and all(np.array_equal(x[k], y[k]) for k in x.files), context


@pytest.mark.slow  # 55 s: five processes
def test_kill_9_at_each_point_then_resume_equals_the_uninterrupted_run(runs, tmp_path):
    out = tmp_path / "faults"
    resume = ["eval", "--resume", str(out)]
    checkpoints = out / "checkpoints"

    def progress():
        with np.load(checkpoints / "train_state.npz") as data:
            return json.loads(str(data["progress"]))["iteration"]

    run_killed("first-metrics", eval_args(runs / "functions", out))  # before the first checkpoint
    assert (out / "config.json").exists() and not ckpt.has_train_state(checkpoints)
    run_killed("state-before-progress", resume)  # the first state (iteration 2) written, no progress.json yet
    assert progress() == 2 and not (checkpoints / "progress.json").exists()
    run_killed("half-checkpoint", resume)  # the state of iteration 4 written, that of 6 half written
    assert progress() == 4 and (checkpoints / "train_state.tmp").exists()
    run_killed("evaluation", resume)  # training done, the evaluation's results not written
    assert progress() == ITERATIONS and not (out / "results.json").exists()
    assert main(resume) == 0
    assert_same_run(runs / "whole", out)


@pytest.mark.slow
def test_kill_9_at_a_random_point_then_resume_equals_the_uninterrupted_run(runs, tmp_path):
    seed = random.randrange(2**31)
    out = tmp_path / "random"
    if run_killed(f"random:{seed}", eval_args(runs / "functions", out), may_finish=True):
        assert main(["eval", "--resume", str(out)]) == 0
    assert_same_run(runs / "whole", out, f"fault_harness.py random:{seed}")


def test_a_damaged_checkpoint_is_a_clear_error_not_a_wrong_result(runs, tmp_path, capsys):
    run = tmp_path / "damaged"
    shutil.copytree(runs / "whole", run)
    (run / "results.json").unlink()
    state = run / "checkpoints" / "train_state.npz"
    state.write_bytes(state.read_bytes()[:state.stat().st_size // 2])
    assert main(["eval", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{state} is damaged and cannot be resumed from" in err and "Traceback" not in err
    assert not (run / "results.json").exists()


def test_a_run_whose_time_is_up_stops_after_the_iteration_under_way_and_ranks_what_it_trained(runs, tmp_path):
    """`run_evaluation(..., until=T)` (`envcoder auto --budget`): past `T`, training stops after the iteration under
    way, which is checkpointed, and every policy is evaluated and ranked as it is. With `T` already past, the run
    trains one iteration of its six and ends as the same run of one iteration does (CPU is deterministic), its
    timings saying why it stopped."""
    import io
    import time

    from rich.console import Console

    from envcoder.runs.eval_settings import settings_from_run
    from envcoder.runs.evaluation import run_evaluation

    whole = settings_from_run(runs / "whole")
    out = io.StringIO()
    cut = run_evaluation(dataclasses.replace(whole, out=tmp_path / "cut"), Console(file=out), until=time.time() - 1)
    one = run_evaluation(dataclasses.replace(whole, out=tmp_path / "one", train_iterations=1), Console(file=io.StringIO()))
    assert cut.timings["out_of_time"] and cut.timings["stopped_after_iteration"] == 1
    printed = " ".join(out.getvalue().split())
    assert "the time given to this run is up: stopping after 1 of 6 training iterations" in printed
    assert json.loads((tmp_path / "cut" / "checkpoints" / "progress.json").read_text())["iteration"] == 1
    assert [(g.candidate, g.seed, g.task_fitness) for g in cut.groups] == [
        (g.candidate, g.seed, g.task_fitness) for g in one.groups]
    assert [r.name for r in cut.ranking] == [r.name for r in one.ranking] and "out_of_time" not in one.timings


def test_a_checkpoint_or_results_file_that_is_not_this_run_s_names_itself(runs, tmp_path, capsys):
    """A checkpoint whose progress says iteration 999 or -40 (a finished-looking run that trained nothing, or 160
    iterations, before) and a results.json that does not parse are refused with one line naming the file."""
    import numpy as np

    for iteration in (999, -40):
        run = tmp_path / f"progress_{iteration}"
        shutil.copytree(runs / "whole", run)
        (run / "results.json").unlink()
        state = run / "checkpoints" / "train_state.npz"
        with np.load(state) as data:
            arrays = {k: data[k] for k in data.files}
        arrays["progress"] = np.array(json.dumps({**json.loads(str(arrays["progress"])), "iteration": iteration}))
        np.savez(state, **arrays)
        assert main(["eval", "--resume", str(run)]) == 2
        err = capsys.readouterr().err
        assert f"train_state.npz says it was saved after iteration {iteration}, this run has {ITERATIONS}" in err
        assert not (run / "results.json").exists()
    run = tmp_path / "results_cut"
    shutil.copytree(runs / "whole", run)
    (run / "results.json").write_text('{"task": "Cartpole", "ranking": [')
    assert main(["eval", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"{run / 'results.json'} is damaged (JSONDecodeError" in err and len(err.strip().splitlines()) == 1


def test_a_run_directory_that_another_process_writes_is_refused(runs, tmp_path):
    """`eval --resume` of a run that is still training: both trained the same directory before."""
    run = tmp_path / "in_use"
    shutil.copytree(runs / "whole", run)
    (run / "results.json").unlink()
    RunDirectory(run, resume=True)  # this process writes it now
    done = subprocess.run([sys.executable, "-m", "envcoder.cli", "eval", "--resume", str(run)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert f"run directory {str(run)!r} is in use by another envcoder process (pid {os.getpid()})" in done.stderr


def test_a_damaged_config_or_hang_record_names_itself(runs, tmp_path, capsys):
    """config.json and hung.json cut short: one line that names the file, status 2 (a JSONDecodeError's text that
    named no file before)."""
    for name in ("config.json", "hung.json"):
        run = tmp_path / name.split(".")[0]
        shutil.copytree(runs / "whole", run)
        (run / "results.json").unlink()
        (run / name).write_text('{"task": ')
        assert main(["eval", "--resume", str(run)]) == 2
        err = capsys.readouterr().err
        assert f"{run / name} is damaged (" in err and len(err.strip().splitlines()) == 1, err
