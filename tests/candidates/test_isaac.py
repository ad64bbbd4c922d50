"""Rewards written for Isaac Gym: torch on jax.numpy against torch's own numbers, each task's Isaac names against
Isaac's conventions, the three kinds of file through `envcoder eval` next to a native one, refusals that name what
they refuse, and `envcoder convert` giving a file that computes the same reward."""

import json
import math
import shutil
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from conftest import BENCHMARKS, BUNDLED, CANDIDATES
from envcoder.candidates import CandidateError
from envcoder.candidates.isaac import is_isaac, native_source
from envcoder.candidates.load import load_candidate
from envcoder.candidates.samples import task_states
from envcoder.shaping import helpers
from envcoder.shaping.isaac_torch import (HELPERS, Tensor, isaac_state, quat_mul, quat_rotate, quat_rotate_inverse,
                                         to_envcoder, torch, unwrap)
from envcoder.tasks import get_task

FILES = CANDIDATES / "isaac"


def test_torch_functions_give_torchs_numbers():
    x = torch.tensor([[3.0, 4.0, 0.0], [1.0, -2.0, 2.0]])
    assert np.allclose(unwrap(torch.norm(x, p=2, dim=-1)), [5.0, 3.0])
    assert np.allclose(unwrap(x.norm(dim=1, keepdim=True)), [[5.0], [3.0]])
    values, indices = torch.max(x, dim=1)  # a (values, indices) pair, as torch returns
    assert np.allclose(unwrap(values), [4.0, 2.0]) and list(unwrap(indices)) == [1, 2]
    assert np.allclose(unwrap(torch.max(x, torch.zeros_like(x))), [[3, 4, 0], [1, 0, 2]])  # elementwise
    assert unwrap(x.max()) == 4.0
    assert np.allclose(unwrap(torch.clamp(x, min=0.0, max=3.0)), [[3, 3, 0], [1, 0, 2]])
    assert x.view(-1, 1).shape == (6, 1) and x.unsqueeze(-1).shape == (2, 3, 1) and x.shape[0] == 2
    assert np.allclose(unwrap(x.std(dim=1)), np.std([[3, 4, 0], [1, -2, 2]], axis=1, ddof=1))  # unbiased
    assert np.allclose(unwrap(torch.sum(x ** 2, dim=-1)), [25.0, 9.0])
    assert np.allclose(unwrap(torch.cat([x, x], dim=1)), np.concatenate([unwrap(x)] * 2, axis=1))
    assert unwrap((x > 2).float().sum()) == 2.0
    # sorting and order statistics return torch's (values, indices); torch's median of an even count is the lower one
    values, indices = torch.sort(x, dim=1, descending=True)
    assert np.allclose(unwrap(values), [[4, 3, 0], [2, 1, -2]]) and unwrap(indices).tolist() == [[1, 0, 2], [2, 0, 1]]
    assert np.allclose(unwrap(x.topk(2, dim=1).values), [[4, 3], [2, 1]])
    assert np.allclose(unwrap(x.median(dim=1).values), [3.0, 1.0]) and unwrap(torch.median(x)) == 1.0
    assert np.allclose(unwrap(x.flip(1)), [[0, 4, 3], [2, -2, 1]]) and np.allclose(unwrap(x.roll(1, 1))[0], [0, 3, 4])
    assert np.allclose(unwrap(torch.diff(x, dim=1)), [[1, -4], [-3, 4]]) and unwrap(x.count_nonzero()) == 5
    assert np.allclose(unwrap(torch.hstack([x[:, 0], x[:, 1]])), [3, 1, 4, -2])
    assert np.allclose(unwrap(torch.erf(torch.tensor([0.0]))), 0.0) and np.isclose(unwrap(torch.dist(x[0], x[1])),
                                                                                     math.sqrt(4 + 36 + 4))
    assert unwrap(torch.dot(x[0], x[1])) == 3.0 - 8.0 + 0.0  # torch's dot: two 1-D tensors
    with pytest.raises(RuntimeError, match=r"torch.dot takes two 1-D tensors.*\(a \* b\).sum\(dim=-1\)"):
        torch.dot(x, x)  # on rows torch fails too (a response of Eureka's Humanoid run that its log calls an error)


