"""Many devices: the group axis sharded over CPU devices (forced with XLA_FLAGS in child processes) equals the
single-device run group by group, checkpoints move between device counts, and a two-process (multi-host) `eval`
equals a one-process one."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from conftest import BUNDLED, TESTS
from envcoder.cli import main
from envcoder.candidates import load_candidate
from envcoder.env.grouping import GroupPlan
from envcoder.tasks import get_task



@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    out = tmp_path_factory.mktemp("sharded") / "runs.npz"
    subprocess.run([sys.executable, str(TESTS / "sharded_run.py"), str(out)], check=True, timeout=1200)
    with np.load(out) as data:
        return {k: data[k] for k in data.files}


def leaves(run: dict, prefix: str) -> list[np.ndarray]:
    return [run[f"{prefix}/{i}"] for i in range(sum(k.startswith(prefix + "/") for k in run))]


def assert_same_state(a: list, b: list):
    """Equal to float32 summation order: the sharded program has other shapes, so XLA may sum in another order, and
    two iterations of Adam grow those last-bit differences to a few 1e-5 of a weight (seen: 1.9e-6 on one weight of
    0.067); a group trained on another group's data would differ everywhere."""
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x.shape == y.shape
        if x.dtype.kind == "f":
            np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
        else:
            np.testing.assert_array_equal(x, y)


@pytest.mark.slow
def test_a_population_step_over_several_devices_equals_one_device(sharded):
    """Population-based training (`envcoder auto`'s default search) over sharded groups: the losers take the same
    winners' states and constants as on one device."""
    assert str(sharded["lineage_1"]) == str(sharded["lineage_5"]) and "from" in str(sharded["lineage_1"])
    assert_same_state(leaves(sharded, "population_1"), leaves(sharded, "population_5"))
    before, after = leaves(sharded, "state_5"), leaves(sharded, "population_5")
    assert any(not np.array_equal(x, y) for x, y in zip(before, after))  # some group took over another


@pytest.mark.slow
def test_sharded_run_equals_single_device_group_by_group(sharded):
    assert (sharded["order"] < 0).sum() == 1, "the run should pad one inert row"
    assert_same_state(leaves(sharded, "state_1"), leaves(sharded, "state_5"))
    metrics = [k.split("/", 1) for k in sharded if k.startswith("metrics_1_")]
    assert len(metrics) > 20
    for head, name in metrics:
        np.testing.assert_allclose(sharded[f"{head}/{name}"], sharded[f"{head.replace('_1_', '_5_')}/{name}"],
                                   rtol=1e-4, atol=1e-5, err_msg=name)
        assert sharded[f"{head}/{name}"].shape == (len(sharded["labels"]),)  # inert rows are never reported
    for name in ("task_fitness", "episode_length", "shaped_return"):  # episodes of hundreds of steps grow those
        np.testing.assert_allclose(sharded[f"eval_1/{name}"], sharded[f"eval_5/{name}"], rtol=1e-3, atol=1e-4)
    # The NaN candidate diverged on its own rows only, and the others trained.
    diverged = sharded["metrics_5_1/diverged"]
    labels = list(sharded["labels"])
    assert [labels[g] for g in np.flatnonzero(diverged)] == ["nan_later#0", "nan_later#1"]


@pytest.mark.slow
def test_checkpoints_move_between_device_counts(sharded):
    assert_same_state(leaves(sharded, "hop_5_1"), leaves(sharded, "state_1"))
    assert_same_state(leaves(sharded, "hop_1_5"), leaves(sharded, "state_5"))


