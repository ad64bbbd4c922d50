"""PPO settings: defaults, the task's YAML, a config file, overrides, and each kind of bad setting."""

import dataclasses
import re

import pytest

from envcoder.rl.config import ConfigError, load_config_file, parse_overrides, task_settings
from envcoder.rl.ppo.config import PPOConfig
from envcoder.tasks import TASKS, get_task


def test_defaults_and_task_files():
    assert PPOConfig.resolve([]) == PPOConfig()
    anymal = PPOConfig.for_task(get_task("Anymal"))
    # IsaacGymEnvs' AnymalPPO.yaml values.
    assert (anymal.horizon_length, anymal.mini_epochs, anymal.units, anymal.critic_coef, anymal.bounds_loss_coef,
            anymal.kl_threshold, anymal.max_epochs) == (24, 5, (256, 128, 64), 2.0, 0.001, 0.008, 1000)
    for task in TASKS.values():  # every task's file resolves
        PPOConfig.resolve([(str(task.config_file), task_settings(task, "ppo"))])


def test_layers_apply_in_order(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("learning_rate: 1.0e-3\nunits: [64, 64]\nlr_schedule: linear\nminibatch_size: null\n")
    config = PPOConfig.resolve([
        ("task", {"learning_rate": 3e-4, "horizon_length": 24}),
        (str(path), load_config_file(path)),
        ("override", parse_overrides(["ppo.learning_rate=2e-3", "ppo.normalize_value=false"])),
    ])
    assert config.learning_rate == 2e-3 and config.horizon_length == 24 and config.units == (64, 64)
    assert config.lr_schedule == "linear" and config.minibatch_size is None and config.normalize_value is False


def test_override_values_are_read_as_yaml():
    assert parse_overrides(["ppo.units=[512, 256]", "ppo.entropy_coef=0", "ppo.activation=tanh"]) == {
        "units": [512, 256], "entropy_coef": 0, "activation": "tanh"}
    assert PPOConfig.resolve([("o", parse_overrides(["ppo.learning_rate=1e-3"]))]).learning_rate == 1e-3
    assert PPOConfig.resolve([("o", parse_overrides(["ppo.score_to_win=1"]))]).score_to_win == 1.0
    assert PPOConfig.resolve([("o", parse_overrides(["ppo.score_to_win=null"]))]).score_to_win is None


@pytest.mark.parametrize("settings, message", [
    ({"learnin_rate": 1e-3}, "f.yaml: unknown PPO setting 'learnin_rate'; did you mean 'learning_rate'?"),
    ({"horizon": 16}, "f.yaml: unknown PPO setting 'horizon'; did you mean 'horizon_length'?"),
    ({"zzz": 1}, "f.yaml: unknown PPO setting 'zzz'; known settings: horizon_length, minibatch_size"),
    ({"horizon_length": 2.5}, "f.yaml: horizon_length expects int, got 2.5 (float)"),
    ({"normalize_input": "yes"}, "f.yaml: normalize_input expects bool, got 'yes' (str)"),
    ({"units": [256, "a"]}, "f.yaml: units expects tuple[int, ...], got [256, 'a'] (list)"),
    ({"learning_rate": "fast"}, "f.yaml: learning_rate expects float, got 'fast' (str)"),
    ({"lr_schedule": "cosine"}, "f.yaml: lr_schedule must be one of adaptive, linear, none, got 'cosine'"),
    ({"score_to_win": "high"}, "f.yaml: score_to_win expects float | None, got 'high' (str)"),
    ({"score_to_win": True}, "f.yaml: score_to_win expects float | None, got True (bool)"),
])
def test_bad_settings_name_the_source_the_setting_and_the_fix(settings, message):
    with pytest.raises(ConfigError) as err:
        PPOConfig.resolve([("f.yaml", settings)])
    assert message in str(err.value)


def test_bad_files_and_overrides(tmp_path):
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    (tmp_path / "broken.yaml").write_text("units: [1, 2\n")
    with pytest.raises(ConfigError, match="expected a mapping of PPO settings"):
        load_config_file(tmp_path / "list.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config_file(tmp_path / "broken.yaml")
    with pytest.raises(ConfigError, match="expected ppo.NAME=VALUE"):
        parse_overrides(["ppo.learning_rate"])


def test_every_default_passes_its_own_type_check():
    # The type checks cover every field's declared type.
    for field in dataclasses.fields(PPOConfig):
        PPOConfig.resolve([("defaults", {field.name: getattr(PPOConfig(), field.name)})])


@pytest.mark.parametrize("override, message", [
    ("ppo.horizon_length=0", "horizon_length must be a number of at least 1, got 0"),
    ("ppo.num_minibatches=0", "num_minibatches must be a number of at least 1, got 0"),
    ("ppo.mini_epochs=-1", "mini_epochs must be a number of at least 1, got -1"),
    ("ppo.learning_rate=.nan", "learning_rate must be a finite number above 0, got nan"),
    ("ppo.gamma=2", "gamma must be a finite number from 0.0 to 1.0, got 2"),
    ("ppo.units=[32, 0]", "each width of units must be a number of at least 1, got [32, 0]"),
    ("ppo.central_value_config.mini_epochs=0", "mini_epochs must be a number of at least 1, got 0"),
])
def test_an_override_out_of_range_is_refused_with_its_rule(override, message):
    """Each of these ended a run with a ZeroDivisionError or an MLIRError, or trained on NaN, before."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        PPOConfig.resolve([("command-line override", parse_overrides([override]))])
    for field in dataclasses.fields(PPOConfig):  # the defaults are in range
        PPOConfig.resolve([("defaults", {field.name: getattr(PPOConfig(), field.name)})])


def test_the_isaac_preset_is_isaacgymenvs_own_training_under_config_and_overrides(tmp_path):
    """`--preset isaac`: IsaacGymEnvs' AntPPO.yaml (500 iterations, 2 minibatches of 4,096 × 16, gradients not
    clipped), between the task's settings and the command line's; a preset a task lacks is named with the task's."""
    from envcoder.runs.evaluation import EvalSettings
    from envcoder.runs.job import Plan

    def config(**changes):
        settings = EvalSettings(task="Ant", functions=tmp_path, out=tmp_path / "o", **changes)
        return Plan.of(settings).config
    plain, isaac = config(), config(preset="isaac")
    assert (plain.max_epochs, plain.truncate_grads) == (800, True)
    assert (isaac.max_epochs, isaac.horizon_length, isaac.num_minibatches, isaac.mini_epochs, isaac.truncate_grads,
            isaac.reward_scale, isaac.save_best_after) == (500, 16, 2, 4, False, 0.01, 200)
    mine = config(preset="isaac", overrides={"learning_rate": 1e-3}, train_iterations=20)
    assert (mine.learning_rate, mine.max_epochs, mine.truncate_grads) == (1e-3, 20, False)
    assert get_task("Ant").preset("isaac")["envs_per_candidate"] == 4096
    for name in ("Ant", "Humanoid", "Anymal"):  # every preset resolves, and splits 4,096 × horizon into 32,768s
        preset = get_task(name).preset("isaac")
        resolved = PPOConfig.resolve([("preset", preset["ppo"])])
        assert 4096 * resolved.horizon_length // resolved.num_minibatches == 32768, name
    with pytest.raises(ValueError, match=r"--preset fast: task Ant has no such preset \(its presets: isaac; "):
        config(preset="fast")


def test_best_in_training_is_the_curve_s_best_as_the_papers_report_it():
    import math

    from envcoder.runs.ranking import best_in_training

    curve = {0: 0.5, 1: float("nan"), 2: 2.0, 3: 1.5}
    assert best_in_training(curve) == 2.0 and best_in_training(curve, higher_is_better=False) == 0.5
    assert math.isnan(best_in_training({})) and math.isnan(best_in_training({4: float("nan")}))