def test_item_assignment_and_in_place_methods_change_the_tensor_as_torch_does():
    x = torch.tensor([[1.0, 2.0, 3.0]])
    alias = x
    x[:, 2] = 0.0  # every name bound to the tensor sees it
    assert np.allclose(unwrap(alias), [[1.0, 2.0, 0.0]])
    copy = x.clone()
    x.add_(1.0)
    x += 1.0
    assert np.allclose(unwrap(x), [[3.0, 4.0, 2.0]]) and np.allclose(unwrap(copy), [[1.0, 2.0, 0.0]])
    x[x > 2.5] = -1.0  # a boolean mask is written with where, not a data-dependent shape
    assert np.allclose(unwrap(x), [[-1.0, -1.0, 2.0]])
    with pytest.raises(TypeError, match="torch.where"):
        x[x > 0.0]  # reading through a mask is refused with what to write instead


def test_isaac_quaternions_are_x_y_z_w_and_rotate_as_envcoders_helpers():
    rng = np.random.default_rng(0)
    wxyz = rng.normal(size=(5, 4))
    wxyz /= np.linalg.norm(wxyz, axis=-1, keepdims=True)
    xyzw = np.concatenate([wxyz[:, 1:], wxyz[:, :1]], axis=-1)
    v = rng.normal(size=(5, 3))
    assert np.allclose(unwrap(quat_rotate(Tensor(xyzw), Tensor(v))), helpers.quat_rotate(wxyz, v), atol=1e-5)
    assert np.allclose(unwrap(quat_rotate_inverse(Tensor(xyzw), Tensor(v))), helpers.quat_rotate_inverse(wxyz, v),
                       atol=1e-5)
    product = unwrap(quat_mul(Tensor(xyzw), Tensor(xyzw)))
    expected = helpers.quat_mul(wxyz, wxyz)
    assert np.allclose(product, np.concatenate([expected[:, 1:], expected[:, :1]], axis=-1), atol=1e-5)
    # a quarter turn about z takes x to y
    quarter = np.array([[0.0, 0.0, math.sin(math.pi / 4), math.cos(math.pi / 4)]])
    assert np.allclose(unwrap(quat_rotate(Tensor(quarter), Tensor([[1.0, 0.0, 0.0]]))), [[0.0, 1.0, 0.0]], atol=1e-6)


def _walker_state(task, num_envs=2):
    """A state of `task` with the torso at (1, 2, 0.9) yawed a quarter turn, moving at (1.5, 0, 0) m/s."""
    size = int(task.state_fields["dof_pos"].shape.strip("[]").split(",")[1])
    quarter = [math.cos(math.pi / 4), 0.0, 0.0, math.sin(math.pi / 4)]  # w, x, y, z
    root = jnp.array([[1.0, 2.0, 0.9, *quarter, 1.5, 0.0, 0.0, 0.0, 0.0, 0.3]] * num_envs)
    state = {"root_states": root, "dof_pos": jnp.zeros((num_envs, size)), "dof_vel": jnp.ones((num_envs, size)),
             "dof_limits_lower": -jnp.ones((num_envs, size)), "dof_limits_upper": jnp.ones((num_envs, size)),
             "motor_efforts": jnp.full((num_envs, size), 15.0), "targets": jnp.array([[1000.0, 0.0, 0.0]] * num_envs),
             "contact_forces": jnp.ones((num_envs, 2 if task.name == "Humanoid" else 4, 3)),
             "actions": jnp.zeros((num_envs, size)), "torques": jnp.zeros((num_envs, size)),
             "progress_buf": jnp.zeros((num_envs,))}
    return state


