"""A task of one's own: a Python file and its MJCF model (own_task/hopper), or a package's entry point, used by every
command; `envcoder tasks --check`; sample states made from the task and made again when it changes."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import ROOT
from envcoder.cli import main

HOPPER = ROOT / "own_task" / "hopper"


@pytest.fixture
def hopper(tmp_path):
    """A copy of the guide's hopper task in a folder of its own: its file, its model and its rewards."""
    folder = tmp_path / "my_robot"
    shutil.copytree(HOPPER, folder)
    return folder


def test_a_task_file_is_found_by_its_path_and_named_by_it_for_other_processes(hopper, capsys):
    from envcoder.tasks import get_task, load_task_file

    task = get_task(str(hopper / "hopper.py"))
    assert task.name == "Hopper" and task.key == str((hopper / "hopper.py").resolve())
    assert task.model_file == hopper / "hopper.xml" and task.training_settings()["ppo"]["max_epochs"] == 100
    assert get_task("hopper") is task and load_task_file(hopper / "hopper.py") is task  # by its name in this process
    assert main(["tasks", "--task", str(hopper / "hopper.py")]) == 0
    assert "- height [E] (m): the torso's height above the floor" in capsys.readouterr().out
    (hopper / "two.py").write_text("from envcoder.tasks import Task\nA = B = None\n")
    assert main(["tasks", "--task", str(hopper / "two.py")]) == 2
    assert "defines no Task: name the one to use TASK" in capsys.readouterr().err
    (hopper / "named_cartpole.py").write_text((hopper / "hopper.py").read_text().replace('name="Hopper"',
                                                                                         'name="Cartpole"'))
    assert main(["tasks", "--task", str(hopper / "named_cartpole.py")]) == 2
    assert "names its task 'Cartpole', a registered task's name" in capsys.readouterr().err
    (hopper / "broken.py").write_text("import no_such_module\n")
    assert main(["tasks", "--task", str(hopper / "broken.py")]) == 2
    assert "could not be imported: ModuleNotFoundError: No module named 'no_such_module'" in capsys.readouterr().err


def test_tasks_check_names_each_problem_of_a_task_being_written(hopper, capsys):
    """The hopper passes; a copy with a state field declared at the wrong size, a torque of two motors for three,
    a fitness that reads a field the state lacks and a model whose torso starts in the floor: a line for each, naming
    the field or the function, status 2."""
    assert main(["tasks", "--check", str(hopper / "hopper.py")]) == 0
    assert "task Hopper is ready" in capsys.readouterr().out
    text = (hopper / "hopper.py").read_text()
    for old, new in (('"qpos": StateField("[E, 6]"', '"qpos": StateField("[E, 7]"'),
                     ("return MOTOR * action", "return MOTOR * action[:, :2]"),
                     ('return state["qvel"][:, 0]\n\n\nTASK', 'return state["root_vel"][:, 0]\n\n\nTASK'),
                     ('model_file="hopper.xml"', 'model_file="sunk.xml"')):
        assert old in text, old
        text = text.replace(old, new)
    (hopper / "bad.py").write_text(text)
    (hopper / "sunk.xml").write_text((hopper / "hopper.xml").read_text().replace('pos="0 0 1.25"', 'pos="0 0 0.9"'))
    assert main(["tasks", "--check", str(hopper / "bad.py")]) == 2
    err = capsys.readouterr().err
    assert "4 problem(s) in task Hopper" in err, err
    for line in ("state field qpos: declared [E, 7], build_state gives [E, 6]",
                 "compute_torque: returns [4, 2] for 4 environments; the model has 3 actuator(s): return [E, 3]",
                 "sample_initial_state: a reset puts geoms into each other, deepest first: floor and foot",
                 "fitness forward_speed: reads 'root_vel', which the state lacks"):
        assert line in err, (line, err)
    # Its advice, followed, clears it: the model's torso started as much higher as it says.
    higher = int(err.split("start the robot at least ")[1].split(" cm higher")[0])
    assert "floor and shin" in err and higher > 30
    (hopper / "sunk.xml").write_text((hopper / "hopper.xml").read_text().replace(
        'pos="0 0 1.25"', f'pos="0 0 {0.9 + higher / 100:.2f}"'))
    assert main(["tasks", "--check", str(hopper / "bad.py")]) == 2
    assert "3 problem(s)" in (err := capsys.readouterr().err) and "sample_initial_state" not in err, err
    (hopper / "nomodel.py").write_text(text.replace('model_file="sunk.xml"', 'model_file="missing.xml"'))
    assert main(["tasks", "--check", str(hopper / "nomodel.py")]) == 2
    assert "model_file" in (err := capsys.readouterr().err) and "missing.xml: does not load" in err, err