def test_layout_deals_groups_round_robin_and_maps_every_class_row():
    task = get_task("Cartpole")
    files = sorted((BUNDLED / "cartpole").glob("*.py"))
    candidates = [load_candidate(f, ("compute_reward",)) for f in files]
    plan = GroupPlan(task, candidates, seeds=(0, 1, 2))  # 4 reward classes × 3 seeds = 12 groups
    layout = plan.layout(5)
    assert layout.per_device == 3 and layout.order.shape == (15,) and layout.inert.sum() == 3
    assert sorted(layout.order[~layout.inert]) == list(range(12))
    np.testing.assert_array_equal(layout.order[layout.position], np.arange(12))
    rewards = plan.classes["compute_reward"]
    tables = layout.local["compute_reward"]
    for d in range(5):
        rows = layout.order.reshape(5, 3)[d]
        slots = np.concatenate([index[d] for index in tables["rows"]])
        for j, g in enumerate(rows):
            if g < 0:
                continue
            # Local row j's output comes from the slot that computed row j, with its own class's function.
            slot = tables["inverse"][d, j]
            assert slots[slot] == j
            owner = np.searchsorted(np.cumsum([index.shape[1] for index in tables["rows"]]), slot, side="right")
            assert g in rewards[owner].indices


def test_device_count_errors_are_one_clear_line(tmp_path, capsys):
    assert main(["eval", "--task", "Cartpole", "--devices", "3", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--devices 3: JAX sees 1 device(s) here" in err and "from 1 to 1" in err
    assert main(["eval", "--task", "Cartpole", "--num-processes", "2", "--out", str(tmp_path / "p")]) == 2
    assert "give --coordinator too" in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_write_one_run_that_equals_one_process(tmp_path):
    """A multi-host run: two processes of two CPU devices each (gloo collectives), against one process on one
    device. Only process 0 writes the run directory."""
    common = ["eval", "--task", "Cartpole", "--envs-per-candidate", "8", "--iterations", "2", "--seeds", "2",
              "--no-tensorboard", "ppo.horizon_length=8", "ppo.mini_epochs=1", "ppo.units=[16,16]"]
    code = "import sys; from envcoder.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    port = free_port()
    shared = tmp_path / "two"
    processes = [subprocess.Popen([sys.executable, "-c", code, *common, "--out", str(shared), "--coordinator",
                                   f"localhost:{port}", "--num-processes", "2", "--process-id", str(i)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for i in range(2)]
    outputs = [p.communicate(timeout=900)[0] for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs
    assert "4 × cpu" in outputs[0].lower()
    assert outputs[1].strip() == "" or "Ranking" not in outputs[1]  # process 1 prints no report
    single = tmp_path / "one"
    status = subprocess.run([sys.executable, "-c", code, *common, "--out", str(single), "--devices", "1"],
                            env=env, capture_output=True, text=True, timeout=900)
    assert status.returncode == 0, status.stdout + status.stderr
    two, one = (json.loads((d / "results.json").read_text()) for d in (shared, single))
    assert two["timings"]["devices"] == 4 and one["timings"]["devices"] == 1
    assert [(g["candidate"], g["seed"]) for g in two["groups"]] == [(g["candidate"], g["seed"]) for g in one["groups"]]
    for a, b in zip(two["groups"], one["groups"]):
        for key in ("task_fitness", "shaped_return", "episode_length", "training_task_fitness"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-4), key
    assert (shared / "metrics.csv").read_text().count("\n") == (single / "metrics.csv").read_text().count("\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]


def test_a_run_directory_that_does_not_write_creates_nothing(tmp_path):
    """The other processes of a multi-host run read the run directory and write nothing to it."""
    from envcoder.runs.directory import RunDirectory
    run = RunDirectory(tmp_path / "run", writes=False)
    run.write_config({"task": "Cartpole"})
    run.write_failures([])
    run.append_metrics(0, ["a#0"], {"task_fitness": np.array([1.0])}, {"env_steps_per_s": 1.0})
    run.write_results({"ranking": []})
    run.keep_metrics_before(0)
    run.close()
    assert not (tmp_path / "run").exists()
    # Process 0 created it: a non-writing process opens it without the "already exists" refusal.
    RunDirectory(tmp_path / "run").write_config({"task": "Cartpole"})
    RunDirectory(tmp_path / "run", writes=False)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [".lock", "candidates", "config.json"]  # the writer's lock