@pytest.mark.parametrize("name, columns", [("Ant", 60), ("Humanoid", 108)])
def test_walker_names_follow_isaacs_conventions(name, columns):
    task = get_task(name)
    state = _walker_state(task)
    value = {key: spec.value(state) for key, spec in task.isaac_names.items()}
    assert np.allclose(value["root_states"][:, 3:7], [0.0, 0.0, math.sin(math.pi / 4), math.cos(math.pi / 4)])
    distance = math.hypot(1000.0 - 1.0, 2.0)
    assert np.allclose(value["potentials"], -distance / value["dt"], rtol=1e-6)
    # the potential's change over a step is the speed towards the target, as Isaac's progress reward reads it
    towards = 1.5 * (1000.0 - 1.0) / distance
    assert np.allclose(value["potentials"] - value["prev_potentials"], towards, rtol=1e-3)
    assert np.allclose(value["heading_vec"], [[0.0, 1.0, 0.0]] * 2, atol=1e-6)  # a quarter turn: facing +y
    assert np.allclose(value["up_vec"], [[0.0, 0.0, 1.0]] * 2, atol=1e-6)
    assert value["obs_buf"].shape == (2, columns)  # Isaac's observation size for the task
    assert np.allclose(value["obs_buf"][:, 0], 0.9)  # its first column: the torso's height
    # the class's other tensors that Eureka shows the model: Isaac's flat DOF state, the start pose
    size = value["dof_pos"].shape[1]
    assert value["dof_state"].shape == (2 * size, 2) and np.allclose(value["dof_state"][:, 1], 1.0)
    assert np.allclose(value["dof_state"].reshape(2, size, 2)[..., 0], value["dof_pos"])
    start = {"Ant": 0.44, "Humanoid": 1.34}[name]
    assert np.allclose(value["initial_root_states"], [[0, 0, start, 0, 0, 0, 1] + [0] * 6] * 2)
    assert np.allclose(value["start_rotation"], [0, 0, 0, 1]) and np.allclose(value["initial_dof_vel"], 0.0)


def test_anymal_and_cartpole_names_follow_isaacs_layout():
    anymal = get_task("Anymal")
    state = {"root_states": jnp.array([[0.0, 0.0, 0.6, 1.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.2]]),
             "commands": jnp.array([[1.0, 0.0, 0.1]]), "dof_pos": jnp.zeros((1, 12)), "dof_vel": jnp.zeros((1, 12)),
             "default_dof_pos": jnp.zeros((1, 12)), "gravity_vec": jnp.array([[0.0, 0.0, -1.0]]),
             "contact_forces": jnp.arange(12.0).reshape(1, 4, 3), "actions": jnp.zeros((1, 12)),
             "torques": jnp.zeros((1, 12)), "progress_buf": jnp.zeros((1,))}
    names = anymal.isaac_names
    forces = names["contact_forces"].value(state)
    assert forces.shape == (1, 13, 3)
    assert np.allclose(forces[:, names["feet_indices"].value(state)], state["contact_forces"])
    assert np.allclose(forces[:, 0], 0.0)  # the base touches nothing in envcoder's model
    observation = names["obs_buf"].value(state)
    assert observation.shape == (1, 48) and np.allclose(observation[0, :3], [1.0, 0.0, 0.0])  # 0.5 m/s × 2
    assert np.allclose(observation[0, 6:9], [0.0, 0.0, -1.0]) and np.allclose(observation[0, 9:12], [2.0, 0.0, 0.025])
    assert np.allclose(names["dof_state"].value(state), np.zeros((12, 2)))
    assert np.allclose(names["initial_root_states"].value(state)[0, :7], [0, 0, 0.62, 0, 0, 0, 1])
    assert names["command_x_range"].value(state) == [-2.0, 2.0]
    cartpole = get_task("Cartpole")
    state = {"dof_pos": jnp.array([[0.5, 0.1]]), "dof_vel": jnp.array([[1.0, 2.0]])}
    assert np.allclose(cartpole.isaac_names["obs_buf"].value(state), [[0.5, 1.0, 0.1, 2.0]])


REWARD_NAMED_OTHERWISE = """@torch.jit.script
def compute_improved_reward(root_states: torch.Tensor, up_vec: torch.Tensor) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    return root_states[:, 7] + helper(up_vec), {"up": up_vec[:, 2]}


def helper(up_vec: torch.Tensor) -> torch.Tensor:
    return up_vec[:, 2]
"""


