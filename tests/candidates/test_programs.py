"""The hand-over from the jailed worker: a candidate file's functions as programs (jax.export), the only form in which
candidate code reaches the training process, and the operating system's jail around the worker."""

import socket
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envcoder.candidates import CandidateError, api_callable, expand_sweeps, load_candidate
from envcoder.candidates.jail import landlock_abi
from envcoder.candidates.programs import Program, abstract_arguments, export_function
from envcoder.candidates.validate import sample_state, validate_candidate
from envcoder.env import GroupedEnv
from envcoder.sim import Simulator
from envcoder.tasks import get_task

SHAPERS = ("compute_reward", "compute_observation", "compute_torque", "sample_initial_state")
SWEPT = '''import jax
import jax.numpy as jnp

PARAMS = {"WEIGHT": [0.5, 2.0]}
WEIGHT = 1.0


def compute_reward(state):
    upright = jnp.cos(state["dof_pos"][:, 1])
    return WEIGHT * upright - 0.01 * jnp.abs(state["dof_vel"][:, 0]), {"upright": upright}


def sample_initial_state(key, state):
    noise = jax.random.uniform(key, state["dof_pos"].shape, minval=-0.05, maxval=0.05)
    return {"dof_pos": state["dof_pos"] + noise}
'''
OWN_ACTION = '''import jax.numpy as jnp


def compute_observation(state):
    return jnp.concatenate([state["dof_pos"], 0.1 * state["dof_vel"], jnp.sin(state["dof_pos"][:, 1:])], axis=1)


def compute_torque(action, state):
    return 0.5 * (action[:, :1] + action[:, 1:2])
'''


@pytest.fixture(scope="module")
def handed(tmp_path_factory):
    """Two Cartpole files handed over by the sandbox (one sweeps a constant), while this process cannot run
    candidate code at all: loading a file or executing one in the candidates' loader raises."""
    from envcoder.candidates import load as loader
    from envcoder.candidates.prepare import sandboxed_candidates
    from envcoder.runs.evaluation import EvalSettings

    folder = tmp_path_factory.mktemp("programs")
    (folder / "swept.py").write_text(SWEPT)
    (folder / "own_action.py").write_text(OWN_ACTION)
    settings = EvalSettings(task="Cartpole", functions=folder, out=folder / "unused", shaper_types=SHAPERS)

    def refuse(*args, **kwargs):
        raise AssertionError("candidate code was loaded or run in the training process")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loader, "load_candidate", refuse)
        patch.setattr(loader, "exec", refuse, raising=False)
        candidates, failures = sandboxed_candidates(settings, get_task("Cartpole"))
        env = GroupedEnv(get_task("Cartpole"), candidates, 4, seeds=(0, 1))
        steps = _rollout(env)
    assert failures == []
    task = get_task("Cartpole")
    sim = Simulator(task.model_file, task.substeps)
    python = [validate_candidate(task, sim, c) for c in
              expand_sweeps([load_candidate(folder / f"{n}.py", SHAPERS) for n in ("own_action", "swept")])]
    return candidates, steps, python


def _rollout(env, steps: int = 3):
    """`steps` steps of every group under random actions, in one program: what each step observed and returned."""
    keys = jax.random.split(jax.random.PRNGKey(0), len(env.groups))

    @jax.jit
    def run(keys):
        state, pool = env.reset(keys, {}), env.reset_pool(keys, {})

        def step(state, t):
            actions = jax.random.uniform(jax.random.PRNGKey(t), (len(env.groups), env.envs_per_candidate, env.action_dim_max),
                                         minval=-1, maxval=1)
            state, info = env.step(state, actions, pool, keys)
            return state, (env.observe(state, keys), info.reward, info.components, info.terminal, state.data.qpos)
        return jax.lax.scan(step, state, jnp.arange(steps))[1]
    return jax.device_get(run(keys))


def test_every_function_of_a_file_is_a_program_and_a_sweep_shares_it(handed):
    candidates, _, _ = handed
    names = sorted(c.name for c in candidates)
    assert names == ["own_action", "swept[WEIGHT=0.5]", "swept[WEIGHT=2]"]
    for c in candidates:
        assert all(isinstance(f, Program) for f in c.functions.values())
    a, b = (c for c in candidates if c.name.startswith("swept"))
    assert a.functions["compute_reward"] is b.functions["compute_reward"]  # one program, the weight is an input
    own = next(c for c in candidates if c.name == "own_action")
    assert own.action_dim == 2 and own.obs_dim == 5 and own.validated


def test_a_hand_over_whose_programs_disagree_with_its_verdict_is_refused(handed):
    """What a worker sends is checked against itself: an observation program wider than the size validation found
    (a forged verdict, say) would break the padding inside the training program."""
    import dataclasses

    from envcoder.candidates.programs import check_against

    candidates, _, _ = handed
    own = next(c for c in candidates if c.name == "own_action")
    check_against(own)
    with pytest.raises(CandidateError, match="its program returns \\[5\\] features, validation found 4"):
        check_against(dataclasses.replace(own, obs_dim=4))


