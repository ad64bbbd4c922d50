"""`envcoder eval` end to end on the bundled Cartpole candidates, and each bad-input error."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import BUNDLED
import envcoder
from envcoder.cli import main
from envcoder.runs import checkpoint

@pytest.mark.parametrize("argv, message", [
    (["eval", "--task", "Cartpole", "--envs-per-candidate", "0"], "expected a positive integer, got 0"),
    (["eval", "--task", "Cartpole", "--iterations", "ten"], "expected a positive integer, got 'ten'"),
    (["eval", "--task", "Cartpole", "--shaper-types", "compute_rewards"], "unknown shaper type 'compute_rewards'"),
    (["eval", "--task", "Cartpole", "--bogus"], "unrecognized arguments: --bogus"),
    (["eval", "--task", "Cartpole", "--shaper-types", "compute_reward", "ppo.gamma=0.9"],
     "'ppo.gamma=0.9' is a setting override, not a shaper type; put overrides before --shaper-types"),
])
def test_bad_flags_give_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    if exit_info.value.code is None:
        pytest.fail("expected a non-zero exit")
    err = capsys.readouterr().err
    assert exit_info.value.code != 0 and message in err and len(err.strip().splitlines()) == 1, err


def test_missing_task_says_what_is_needed(capsys):
    assert main(["eval"]) == 2 and main(["auto"]) == 2
    assert capsys.readouterr().err.count("--task is required (or --resume RUN)") == 2


def test_unknown_task_exit_status_and_a_guess(capsys):
    assert main(["eval", "--task", "Humanoidd"]) == 2
    assert capsys.readouterr().err.startswith("envcoder eval: error: unknown task 'Humanoidd'; did you mean "
                                              "'Humanoid'? known tasks:")
    assert main(["tasks", "--task", "antt"]) == 2 and "did you mean 'Ant'?" in capsys.readouterr().err
    assert main(["eval", "--task", "qqqq"]) == 2 and "did you mean" not in capsys.readouterr().err


def test_version(capsys):
    assert main(["--version"]) == 0 and capsys.readouterr().out.strip() == f"envcoder {envcoder.__version__}"
    with pytest.raises(SystemExit) as exit_info:  # with a command too: argparse's answer
        main(["--version", "tasks"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.strip() == f"envcoder {envcoder.__version__}"


@pytest.mark.parametrize("extra, message", [
    (["ppo.learnin_rate=0.1"], "command-line override: unknown PPO setting 'learnin_rate'; did you mean "
                               "'learning_rate'?"),
    (["ppo.horizon_length=2.5"], "command-line override: horizon_length expects int, got 2.5 (float)"),
    (["learning_rate=0.1"], "override 'learning_rate=0.1': expected ppo.NAME=VALUE"),
    (["--config", "missing.yaml"], "cannot read config file 'missing.yaml'"),
])
def test_bad_settings_are_refused_before_anything_runs(tmp_path, extra, message, capsys):
    assert main(["eval", "--task", "Cartpole", "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def test_a_run_too_large_for_memory_is_refused_in_one_line_with_what_fits(tmp_path, capsys):
    """`--seeds 100000000` would list a hundred million seeds and then the kernel's out-of-memory killer would end it:
    refused before anything is allocated or written, with the sizes and the most seeds that fit; the seeds it names
    pass the same check. `auto` is checked the same way, its final evaluation too."""
    from envcoder.runs.evaluation import EvalSettings
    from envcoder.runs.job import Plan

    out = tmp_path / "o"
    assert main(["eval", "--task", "Cartpole", "--seeds", "100000000", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and not out.exists(), err
    assert "4 candidate(s) × 100,000,000 seed(s) × 256 environments need at least" in err, err
    fit = int(err.split("at most ")[1].split(" seed(s) fit")[0].replace(",", ""))
    assert 1 <= fit < 100_000_000
    Plan.of(EvalSettings(task="Cartpole", functions=BUNDLED / "cartpole", out=out)).check_sizes(seeds=fit // 2)
    assert main(["eval", "--task", "Cartpole", "--seeds", "1000", "--envs-per-candidate", "1000000",
                 "--out", str(out)]) == 2  # too many environments: the most that fit at these seeds
    err = capsys.readouterr().err
    envs = int(err.split("; or at most ")[1].split(" environments per candidate")[0].replace(",", ""))
    Plan.of(EvalSettings(task="Cartpole", functions=BUNDLED / "cartpole", out=out, envs_per_candidate=envs // 2)
            ).check_sizes(seeds=1000)
    assert main(["auto", "--task", "Cartpole", "--final-seeds", "100000000", "--final-max-seeds", "100000000",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("envcoder auto: error: the final evaluation's 3 candidate(s) × 100,000,000 seed(s)"), err
    assert len(err.strip().splitlines()) == 1 and not out.exists(), err


def test_an_out_that_cannot_be_written_and_functions_of_another_kind_are_one_line(tmp_path, capsys):
    (tmp_path / "notes.md").write_text("not a folder\n")
    for command in ("eval", "auto"):
        assert main([command, "--task", "Cartpole", "--out", str(tmp_path / "notes.md" / "run1")]) == 2
        err = capsys.readouterr().err
        assert f"cannot write the run directory '{tmp_path / 'notes.md' / 'run1'}': Not a directory; choose an " \
               "--out in a folder you can write to" in err and len(err.strip().splitlines()) == 1, err
    assert main(["eval", "--task", "Cartpole", "--functions", str(tmp_path / "notes.md"),
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "is neither a folder of candidate files nor a .py or .txt file" in err and not (tmp_path / "o").exists()


def test_messages_wrap_at_words_on_a_terminal_and_stay_one_line_in_a_log():
    """At 60 columns a message broke inside a word ("1024 environmen / ts"): on a terminal it wraps at spaces; into a
    file it stays one line."""
    import io

    from envcoder.text import console

    message = "Cartpole: 4 candidates × 1 seed × 256 envs = 1024 environments in one process on cpu, jax physics"
    terminal, log = io.StringIO(), io.StringIO()
    console(file=terminal, width=60, force_terminal=True, color_system=None).print(message, highlight=False)
    console(file=log, width=60).print(message, highlight=False)
    words = message.split()
    lines = terminal.getvalue().splitlines()
    assert len(lines) == 2 and all(line.split() == words[:len(line.split())] or set(line.split()) <= set(words)
                                   for line in lines), lines
    assert log.getvalue() == message + "\n"


def test_unknown_fitness_names_the_task_s_definitions(tmp_path, capsys):
    assert main(["eval", "--task", "Anymal", "--fitness", "speed", "--out", str(tmp_path / "o")]) == 2
    assert "task Anymal has no fitness 'speed'; choose from tracking, robust_tracking, forward_speed, isaac_success" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_tasks_describes_fitness_definitions_helpers_and_ppo_settings(capsys):
    assert main(["tasks", "--task", "Anymal"]) == 0
    out = capsys.readouterr().out
    for text in ("- contact_forces [E, 4, 3] (N)", "- tracking: mean linear-velocity tracking error",
                 "- forward_speed:", "def compute_torque(action, state):", "- heading_and_up(root_states, targets)",
                 "- horizon_length: 24"):
        assert text in out, text


def test_tasks_lists_the_field_s_budget_and_eval_refuses_a_preset_the_task_lacks(tmp_path, capsys):
    assert main(["tasks", "--task", "Ant"]) == 0
    out = capsys.readouterr().out
    for text in ("## Preset `isaac` (`--preset isaac`)", "IsaacGymEnvs' own Ant training", "- ppo.max_epochs: 500",
                 "- envs_per_candidate: 4096", "- ppo.separate: False", "- mixed_precision: True: rl_games trains"):
        assert text in out, text
    assert main(["eval", "--task", "CartpoleDiscrete", "--preset", "isaac", "--out", str(tmp_path / "o")]) == 2
    assert "--preset isaac: task CartpoleDiscrete has no such preset (its presets: none;" in capsys.readouterr().err
    assert main(["eval", "--task", "Cartpole", "--preset", "isaak", "--out", str(tmp_path / "o")]) == 2
    assert "--preset isaak: task Cartpole has no such preset (its presets: isaac;" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_empty_candidate_directory(tmp_path, capsys):
    assert main(["eval", "--task", "Cartpole", "--functions", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "has no .py or .txt candidate files" in capsys.readouterr().err


def test_all_candidates_invalid(tmp_path, capsys):
    (tmp_path / "bad.py").write_text("import os\n")
    assert main(["eval", "--task", "Cartpole", "--functions", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    captured = capsys.readouterr()
    assert "no valid candidates" in captured.err and "import of 'os' is not allowed" in captured.out
    assert not (tmp_path / "o").exists()  # a run that trained nothing leaves no run directory behind


def test_shaper_types_underscore_spelling_and_tasks_listing(capsys):
    from envcoder.cli import build_parser
    args = build_parser().parse_args(["eval", "--task", "Ant", "--shaper_types", "compute_reward", "compute_action"])
    assert args.shaper_types == ["compute_reward", "compute_torque"]
    assert main(["tasks"]) == 0
    listing = capsys.readouterr().out
    assert "Cartpole" in listing and max(len(line) for line in listing.splitlines()) <= 100
    assert main(["tasks", "--task", "ant"]) == 0
    text = capsys.readouterr().out
    assert "root_states [E, 13]" in text and "def compute_reward(state)" in text and "forward" in text


@pytest.mark.parametrize("preallocate, fraction", [("false", None), (None, "0.95")])
def test_out_of_gpu_memory_names_the_sizes_and_what_to_change(tmp_path, monkeypatch, capsys, preallocate, fraction):
    import jax

    from envcoder.runs.driver import TrainingDriver

    def out_of_memory(*args, **kwargs):  # what XLA raises when an iteration's buffers do not fit
        raise jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 42.69GiB.\nmore")
    monkeypatch.setattr(TrainingDriver, "run", out_of_memory)
    if preallocate is None:
        monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    else:
        monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", preallocate)
    if fraction is None:
        monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    else:
        monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", fraction)
    out = tmp_path / "o"
    assert main(["eval", "--task", "Cartpole", "--envs-per-candidate", "8", "--seeds", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    policies = 2 * len(list((BUNDLED / "cartpole").glob("*.py")))
    assert err.startswith("envcoder eval: error: out of CPU memory") and len(err.strip().splitlines()) == 1, err
    for text in (f"{policies} policies × 8 envs ({policies * 8} environments)",
                 "Out of memory while trying to allocate 42.69GiB", "--envs-per-candidate",
                 f"{out} keeps its records and last checkpoint", "--resume continues it"):
        assert text in err, text
    assert ("unset XLA_PYTHON_CLIENT_PREALLOCATE=false" in err) == (preallocate == "false")
    assert ("XLA_PYTHON_CLIENT_MEM_FRACTION=0.95" in err) == (fraction is None)
    assert (out / "config.json").exists()  # the run directory stays readable


OUT_OF_MEMORY_IN_THE_EVALUATION = """
import sys
import jax
import jax.numpy as jnp
from envcoder.rl.learner import GroupedLearner
evaluate = GroupedLearner._evaluate