def test_the_reward_is_the_function_isaac_gym_calls(tmp_path):
    # an answer's first function, whatever its name, as Eureka calls it
    text = native_source(REWARD_NAMED_OTHERWISE, "answer.py", "Ant")
    assert "def isaac_reward(root_states, up_vec)" in text and "def helper(" in text
    # a task file: the function its class assigns to self.rew_buf, with the arguments its call passes
    task_file = ("class AntGPT(VecTask):\n    def compute_reward(self, actions):\n"
                 "        self.rew_buf[:], self.rew_dict = compute_improved_reward(self.root_states, self.up_vec)\n"
                 "        self.gt_rew_buf = compute_success(self.obs_buf)\n\n\n"
                 "def compute_success(obs_buf):\n    return obs_buf[:, 0]\n\n\n" + REWARD_NAMED_OTHERWISE)
    text = native_source(task_file, "task.py", "Ant")
    assert "isaac_reward(isaac['root_states'], isaac['up_vec'])" in text and "compute_success" not in text
    # the call's result reaches self.rew_buf through a local, after another method's call to another function
    flows = ("class AntGPT(VecTask):\n    def compute_observations(self):\n"
             "        self.obs_buf[:] = compute_success(self.obs_buf)\n\n"
             "    def compute_reward(self, actions):\n"
             "        reward, parts = compute_improved_reward(self.root_states, self.up_vec)\n"
             "        self.rew_buf[:] = reward\n\n\n"
             "def compute_success(obs_buf):\n    return obs_buf[:, 0]\n\n\n" + REWARD_NAMED_OTHERWISE)
    assert "isaac_reward(isaac['root_states'], isaac['up_vec'])" in native_source(flows, "task.py", "Ant")
    # a class that computes its reward inline is refused by name, never run with another function as its reward
    inline = flows.replace("reward, parts = compute_improved_reward(self.root_states, self.up_vec)",
                           "reward = self.root_states[:, 7]")
    with pytest.raises(CandidateError, match="its task class computes the reward inside its method compute_reward, "
                                             "and envcoder runs a module-level reward function: move"):
        native_source(inline, "task.py", "Ant")
    both = inline.replace("self.obs_buf[:] = compute_success(self.obs_buf)\n\n    def compute_reward(self, actions):\n",
                          "pass\n\n    def compute_reward(self, actions):\n"
                          "        self.obs_buf[:] = compute_success(self.obs_buf)\n").replace(
        "reward = self.root_states[:, 7]\n        self.rew_buf[:] = reward", "self.rew_buf[:] = self.root_states[:, 7]")
    assert "self.obs_buf[:] = compute_success" in both and "self.rew_buf[:] = self.root_states" in both  # beside the inline reward, another function's call
    with pytest.raises(CandidateError, match="inside its method compute_reward"):
        native_source(both, "task.py", "Ant")


TASK_FILE_CALL = """class AnymalGPT(VecTask):
    def compute_reward(self, actions):
        lin_vel = quat_rotate_inverse(self.root_states[:, 3:7], self.root_states[:, 7:10])
        self.rew_buf[:], self.rew_dict = compute_reward(lin_vel, commands=self.commands, actions=actions)


@torch.jit.script
def compute_reward(base_lin_vel: torch.Tensor, commands: torch.Tensor, actions: torch.Tensor, sigma: float = 0.25
                   ) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    error = torch.sum(torch.square(commands[:, :2] - base_lin_vel[:, :2]), dim=1)
    tracking = torch.exp(-error / sigma)
    return tracking, {"tracking": tracking, "actions": torch.sum(actions ** 2, dim=1)}
"""