def test_sample_states_are_made_from_the_task_and_made_again_when_its_model_changes(hopper, tmp_path, monkeypatch):
    from envcoder import compile_cache
    from envcoder.candidates.samples import states_file, task_states
    from envcoder.tasks import load_task_file

    monkeypatch.setattr(compile_cache, "_CACHE_DIR", tmp_path / "cache")
    task = load_task_file(hopper / "hopper.py")
    first = states_file(task)
    states = task_states(task)
    assert first.exists() and states["qpos"].shape[1:] == (6,) and np.all(states["height"] > 0.5)
    assert task_states(task, make=False)["qpos"].tolist() == states["qpos"].tolist()  # read back, not made
    model = (hopper / "hopper.xml").read_text()
    (hopper / "hopper.xml").write_text(model.replace('pos="0 0 1.25"', 'pos="0 0 1.3"'))
    assert states_file(task) != first and task_states(task, make=False) is None  # stale: never used
    again = task_states(task)
    assert states_file(task).exists() and not np.allclose(again["height"], states["height"])


def test_a_package_registers_tasks_through_the_entry_point_group(hopper, tmp_path, monkeypatch):
    """A distribution on the path whose entry point `envcoder.tasks` names its Task: `--task NAME` finds it, beside
    envcoder's own (found the same way)."""
    from envcoder.tasks import get_task, registered

    site = tmp_path / "site"
    (site / "my_robots-0.1.dist-info").mkdir(parents=True)
    (site / "my_robots-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: my-robots\nVersion: 0.1\n")
    (site / "my_robots-0.1.dist-info" / "entry_points.txt").write_text(
        "[envcoder.tasks]\nPackagedHopper = my_robots:TASK\n")
    (site / "my_robots.py").write_text(textwrap.dedent(f"""\
        import dataclasses
        from envcoder.tasks import load_task_file
        TASK = dataclasses.replace(load_task_file({str(hopper / 'hopper.py')!r}), name="PackagedHopper")
        """))
    monkeypatch.syspath_prepend(str(site))
    names = registered()
    assert list(names)[:5] == ["Cartpole", "CartpoleDiscrete", "Ant", "Anymal", "Humanoid"]
    assert names["PackagedHopper"] == "my_robots:TASK" and get_task("packagedhopper").name == "PackagedHopper"


@pytest.mark.slow  # about 2 minutes: a hopper trained, played and searched on the CPU
def test_a_task_file_runs_through_eval_play_report_and_auto_from_another_folder(hopper, tmp_path):
    """The guide's example as a user runs it, in a fresh process from another folder: a ranked run of its three
    rewards and the task's own shaping, `play` to a GIF that the report shows, and `auto --iterations 1`."""
    env = {**os.environ, "XLA_FLAGS": ""}  # as a user runs it: the suite's unoptimized compiles step MJX 10× slower

    def envcoder(*args):
        done = subprocess.run([sys.executable, "-c", "from envcoder.cli import run; run()", *map(str, args)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout
    task, rewards = hopper / "hopper.py", hopper / "rewards"
    printed = envcoder("eval", "--task", task, "--functions", rewards, "--iterations", "3", "--envs-per-candidate",
                       "8", "--task-default", "--out", "run")
    assert "Hopper: 4 candidates" in printed
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert sorted(r["name"] for r in results["ranking"]) == ["alive_forward", "forward", "task_default",
                                                            "upright_forward"]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["task"] == str(task.resolve())
    envcoder("play", "run", "--candidate", "forward", "--episodes", "1")  # RUN, or --run RUN: either works
    envcoder("report", "--run", "run")
    envcoder("auto", "--task", task, "--initial", rewards, "--iterations", "1", "--candidates-per-iteration", "1",
             "--copies", "2", "--envs-per-candidate", "8", "--train-iterations", "3", "--final-seeds", "2",
             "--final-max-seeds", "2", "--out", "search")
    assert json.loads((tmp_path / "search" / "summary.json").read_text())["best"] is not None
    assert "report.html" in envcoder("report", "search")  # an auto run: its final evaluation's