def needs_a_terabyte(self, ts, *args, **kwargs):  # a sort must hold its operand: 2**38 floats, 1 TiB
    out = evaluate(self, ts, *args, **kwargs)
    huge = jnp.sort(jax.random.uniform(jax.random.key(0), (2**38,)))
    return {**out, "task_fitness": out["task_fitness"] + huge[0]}
GroupedLearner._evaluate = needs_a_terabyte
from envcoder.cli import run
sys.argv = ["envcoder", *sys.argv[1:]]
run()
"""


@pytest.mark.slow  # 70 s here: a training program compiled in a fresh process
def test_an_allocation_that_fails_ends_with_status_2_and_one_line_not_a_signal(tmp_path):
    """A real allocation failure of XLA's (the final evaluation asks for a TiB) ends the `envcoder` command with
    status 2 and the out-of-memory line, never by a signal (an H200 ended such a run by SIGSEGV after the line)."""
    out = tmp_path / "o"
    env = {**os.environ, "ENVCODER_CACHE_DIR": ""}  # no caches: its evaluation program must not serve another run
    status = subprocess.run([sys.executable, "-c", OUT_OF_MEMORY_IN_THE_EVALUATION, "eval", "--task", "Cartpole",
                             "--functions", str(BUNDLED / "cartpole" / "good_upright.py"), "--iterations", "1",
                             "--envs-per-candidate", "8", "--no-tensorboard", "--out", str(out)],
                            capture_output=True, text=True, timeout=600, env=env)
    assert status.returncode == 2, (status.returncode, status.stderr[-2000:])
    err = status.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("envcoder eval: error: out of CPU memory while the final "
                                               "evaluation"), status.stderr
    assert "Out of memory allocating" in err[0] and "a smaller --evaluation-envs" in err[0]
    assert (out / "checkpoints" / "train_state.npz").exists()  # the training's records are kept


def test_other_runtime_errors_are_not_reported_as_out_of_memory(tmp_path, monkeypatch, capsys):
    import jax

    from envcoder.runs.driver import TrainingDriver

    def fails(*args, **kwargs):
        raise jax.errors.JaxRuntimeError("INTERNAL: something else")
    monkeypatch.setattr(TrainingDriver, "run", fails)
    assert main(["eval", "--task", "Cartpole", "--envs-per-candidate", "8", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "error: JaxRuntimeError: INTERNAL: something else (run again with --debug" in err
    assert "out of GPU memory" not in err


def test_a_runs_settings_go_through_config_json_and_the_options_help_is_their_field_docs(tmp_path, capsys):
    from envcoder.cli import build_parser
    from envcoder.cli_parser import in_user_words
    from envcoder.runs.eval_settings import EvalSettings
    from envcoder.settings import field_docs
    from envcoder.search.auto_settings import AutoSettings

    settings = EvalSettings(task="Cartpole", functions=tmp_path / "f", out=tmp_path / "o", seeds=(3, 4),
                            shaper_types=("compute_reward", "sample_goal"), overrides={"gamma": 0.9}, rungs=2,
                            config_file=tmp_path / "c.yaml", schedule="halving", train_iterations=7, physics="jax")
    recorded = json.loads(json.dumps(settings.to_config()))  # as config.json holds it
    assert "out" not in recorded and "devices" not in recorded
    assert EvalSettings.from_config(recorded, settings.out) == settings
    assert EvalSettings.from_config({"task": "Cartpole", "functions": "f"}, tmp_path).algo == "ppo"  # an older run
    # One name for training iterations in `eval` and `auto` (--train-iterations); eval's --iterations still works,
    # and a run recorded under the older name reads back.
    assert EvalSettings.from_config({"task": "Cartpole", "functions": "f", "iterations": 9}, tmp_path).train_iterations == 9
    for flag in ("--train-iterations", "--iterations"):
        assert build_parser().parse_args(["eval", "--task", "Cartpole", flag, "5"]).train_iterations == 5
    for command, settings_class, fields in (
            ("eval", EvalSettings, ("envs_per_candidate", "train_iterations", "compile_timeout_s", "physics", "cross",
                                     "algo")),
            ("auto", AutoSettings, ("final_top", "llm", "concurrency", "task_description"))):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # argparse wraps after a hyphen
        module = sys.modules[settings_class.__module__]
        for field in fields:  # as a user reads it (`in_user_words`), another setting named by its option
            doc = in_user_words(field_docs(settings_class)[field], module).replace("- ", "-")
            pattern = "".join(f"(?:`{part}`|--[\\w-]+)" if i % 2 else re.escape(part)
                              for i, part in enumerate(doc.split("`")))
            assert re.search(pattern, text), (command, field, doc)
        for fragment in ("Off with --no-tensorboard", "jitter,)", "('s", "BUDGET_ITERATIONS", "`budget_minutes`"):
            assert fragment not in text, (command, fragment)


def test_an_interrupted_run_names_its_path_and_where_it_continues_from(tmp_path, monkeypatch, capsys):
    from envcoder.runs.driver import TrainingDriver

    def interrupted(self):  # Ctrl-C while training
        raise KeyboardInterrupt
    monkeypatch.setattr(TrainingDriver, "run", interrupted)
    out = tmp_path / "o"
    assert main(["eval", "--task", "Cartpole", "--envs-per-candidate", "8", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert f"interrupted; `envcoder eval --resume {out}` continues it from iteration 0: it has no checkpoint yet" in err
    (out / "checkpoints").mkdir()
    checkpoint.save_train_state(out / "checkpoints", {"w": np.zeros(2)}, {"iteration": 4})
    assert main(["eval", "--resume", str(out)]) == 130
    assert f"`envcoder eval --resume {out}` continues it after training iteration 4, its last checkpoint" in (
        capsys.readouterr().err)


def test_the_interrupt_message_comes_after_everything_the_run_printed(tmp_path, monkeypatch):
    """The progress bar's last line is buffered when Ctrl-C comes; written after the interrupt message (at exit),
    a terminal showed the bar twice. One ordered log of both streams, stdout block-buffered as on a pipe."""
    import io

    from envcoder.runs.driver import TrainingDriver

    log = []

    class Sink(io.RawIOBase):
        def __init__(self, name):
            self.name = name

        def writable(self):
            return True

        def write(self, data):
            log.append((self.name, bytes(data).decode()))
            return len(data)

    def interrupted(self):  # the bar's line is drawn, then Ctrl-C while training
        print("training  3/50  1.2 M steps/s", end="")
        raise KeyboardInterrupt
    monkeypatch.setattr(TrainingDriver, "run", interrupted)
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(Sink("out"), 1 << 16)))
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(Sink("err"), write_through=True))
    out = tmp_path / "o"
    status = main(["eval", "--task", "Cartpole", "--envs-per-candidate", "8", "--out", str(out)])
    sys.stdout.flush()
    assert status == 130
    written = [(name, text) for name, text in log if text.strip()]
    assert "training  3/50" in "".join(text for name, text in written if name == "out")
    assert written[-1][0] == "err" and "interrupted" in written[-1][1], written


def test_your_own_candidates_run_next_to_the_bundled_ones(tmp_path, monkeypatch, capsys):
    """`--functions` takes several folders and files: a researcher's candidates are compared with the bundled
    ones without copying files; two files of one name are refused, naming both."""
    from envcoder.runs.driver import TrainingDriver

    trained = []
    monkeypatch.setattr(TrainingDriver, "run", lambda self: trained.append([c.name for c in self.job.candidates]))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "my_upright.py").write_text((BUNDLED / "cartpole" / "good_upright.py").read_text())
    bundled = BUNDLED / "cartpole" / "alive_bonus.py"
    out = tmp_path / "o"
    assert main(["eval", "--task", "Cartpole", "--functions", str(mine), str(bundled), "--envs-per-candidate", "8",
                 "--out", str(out)]) == 0
    assert trained == [["my_upright", "alive_bonus"]]
    assert json.loads((out / "config.json").read_text())["functions"] == [str(mine), str(bundled)]
    (mine / "alive_bonus.py").write_text(bundled.read_text())
    assert main(["eval", "--task", "Cartpole", "--functions", str(mine), str(bundled), "--out", str(tmp_path / "p")]) == 2
    assert f"two candidate files are named 'alive_bonus': {mine / 'alive_bonus.py'} and {bundled}" in (
        capsys.readouterr().err)


def test_the_task_default_trains_as_a_candidate_named_task_default(tmp_path, monkeypatch, capsys):
    """`--task-default` adds the task's own shaping, last, as `task_default`: validated like a file, its defaults'
    source kept in the run directory for reading; a file of that name is left out with the reason."""
    from envcoder.runs.driver import TrainingDriver

    trained = []
    monkeypatch.setattr(TrainingDriver, "run", lambda self: trained.append([c.name for c in self.job.candidates]))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "good.py").write_text((BUNDLED / "cartpole" / "good_upright.py").read_text())
    (mine / "task_default.py").write_text((BUNDLED / "cartpole" / "alive_bonus.py").read_text())
    out = tmp_path / "o"
    assert main(["eval", "--task", "Cartpole", "--functions", str(mine), "--task-default", "--envs-per-candidate", "8",
                 "--out", str(out)]) == 0
    assert trained == [["good", "task_default"]]
    kept = (out / "candidates" / "task_default.py").read_text()
    assert "Cartpole task's own shaping" in kept and "def compute_reward(" in kept
    failures = json.loads((out / "failures.json").read_text())
    assert [f["name"] for f in failures] == ["task_default"] and "rename the file" in failures[0]["error"]
    assert json.loads((out / "config.json").read_text())["task_default"] is True


def test_eval_resolves_its_plan_once_and_counts_its_files_once(tmp_path, monkeypatch):
    """The command line resolves the run once into a `Plan` (task, fitness, algorithm settings, likely candidate
    count) that every layer takes: over a whole `envcoder eval`, the settings are resolved once and the candidate
    files counted once. A plan for other seeds or output keeps its resolution; other files are counted again;
    another training length is resolved anew."""
    import dataclasses

    from envcoder.candidates import variants
    from envcoder.runs import job
    from envcoder.runs.driver import TrainingDriver
    from envcoder.runs.eval_settings import EvalSettings
    from envcoder.runs.job import Plan

    resolved, counted = [], []
    of, count = Plan.of.__func__, variants.likely_count
    monkeypatch.setattr(Plan, "of", classmethod(lambda cls, *a, **k: resolved.append(1) or of(cls, *a, **k)))
    monkeypatch.setattr(job, "likely_count", lambda settings: counted.append(1) or count(settings))
    monkeypatch.setattr(TrainingDriver, "run", lambda self: None)
    assert main(["eval", "--task", "Cartpole", "--seeds", "2", "--envs-per-candidate", "8",
                 "--out", str(tmp_path / "o")]) == 0
    assert (len(resolved), len(counted)) == (1, 1)

    plan = Plan.of(EvalSettings(task="Cartpole", functions=BUNDLED / "cartpole", out=tmp_path / "p"))
    assert plan.likely_candidates == len(list((BUNDLED / "cartpole").glob("*.py")))
    other = plan.with_settings(seeds=(5, 6), out=tmp_path / "q", envs_per_candidate=4)
    assert other.config is plan.config and other.task is plan.task and len(counted) == 2
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "good.py").write_text((BUNDLED / "cartpole" / "good_upright.py").read_text())
    assert plan.with_settings(functions=mine, task_default=True).likely_candidates == 2 and len(counted) == 3
    longer = plan.for_settings(dataclasses.replace(plan.settings, train_iterations=7))
    assert longer.config.max_epochs == 7 and plan.config.max_epochs != 7 and len(resolved) == 3


def test_the_command_line_imports_no_mujoco_before_it_knows_the_command():
    """MuJoCo reads MUJOCO_GL once, when it is first imported: `envcoder play --video` must choose the backend
    before that (`envcoder.runs.gl.choose_gl_backend`), so importing the command line may not import MuJoCo."""
    code = "import sys, envcoder.cli; print('mujoco' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
    # Building its parser imports the shaping API, but not MJX: `eval` launches the sandbox's workers right after
    # parsing, and MJX's imports (1-2 s) would come before them (docs/benchmarks/archive/throughput.md § 8).
    code = "import sys, envcoder.cli; envcoder.cli.build_parser(); print('mujoco.mjx' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
    # `--version` answers before any of that: no JAX, no MuJoCo.
    code = "import sys, envcoder.cli; envcoder.cli.main(['--version']); print('jax' in sys.modules)"
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split()
    assert printed[:1] == ["envcoder"] and printed[-1] == "False"


@pytest.mark.slow
def test_ctrl_c_while_compiling_ends_at_once_with_130_and_says_how_to_resume(tmp_path):
    """Ctrl-C while the training compiles in JAX's background threads: the process ends with 130 and the resume
    line, never with a C++ abort of the interpreter's shutdown ("terminate called ..."). The signal's moment
    depends on the machine's speed: a second try is allowed where the first ended otherwise."""
    import signal
    import time

    env = {**os.environ, "ENVCODER_CACHE_DIR": "", "PYTHONUNBUFFERED": "1"}  # no caches: it compiles
    tries = []
    for attempt in range(2):
        out = tmp_path / f"o{attempt}"
        # Ctrl-C as in a terminal, also where the test runs in the background (a non-interactive shell starts a
        # background job with SIGINT ignored, and a child would inherit that; Python then never raises
        # KeyboardInterrupt).
        start = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                 "runpy.run_module('envcoder.cli', run_name='__main__')")
        proc = subprocess.Popen([sys.executable, "-c", start, "eval", "--task", "Cartpole", "--envs-per-candidate",
                                 "8", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        for line in proc.stdout:
            if "environments in one process" in line:  # the compile starts now
                break
        time.sleep(2.0)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=300)
        assert "terminate called" not in stderr
        tries.append((proc.returncode, stdout[-1000:], stderr[-2000:]))
        if proc.returncode == 130:
            assert f"`envcoder eval --resume {out}` continues it from iteration 0: it has no checkpoint yet" in stderr
            return
    pytest.fail(f"no try ended with 130: {tries}")


MARKUP_REASON = '''import jax.numpy as jnp


def compute_reward(state):
    raise ValueError("[/nothing-open] [on red]painted[/on red] \\x1b]0;owned\\x07 [link=http://x]y[/link]")
'''


@pytest.mark.slow  # 70 s here from empty caches: a run's training programs compiled
def test_a_reason_a_candidate_writes_is_printed_as_text(tmp_path, capsys):
    """Markup in a candidate's error (an unbalanced closing tag ended the run; balanced ones were applied) and a raw
    ESC (a terminal's title sequence) are printed as the text they are; the run goes on with the good candidate."""
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "markup_reason.py").write_text(MARKUP_REASON)
    (folder / "good_upright.py").write_text((BUNDLED / "cartpole" / "good_upright.py").read_text())
    assert main(["eval", "--task", "Cartpole", "--functions", str(folder), "--iterations", "200",
                 "--envs-per-candidate", "8", "--no-tensorboard", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "[/nothing-open] [on red]painted[/on red] \\x1b]0;owned\\x07 [link=http://x]y[/link]" in " ".join(
        out.split()), out  # (the console wraps lines at its width)
    assert "\x1b]0;" not in out and "good_upright" in out


@pytest.mark.slow  # 2 min here: every task's worker, every shaping type's programs
def test_every_default_that_envcoder_tasks_shows_works_as_a_candidate_file(tmp_path):
    """What `envcoder tasks --task T` shows as the default shaping functions, copied into a file as it stands,
    passes validation (a copied `compute_torque` used to fail on a module constant it did not show)."""
    from envcoder.candidates import SHAPER_TYPES
    from envcoder.candidates.describe import describe_task
    from envcoder.candidates.prepare import sandboxed_candidates
    from envcoder.runs.eval_settings import EvalSettings
    from envcoder.tasks import TASKS

    for task in TASKS.values():
        text = describe_task(task)
        shown = text.split("## Default shaping functions")[1].split("\n## ")[0].split("\n", 1)[1]
        folder = tmp_path / task.name
        folder.mkdir()
        (folder / "copied.py").write_text("import jax\nimport jax.numpy as jnp\n\n" + shown)
        settings = EvalSettings(task=task.name, functions=folder, out=tmp_path / "unused",
                                shaper_types=tuple(SHAPER_TYPES))
        valid, failures = sandboxed_candidates(settings, task)
        assert [c.name for c in valid] == ["copied"], (task.name, [f.error for f in failures])


def test_every_option_s_help_is_in_a_user_s_words():
    """No module path, settings-record field or bare `None` in what `--help` says of an option."""
    import re

    from envcoder.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    for name, command in commands.items():
        for action in command._actions:
            text = action.help or ""
            assert not re.search(r"envcoder\.\w|\w+Settings\.\w|\bNone\b", text), (name, action.dest, text)


@pytest.mark.slow  # after the test above, whose programs it loads from the caches
def test_a_log_file_shows_training_while_it_runs(tmp_path):
    """Into a file (no terminal), training prints lines as it goes, not one at the end; messages are whole lines."""
    import time

    import jax

    log = tmp_path / "log"
    # The suite's caches: test_a_reason_a_candidate_writes_is_printed_as_text trained good_upright so before.
    env = {**os.environ, "ENVCODER_CACHE_DIR": jax.config.jax_compilation_cache_dir}
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, "-c", "from envcoder.cli import run; run()", "eval", "--task",
                                    "Cartpole", "--functions", str(BUNDLED / "cartpole" / "good_upright.py"),
                                    "--iterations", "200", "--envs-per-candidate", "8", "--no-tensorboard",
                                    "--out", str(tmp_path / "o")], stdout=out, stderr=subprocess.STDOUT, env=env)
        seen_while_running = False
        while process.poll() is None:
            text = log.read_text()
            if "training 1/200 |" in text and "Ranking" not in text:
                seen_while_running = True
            time.sleep(0.05)
    assert process.returncode == 0, log.read_text()[-2000:]
    assert seen_while_running, log.read_text()
    text = log.read_text()
    assert "training 200/200 |" in text and "\x1b[" not in text
    # The first line's rate was its compiling's ("0k steps/s"); "best" read as the ranking's first place.
    assert "training 1/200 | first iteration" in text and " 0k steps/s" not in text
    assert "leads in training: good_upright" in text
    assert any(line.startswith("Cartpole: ") and line.endswith("jax physics") for line in text.splitlines())