def test_a_task_files_call_says_what_each_argument_is():
    # keywords, the method's `actions` (self.actions, as VecTask passes it), a local computed from attributes, and an
    # argument left out that takes its default
    text = native_source(TASK_FILE_CALL, "task.py", "Anymal")
    assert ("isaac_reward(quat_rotate_inverse(isaac['root_states'][:, 3:7], isaac['root_states'][:, 7:10]), "
            "isaac['commands'], isaac['actions'], 0.25)") in text
    assert "import isaac_state, to_envcoder, torch, quat_rotate_inverse" in text
    state = {k: jnp.asarray(v) for k, v in task_states(get_task("Anymal")).items()}  # Anymal's sample states
    namespace = {}
    exec(compile(text, "converted.py", "exec"), namespace)
    reward, parts = namespace["compute_reward"](state)
    isaac = isaac_state(state, "Anymal")
    root, commands = unwrap(isaac["root_states"]), unwrap(isaac["commands"])
    lin_vel = unwrap(quat_rotate_inverse(torch.tensor(root[:, 3:7]), torch.tensor(root[:, 7:10])))
    expected = np.exp(-np.sum((commands[:, :2] - lin_vel[:, :2]) ** 2, axis=1) / 0.25)
    assert np.allclose(reward, expected, rtol=1e-5) and np.allclose(parts["tracking"], expected, rtol=1e-5)
    assert np.ptp(expected) > 0.01  # the states differ, so the check can fail
    refusals = {
        "self.commands": ("self.command_scale", "`self.command_scale` is not an attribute envcoder has"),
        "actions=actions": ("actions=actions, sigma=self.sigma", "`self.sigma` is not an attribute envcoder has"),
        "lin_vel, ": ("self.lin_vel_buf, ", "`self.lin_vel_buf` is not an attribute envcoder has"),
        ", actions=actions": ("", "without 'actions', which have no default"),
    }
    for old, (new, message) in refusals.items():
        with pytest.raises(CandidateError, match=message) as err:
            native_source(TASK_FILE_CALL.replace(old, new, 1), "task.py", "Anymal")
        assert "task.py:4 in compute_reward(): its task class" in str(err.value) and "\n" not in str(err.value)
    # what the class passes as it is meets TorchScript's types as the argument's own name would
    with pytest.raises(CandidateError, match="declares 'sigma' a float, but Anymal's IsaacGymEnvs task class holds a "
                                             "tensor .* in self.commands, which its task class passes"):
        native_source(TASK_FILE_CALL.replace("actions=actions)", "actions=actions, sigma=self.commands)"), "t.py",
                      "Anymal")


@pytest.mark.parametrize("file, task, components", [
    ("task_file_ant_reward_reset.py", "Ant", set()),  # IsaacGymEnvs' own (reward, reset), obs_buf's columns
    ("task_file_anymal_scales.py", "Anymal", set()),  # Dict[str, float] scales, ints, knee contacts
    ("task_file_humanoid_gpt.py", "Humanoid", {"speed_reward", "upright_reward", "action_penalty", "effort"}),
    ("task_file_keywords.py", "Ant", {"progress", "height", "heading"}),  # keywords, a default, get_basis_vector
])
def test_whole_task_files_of_each_style_run_on_the_sample_states(file, task, components):
    task = get_task(task)
    candidate = load_candidate(FILES / file, task=task, lift=False)
    state = {k: jnp.asarray(v) for k, v in task_states(task).items()}
    out = candidate.functions["compute_reward"](state)
    reward, parts = out if isinstance(out, tuple) else (out, {})
    rows = state["progress_buf"].shape[0]
    assert reward.shape == (rows,) and np.isfinite(np.asarray(reward)).all() and np.ptp(np.asarray(reward)) > 0
    assert set(parts) == components