def test_programs_step_the_environments_as_the_python_functions_do(handed):
    """The same run with the files' Python functions loaded in this process (as trusted files are): the same
    observations, rewards, components, terminations and physics, step after step."""
    candidates, steps, python = handed
    env = GroupedEnv(get_task("Cartpole"), python, 4, seeds=(0, 1))
    assert [g.label for g in env.groups] == [g.label for g in GroupedEnv(get_task("Cartpole"), candidates, 4,
                                                                          seeds=(0, 1)).groups]
    for got, want in zip(steps, _rollout(env)):
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.fixture(scope="module")
def cartpole_state():
    task = get_task("Cartpole")
    return task, sample_state(task, Simulator(task.model_file, task.substeps))


def _export(task, state, api, fn):
    return export_function(api_callable(api, fn), [], abstract_arguments(api, state, 1, False, {}), "cpu", "f.py", api)


def test_a_program_that_calls_out_of_pure_computation_is_refused(cartpole_state):
    task, state = cartpole_state

    def solve(state):  # a LAPACK call on the CPU: a custom call, opaque to the checks
        m = jnp.eye(2) + state["dof_pos"][:, :, None] * state["dof_pos"][:, None, :]
        return jnp.linalg.inv(m)[:, 0, 0]
    with pytest.raises(CandidateError, match="outside pure computation"):
        _export(task, state, "compute_reward", solve)


def test_a_function_whose_sizes_follow_the_number_of_environments_is_refused(cartpole_state):
    task, state = cartpole_state

    def square(state):  # [E, E]: works on the sample's 68 rows, not on a run's
        return state["dof_pos"][:, :1] * state["dof_pos"][:, 0][None, :]
    with pytest.raises(CandidateError, match="must not depend on how many environments run"):
        _export(task, state, "compute_observation", square)

    def counts(state):
        if state["dof_pos"].shape[0] == 68:
            return state["dof_pos"][:, 1]
        raise ValueError("elsewhere")
    with pytest.raises(CandidateError, match="cannot be compiled for any number of environments"):
        _export(task, state, "compute_reward", counts)


@pytest.mark.skipif(landlock_abi() < 4, reason="the kernel has no Landlock (ABI >= 4): the jail is weaker here")
def test_a_locked_process_reads_writes_and_connects_nowhere_else(tmp_path):
    """What `envcoder.candidates.jail.lock` leaves a candidate's process: its own folder, Python and envcoder; no TCP
    connection and no Unix socket file outside."""
    outside = tmp_path / "outside.txt"
    outside.write_text("private")
    folder = tmp_path / "jail"
    folder.mkdir()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    agent = socket.socket(socket.AF_UNIX)  # a socket file, as an ssh-agent's or docker's
    agent.bind(str(tmp_path / "agent.sock"))
    agent.listen()
    script = textwrap.dedent(f"""
        import socket
        from envcoder.candidates.jail import lock
        lock({str(folder)!r})
        import json  # the standard library stays readable
        (open({str(folder / 'mine.txt')!r}, 'w')).write('ok')
        for attempt in (lambda: open({str(outside)!r}).read(), lambda: open({str(tmp_path / 'new.txt')!r}, 'w'),
                        lambda: socket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=5),
                        lambda: socket.socket(socket.AF_UNIX).connect({str(tmp_path / 'agent.sock')!r})):
            try:
                attempt()
                print('ALLOWED')
            except OSError:
                print('refused')
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            cwd=str(folder))
    server.close()
    agent.close()
    assert result.stdout.split() == ["refused"] * 4, result.stderr
    assert (folder / "mine.txt").read_text() == "ok" and not (tmp_path / "new.txt").exists()


def test_a_program_whose_outputs_differ_from_its_shaping_type_is_refused():
    """The parent checks every output of a handed-over program against its shaping type, exactly: a reset's fields
    must be state fields, float32, of the field's shape (a file that passes validation on the concrete trace and
    hands over another one ended the run with exit 134)."""
    from jax import export

    from envcoder.candidates.programs import check_signature
    from envcoder.candidates import Candidate
    from envcoder.shaping.api import CandidateError
    from envcoder.tasks import get_task

    g, e = export.symbolic_shape("g, e")
    dof = jax.ShapeDtypeStruct((g, e, 2), jnp.float32)
    sizes, task = Candidate("f", None, "", {}, "f", obs_dim=4, action_dim=1), get_task("Cartpole")

    def check(function, api="sample_initial_state"):
        check_signature(export.export(jax.jit(function))(dof), api, sizes, task, "f.py")
    check(lambda x: {"dof_pos": x + 1.0})  # a valid reset
    with pytest.raises(CandidateError, match="returns dtype int32 for the state field 'dof_pos', expected float32"):
        check(lambda x: {"dof_pos": x.astype(jnp.int32)})
    with pytest.raises(CandidateError, match="returns 'not_a_field', which is not a state field"):
        check(lambda x: {"not_a_field": x})
    with pytest.raises(CandidateError, match=r"returns shape \(g, e, 3\) for the state field 'dof_pos', expected \(g, "
                                             r"e, 2\)"):
        check(lambda x: {"dof_pos": jnp.concatenate([x, x[..., :1]], axis=-1)})
    with pytest.raises(CandidateError, match=r"returns shape \(g, e, 2\) as the motor command, expected \(g, e, 1\)"):
        check(lambda x: x, "compute_torque")
    with pytest.raises(CandidateError, match="returns dtype float32 as the termination, expected bool"):
        check(lambda x: x[..., 0], "compute_terminal")