XLA_ALARM = b"""2026-11-27 12:00:02.045318: E external/xla/xla/service/slow_operation_alarm.cc:73] 
********************************
[Compiling module jit_iteration] Very slow compile? If you want to file a bug, run with envvar \
XLA_FLAGS=--xla_dump_to=/tmp/foo and attach the results.
********************************
E1127 12:00:03.000000 1 slow_operation_alarm.cc:65] Constant folding an instruction is taking > 1s:

  %reduce.10 = f32[] reduce()

This isn't necessarily a bug; constant-folding is inherently a trade-off.

If you'd like to file a bug, run with envvar XLA_FLAGS=--xla_dump_to=/tmp/foo and attach the results.
"""


@pytest.mark.parametrize("level", ["2", "0"])
def test_xla_slow_compile_alarms_stay_off_the_terminal_and_everything_else_passes(level):
    """XLA logs a slow compile as an error block with no switch to turn it off: `eval` and `auto` drop those blocks
    from standard error and pass every other byte on, also a message written just before the process dies;
    TF_CPP_MIN_LOG_LEVEL=0 keeps them."""
    code = ("import os, sys; from envcoder.alarms import hide_xla_alarms; hide_xla_alarms(); "
            f"os.write(2, b'first\\n' + {XLA_ALARM!r} + b'after the alarm\\n'); print('printed', file=sys.stderr); "
            "sys.stderr.flush(); os.write(2, b'last words\\n'); os._exit(3)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": level})
    assert done.returncode == 3
    lines = done.stderr.decode().splitlines()
    if level == "0":
        assert "Very slow compile?" in done.stderr.decode()
        return
    assert lines == ["first", "after the alarm", "printed", "last words"], lines