def test_isaacgymenvs_own_ant_reward_is_the_task_default():
    """IsaacGymEnvs' Ant reward as its task file has it, run through the Isaac path, gives the task default's
    reward on the sample states: the default is the papers' "human" reward. Within 0.01: Isaac's progress is the
    difference of two potentials of about 1000 m / (1/60 s) = 6·10⁴ in float32, resolved to 1/128; each joint at a
    limit costs 0.1 (Isaac counts only the upper limits, and the sample states pass both)."""
    from envcoder.shaping.helpers import unscale

    task = get_task("Ant")
    state = {k: jnp.asarray(v) for k, v in task_states(task).items()}
    scaled = np.asarray(unscale(state["dof_pos"], state["dof_limits_lower"], state["dof_limits_upper"]))
    assert (scaled > 0.99).any() and (scaled < -0.99).any()
    isaac = load_candidate(FILES / "task_file_ant_reward_reset.py", task=task, lift=False)
    out = isaac.functions["compute_reward"](state)
    reward = np.asarray(out[0] if isinstance(out, tuple) else out)
    default = np.asarray(task.defaults["compute_reward"](state)[0])
    assert np.ptp(default) > 0.5
    np.testing.assert_allclose(reward, default, atol=0.01)


def test_the_helpers_of_isaacs_torch_utils_agree_with_each_other():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(5, 4))
    q = torch.tensor(q / np.linalg.norm(q, axis=1, keepdims=True))
    t, v = torch.tensor(rng.normal(size=(5, 3))), torch.tensor(rng.normal(size=(5, 3)))
    def same(a, b):
        return np.allclose(unwrap(a), unwrap(b), atol=1e-5)

    h = HELPERS
    q_inv, t_inv = h["tf_inverse"](q, t)
    assert same(h["tf_apply"](q_inv, t_inv, h["tf_apply"](q, t, v)), v)  # a transform and its inverse
    assert same(h["tf_combine"](q_inv, t_inv, q, t)[1], np.zeros((5, 3)))
    assert same(h["get_basis_vector"](q, v), quat_rotate(q, v)) and same(h["tf_vector"](q, v), quat_rotate(q, v))
    assert same(abs((h["exp_map_to_quat"](h["quat_to_exp_map"](q)) * q).sum(-1)), np.ones(5))  # q or -q
    assert same(h["quat_to_tan_norm"](torch.tensor([[0.0, 0, 0, 1]])), [[1, 0, 0, 0, 0, 1]])
    assert same(h["slerp"](q[:2], q[2:4], torch.tensor([[0.0], [0.0]])), q[:2])
    half = h["slerp"](q[:1], q[1:2], torch.tensor([0.5]))
    assert same(h["quat_diff_rad"](half, q[:1]), h["quat_diff_rad"](half, q[1:2]))  # half way
    assert same(h["calc_heading"](quat_mul(h["calc_heading_quat_inv"](q), q)), np.zeros(5))  # heading removed
    with pytest.raises(TypeError, match="torch_rand_float draws random numbers"):
        h["torch_rand_float"](-1.0, 1.0, (5, 1), "cpu")


def test_isaacs_own_reward_and_reset_pair_gives_the_reward():
    state = {"progress_buf": jnp.zeros((3,))}
    reward, reset = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0, 1, 0])
    assert np.allclose(to_envcoder((reward, reset), state), [1.0, 2.0, 3.0])  # envcoder's terminal ends episodes
    total, parts = to_envcoder((reward, {"speed": reward * 2, "bonus": 0.5}), state)
    assert np.allclose(parts["speed"], [2, 4, 6]) and np.allclose(parts["bonus"], 0.5)  # a number is spread
    # Isaac Gym only logs a component's mean, so one of another shape trains there and is kept here as that mean:
    # [E] / [E, 1] broadcasts to [E, E] (a response of Eureka's Humanoid run does this), averaged per environment
    velocity = torch.tensor([[1.0, 0.0, 0.0], [2.0, -1.0, 0.0], [0.0, 0.0, 3.0]])
    wide = velocity[:, 0] / torch.abs(velocity).sum(dim=-1, keepdim=True).clamp(min=1.0)
    assert wide.shape == (3, 3)
    _, parts = to_envcoder((reward, {"wide": wide, "three": torch.tensor([1.0, 2.0, 6.0, 7.0])}), state)
    assert np.allclose(parts["wide"], np.mean(unwrap(wide), axis=1)) and np.isclose(parts["wide"].mean(),
                                                                                     unwrap(wide).mean())
    assert np.allclose(parts["three"], 4.0)  # not [E, ...]: its mean over all of it
    with pytest.raises(ValueError):
        to_envcoder(wide, state)  # the reward itself must fit Isaac's rew_buf, [E]


def test_a_type_comment_declares_torchscripts_types():
    candidate = load_candidate(FILES / "type_comment.py", task=get_task("Ant"))  # dt: float, by its `# type:` line
    assert "compute_reward" in candidate.functions


def test_the_three_kinds_of_file_are_read_and_a_native_file_is_not():
    assert is_isaac((FILES / "walker_reward.py").read_text(), FILES / "walker_reward.py")
    assert is_isaac((FILES / "answer.txt").read_text(), FILES / "answer.txt")
    assert is_isaac((FILES / "task_file.py").read_text(), FILES / "task_file.py")
    native = BUNDLED / "cartpole" / "good_upright.py"
    assert not is_isaac(native.read_text(), native)
    # a task file's own call site passes expressions of its attributes: they are kept
    text = native_source((FILES / "task_file.py").read_text(), "task_file.py", get_task("Anymal"))
    assert "isaac['contact_forces'][:, isaac['feet_indices'], :]" in text
    assert "def tracking(" in text and "class AnymalGPT" not in text and "compute_anymal_observations" not in text


@pytest.mark.parametrize("file, message", [
    ("unknown_argument.py", "compute_reward takes 'velocity', which Ant's IsaacGymEnvs task class does not have"),
    ("unknown_method.py", "uses .logaddexp, which envcoder's tensors"),
    # TorchScript's argument types, as Isaac Gym's call meets them
    ("tensor_for_a_float.py", "declares 'contact_force_scale' a torch.Tensor, but Ant's IsaacGymEnvs task class holds "
                              "a Python float there"),
    ("float_for_a_tensor.py", "declares 'potentials' a float, but Ant's IsaacGymEnvs task class holds a tensor"),
])
def test_what_it_cannot_run_is_refused_by_name(file, message):
    with pytest.raises(CandidateError, match=message) as err:
        load_candidate(FILES / file, task=get_task("Ant"))
    assert "\n" not in str(err.value) and file in str(err.value)


def test_an_isaac_reward_computes_what_it_says_on_envcoders_state():
    task = get_task("Ant")
    candidate = load_candidate(FILES / "walker_reward.py", task=task, lift=False)
    state = _walker_state(task)
    reward, parts = candidate.functions["compute_reward"](state)
    assert reward.shape == (2,) and set(parts) == {"progress", "speed", "upright", "action_cost"}
    assert np.allclose(parts["speed"], math.tanh(1.5 / 2.0)) and np.allclose(parts["upright"], 1.0)
    assert np.allclose(reward, parts["progress"] + parts["speed"] + 0.1, rtol=1e-5)


def test_eval_ranks_isaac_files_next_to_a_native_one_and_convert_gives_the_same_reward(tmp_path):
    """Through the commands, as a user runs them: `eval` on Cartpole (the quickest task to train) ranks an Isaac file,
    an LLM's answer and a native file and names the file it leaves out; `convert` on Ant writes Isaac's quaternion
    helpers as envcoder's, into a folder `-o` makes."""
    folder = tmp_path / "mixed"
    shutil.copytree(FILES / "cartpole", folder)
    shutil.copyfile(BUNDLED / "cartpole" / "good_upright.py", folder / "native.py")
    out = tmp_path / "run"
    command = [sys.executable, "-m", "envcoder.cli"]
    done = subprocess.run([*command, "eval", "--task", "Cartpole", "--functions", str(folder), "--iterations", "1",
                           "--envs-per-candidate", "4", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    ranked = {row["name"] for row in json.loads((out / "results.json").read_text())["ranking"]}
    assert ranked == {"pole_reward", "answer", "native"}
    assert "unknown_argument.py:2 in compute_reward(): compute_reward takes 'pole_height'" in done.stdout + done.stderr
    converted = tmp_path / "native" / "converted.py"
    done = subprocess.run([*command, "convert", str(FILES / "answer.txt"), "--task", "Ant", "-o", str(converted)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "the same reward and components" in done.stderr
    text = converted.read_text()
    assert not is_isaac(text, converted) and "local_velocity = quat_rotate_inverse(base_quat" in text
    done = subprocess.run([*command, "convert", str(FILES / "unknown_argument.py"), "--task", "Ant"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "'velocity'" in done.stderr and done.stderr.count("\n") == 1


def _eureka_run():
    import importlib.util

    spec = importlib.util.spec_from_file_location("eureka_run", BENCHMARKS / "eureka_run.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_a_public_run_benchmark_picks_and_scores_as_its_doc_says():
    """`benchmarks/eureka_run.py`: the run's two picks (envcoder's best over every iteration, Eureka's best of the
    iteration its log scores highest), and HNS only where the task default beats the sparse start at P ≥ 0.95."""
    bench = _eureka_run()
    records = [
        {"iteration": 0, "eureka_best": 3, "eureka_max_success": 5.0, "best_response": "env_iter0_response7_rewardonly",
         "fitness": {"env_iter0_response7_rewardonly": [0.4], "env_iter0_response3_rewardonly": [0.1]}},
        {"iteration": 1, "eureka_best": 2, "eureka_max_success": 6.5, "best_response": "env_iter1_response5_rewardonly",
         "fitness": {"env_iter1_response5_rewardonly": [0.3], "env_iter1_response2_rewardonly": [0.2]}}]
    assert bench.fresh_picks(records, "run") == ["env_iter0_response7_rewardonly", "env_iter1_response2_rewardonly"]
    assert bench.fresh_picks(records, "iteration") == [
        "env_iter0_response7_rewardonly", "env_iter0_response3_rewardonly", "env_iter1_response5_rewardonly",
        "env_iter1_response2_rewardonly"]
    assert bench.hns(0.5, 0.0, 2.0, 0.97) == pytest.approx(0.25)  # a quarter of the way from sparse to default
    assert bench.hns(0.5, 0.0, 2.0, 0.60) is None and bench.hns(0.5, 0.0, 2.0, None) is None
    assert bench.hns_text({"hns": None, "p_default_beats_sparse": 0.17}) == (
        "not defined (P(default beats sparse) = 0.17)")


def test_a_public_run_benchmark_continues_what_a_time_limit_cut(tmp_path, monkeypatch):
    """`eureka_run.py --resume`: an evaluation that had begun continues (`envcoder eval --resume`), one that finished
    is read without a launch, and the wall clock is the sum of the launches'. (The commands are recorded here.)"""
    bench = _eureka_run()
    launched = []

    def run(argv, **_):
        launched.append(argv)
        return subprocess.CompletedProcess(argv, 130 if len(launched) == 1 else 0)
    monkeypatch.setattr(bench.subprocess, "run", run)
    response = tmp_path / "env_iter0_response1_rewardonly.py"
    response.write_text("# a response\n")
    out = tmp_path / "out"
    first = bench.eval_files([response], "Ant", "iter0", 2, out, ["--train-iterations", "300"], resume=True)
    assert launched[0][:3] == ["envcoder", "eval", "--task"] and first["exit"] == 130 and first["launches"] == 1
    (out / "iter0").mkdir()
    (out / "iter0" / "config.json").write_text("{}")  # what the cut evaluation left
    second = bench.eval_files([response], "Ant", "iter0", 2, out, ["--train-iterations", "300"], resume=True)
    assert launched[1] == ["envcoder", "eval", "--resume", str(out / "iter0")] and second["launches"] == 2
    assert (out / "iter0_inputs" / "sparse.py").is_file()  # the inputs of the first launch are kept
    (out / "iter0" / "results.json").write_text(json.dumps({"ranking": [{"name": "sparse", "fitness_mean": 0.5}]}))
    third = bench.eval_files([response], "Ant", "iter0", 2, out, ["--train-iterations", "300"], resume=True)
    assert len(launched) == 2 and third["rows"]["sparse"]["fitness_mean"] == 0.5
    assert third["wall_s"] == second["wall_s"] == pytest.approx(sum(json.loads(
        (out / "iter0_launches.json").read_text())))
