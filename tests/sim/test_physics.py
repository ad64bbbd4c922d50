"""The physics engines against MuJoCo C: MJX's JAX engine follows MuJoCo's own `mj_step` on the task models,
and the contact forces the tasks report equal MuJoCo's `mj_contactForce`. (MuJoCo Warp is checked against the
JAX engine on the GPU: `benchmarks/throughput.py agree`.)

With contacts, float32 MJX and float64 MuJoCo agree only approximately: the models run one or two solver
iterations (for MJX speed), and a contact that starts a step earlier in one of them sends flailing legs apart. So the
check is exact (to float32) in free flight under small random torques (large ones drive the joints into
the limits, constraints again), and approximate when the robot lands and
stands."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest

from envcoder.sim import Simulator
from envcoder.sim.simulator import STEP_INPUTS
from envcoder.tasks import get_task

STEPS = 25
"""Control steps compared in free flight (Anymal 100 physics steps, Ant 50): float32 drifts past 1e-4 later."""
LANDING_SECONDS = {"Anymal": 0.5, "Ant": 1.25}
"""Simulated time compared when the robot lands and stands (Anymal 25 control steps, Ant 75): the light Ant's
landing takes longer to settle; later, Anymal's zero-action stand sags and the two drift apart."""


def mujoco_c(sim, task, qpos0, ctrl):
    """`(qpos [T, nq], contact forces on the task's contact geoms [T, n, 3])` of MuJoCo C."""
    model = sim.mj_model
    data = mujoco.MjData(model)
    data.qpos[:] = qpos0
    feet = sim.geom_members(task.contact_geoms)  # [ngeom + 1, n]: which geoms each entry adds up
    qpos, forces = [], []
    for step_ctrl in ctrl:
        data.ctrl[:] = step_ctrl
        for _ in range(task.substeps):
            mujoco.mj_step(model, data)
        qpos.append(data.qpos.copy())
        force = np.zeros((feet.shape[1], 3))
        for i, contact in enumerate(data.contact[:data.ncon]):
            local = np.zeros(6)
            mujoco.mj_contactForce(model, data, i, local)
            world = contact.frame.reshape(3, 3).T @ local[:3]  # on geom2, world frame
            force += (feet[contact.geom2] - feet[contact.geom1])[:, None] * world
        forces.append(force)
    return np.array(qpos), np.array(forces)


@pytest.mark.slow
@pytest.mark.parametrize("task_name", ["Anymal", "Ant"])
def test_jax_engine_follows_mujoco_c(task_name):
    task = get_task(task_name)
    sim = Simulator(task.model_file, task.substeps)
    model = sim.mj_model

    @jax.jit
    def rollout(qpos0, ctrl):
        def step(data, ctrl):
            data = sim.step(data, ctrl)
            return data, (data.qpos, sim.task_contact_forces(task, data))
        return jax.lax.scan(step, sim.reset(qpos0, jnp.zeros(model.nv)), ctrl)[1]

    steps = int(round(LANDING_SECONDS[task_name] / sim.control_dt))
    rng = np.random.default_rng(0)
    flying, standing = np.asarray(sim.qpos0, np.float64), np.asarray(sim.qpos0, np.float64)
    flying[2] += 20.0  # 20 m up: no contact during the compared steps
    standing[2] += 0.05  # dropped from 5 cm: it lands on its feet
    random = rng.uniform(-0.1, 0.1, (STEPS, model.nu)) * model.actuator_ctrlrange[:, 1]
    for qpos0, ctrl, tolerance in ((flying, random, 1e-4), (standing, np.zeros((steps, model.nu)), 2e-2)):
        expected_qpos, expected_forces = mujoco_c(sim, task, qpos0, ctrl)
        qpos, forces = rollout(jnp.asarray(qpos0, jnp.float32), jnp.asarray(ctrl, jnp.float32))
        np.testing.assert_allclose(qpos, expected_qpos, atol=tolerance)
    weight = float(model.body_subtreemass[0] * -model.opt.gravity[2])
    assert expected_forces[..., 2].sum(axis=-1).mean() > 0.3 * weight  # it landed: the floor pushes up
    # Forces agree once the landing impulse (a step or two, split differently by the few-iteration solvers) is
    # over: the last 10 control steps.
    np.testing.assert_allclose(forces[-10:], expected_forces[-10:], atol=0.03 * weight)


@pytest.mark.slow  # 1.5 min here: Anymal's step compiled three ways
def test_a_step_reads_only_the_state_fields_so_a_placed_robot_steps_as_a_reset_one():
    """The trainer resets environments with `Simulator.place` (no forward pass) and selects between environments
    only the fields of `STEP_INPUTS`; both are exact only if a physics step computes every other field before it
    reads it. Checked here: data from `reset` (forward computed), from `place`, and from `place` with every other
    float field poisoned with NaN take the same two control steps, to the bit."""
    task = get_task("Anymal")
    sim = Simulator(task.model_file, task.substeps)
    model = sim.mj_model
    rng = np.random.default_rng(1)
    qpos = np.asarray(sim.qpos0, np.float32).copy()
    qpos[2] += 0.02  # feet in contact within the two steps
    qpos[7:] += rng.uniform(-0.2, 0.2, model.nq - 7)
    qvel = rng.uniform(-0.5, 0.5, model.nv).astype(np.float32)
    ctrl = (rng.uniform(-0.1, 0.1, (2, model.nu)) * model.actuator_ctrlrange[:, 1]).astype(np.float32)

    step = jax.jit(sim.step)  # compiled once, for both steps
    forces = jax.jit(lambda data: sim.task_contact_forces(task, data))

    def two_steps(data):
        for step_ctrl in ctrl:
            data = step(data, jnp.asarray(step_ctrl))
        return data.qpos, data.qvel, forces(data)

    placed = sim.place(jnp.asarray(qpos), jnp.asarray(qvel))
    poisoned = jax.tree_util.tree_map_with_path(
        lambda path, x: x if path[0].name in STEP_INPUTS or not jnp.issubdtype(x.dtype, jnp.floating)
        else jnp.full_like(x, jnp.nan), placed)
    assert any(np.isnan(x).any() for x in jax.tree.leaves(poisoned))
    expected = two_steps(jax.jit(sim.reset)(jnp.asarray(qpos), jnp.asarray(qvel)))
    assert np.abs(np.asarray(expected[2])).max() > 1.0  # the feet touched the floor: the solver ran
    for data in (placed, poisoned):
        for got, want in zip(two_steps(data), expected):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


CONTACT_TORQUE = '''
ACTION_DIM = 12


def compute_torque(action, state):
    return 40.0 * action + 0.05 * jnp.sum(state["contact_forces"][:, :, 2], axis=1, keepdims=True)
'''


@pytest.mark.slow
def test_a_torque_that_reads_contact_forces_sees_the_last_physics_steps():
    """`compute_torque` runs at every physics step of a control step. The contact forces it reads are the last
    physics step's: the control step's own at its first substep, then each substep's. The environment computes them
    only where a torque reads them (as here); checked against a plain loop of `Simulator` calls, and against a
    wrong loop that holds the control step's forces through its substeps, which must differ."""
    from envcoder.env import GroupedEnv, ResetPool
    from envcoder.candidates import load_candidate
    from envcoder.candidates.validate import sample_state, validate_candidate

    task = get_task("Anymal")
    sim = Simulator(task.model_file, task.substeps)
    candidate = load_candidate("contact_torque.py", ("compute_torque",), name="contact_torque",
                               source="import jax.numpy as jnp\n" + CONTACT_TORQUE)
    grouped = GroupedEnv(task, [validate_candidate(task, sim, candidate, sample_state(task, sim))], 2, (0,), sim)
    env = grouped.reset(jax.random.split(jax.random.PRNGKey(0), 1), {})
    pool = ResetPool.of(env)
    actions = jnp.full((1, 2, grouped.action_dim_max), 0.05)
    step = jax.jit(lambda env, k: grouped.step(env, actions, pool, k[None])[0])
    for i in range(4):  # the robot drops onto its feet
        env = step(env, jax.random.PRNGKey(i))
    assert float(env.contact_forces[..., 2].sum(axis=-1).min()) > 50.0  # it stands on the floor
    stepped = step(env, jax.random.PRNGKey(9))

    def plain(hold):
        data, forces = env.data, env.contact_forces
        for _ in range(task.substeps):
            ctrl = sim.clip_ctrl(40.0 * actions + 0.05 * forces[..., 2].sum(axis=-1, keepdims=True))
            data = jax.vmap(jax.vmap(sim.physics_step))(data, ctrl)
            forces = forces if hold else sim.task_contact_forces(task, data)
        return data.qpos, sim.task_contact_forces(task, data)
    qpos, forces = jax.jit(lambda: plain(False))()
    np.testing.assert_allclose(stepped.data.qpos, qpos, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stepped.contact_forces, forces, rtol=1e-4, atol=1e-3)
    held_qpos, _ = jax.jit(lambda: plain(True))()
    assert np.abs(np.asarray(held_qpos) - np.asarray(qpos)).max() > 1e-4


@pytest.mark.slow  # 30 s (Anymal) and 40 s (Humanoid) here
@pytest.mark.parametrize("name, lower", [("Anymal", 0.01), ("Humanoid", 0.065)])
def test_mujoco_c_data_builds_the_task_state_that_mjx_data_builds(name, lower):
    """The sandbox's sample states come from MuJoCo C (`Simulator.mujoco_data`, `mujoco_state`; no MJX program to
    compile, no MJX data made): the task's state built from them equals the one built from MJX's own forward pass
    of the same poses, contact forces included (float64 C against float32 MJX), standing and moving: Anymal, and
    the Humanoid whose feet are two capsules each and whose MJX solver takes its 32 deepest contacts."""
    from envcoder.candidates.validate import _builder

    task = get_task(name)
    sim = Simulator(task.model_file, task.substeps)
    model, envs = sim.mj_model, 3
    rng = np.random.default_rng(0)
    qpos = np.tile(np.asarray(sim.qpos0, np.float64), (envs, 1))
    qpos[:, 7:] += rng.uniform(-0.2, 0.2, (envs, model.nq - 7))
    qpos[:, 2] -= lower  # the feet press into the floor: contacts with forces
    qvel = rng.uniform(-0.5, 0.5, (envs, model.nv))
    build = jax.jit(_builder(task, sim))
    buffers = (jnp.zeros((envs, task.num_commands)), jnp.zeros((envs, model.nu)), jnp.zeros((envs, model.nu)),
               jnp.zeros((envs,), jnp.int32))
    from_c = build(*sim.mujoco_state(sim.mujoco_data(qpos, qvel), sim.geom_members(task.contact_geoms)), *buffers)
    mjx_data = jax.jit(jax.vmap(sim.reset))(jnp.asarray(qpos, jnp.float32), jnp.asarray(qvel, jnp.float32))
    from_mjx = build(mjx_data, sim.task_contact_forces(task, mjx_data), *buffers)
    assert float(jnp.abs(from_c["contact_forces"]).max()) > 10.0  # the floor pushes
    for name in from_c:
        np.testing.assert_allclose(from_c[name], from_mjx[name], rtol=1e-3, atol=1e-3, err_msg=name)


MESH_MODEL = """<mujoco>
  <asset><mesh name="tetrahedron" vertex="0 0 0  1 0 0  0 1 0  0 0 1"/></asset>
  <worldbody>
    <geom type="plane" size="5 5 .1"/>
    <body pos="0 0 1"><freejoint/><geom type="mesh" mesh="tetrahedron"/></body>
  </worldbody>
</mujoco>"""


@pytest.mark.slow  # 25 s here: every task stepped in a fresh process
def test_mjx_mesh_code_is_loaded_only_by_a_model_with_meshes(tmp_path):
    """MJX's mesh module (trimesh, NetworkX, scipy.spatial: 1.3-1.5 s of every command's imports on the GPU machine)
    is not loaded by the tasks' models, stepped and with their contact forces; a model with a mesh loads it and gets
    MJX's convex hull of it."""
    (tmp_path / "mesh.xml").write_text(MESH_MODEL)
    script = f"""
import sys
import jax, jax.numpy as jnp
from envcoder.sim import Simulator
from envcoder.tasks import get_task
for name in ("Anymal", "Ant", "Humanoid", "Cartpole"):
    task = get_task(name)
    simulator = Simulator(task.model_file, task.substeps)
    step = lambda d: simulator.task_contact_forces(task, simulator.physics_step(d, jnp.zeros(simulator.mj_model.nu)))
    jax.jit(step).lower(simulator.place(simulator.qpos0, jnp.zeros(simulator.mj_model.nv)))
print("tasks", sorted(m for m in ("trimesh", "networkx", "scipy.spatial") if m in sys.modules))
mesh = Simulator({str(tmp_path / "mesh.xml")!r}, 1)
print("mesh", "trimesh" in sys.modules, len(mesh.model._impl.mesh_convex), mesh.model._impl.mesh_convex[0].vert.shape)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert "tasks []" in out
    assert "mesh True 1 (4, 3)" in out


@pytest.mark.slow  # 30 s here
def test_the_physics_step_traced_ahead_serves_any_number_of_worlds_and_steps_as_before(monkeypatch):
    """`Simulator.trace_ahead` (what a run does while the sandbox validates) traces one world's physics step, in a
    thread of its own; rollouts of any number of environments traced later reuse that trace (MJX's step runs in
    Python only there), and `world_step`, jitted and inlined, steps exactly as `physics_step` does."""
    import threading

    from mujoco import mjx

    task = get_task("Cartpole")
    sim = Simulator(task.model_file, task.substeps)
    traced, step = [], mjx.step

    def counted(*args, **kwargs):
        traced.append(threading.current_thread().name)
        return step(*args, **kwargs)

    monkeypatch.setattr(mjx, "step", counted)
    sim.trace_ahead()
    for worlds in (3, 5):
        data = sim.place(jnp.broadcast_to(sim.qpos0, (worlds, sim.mj_model.nq)),
                         jnp.full((worlds, sim.mj_model.nv), 0.3, jnp.float32))
        ctrl = jnp.linspace(-1.0, 1.0, worlds * sim.mj_model.nu).reshape(worlds, sim.mj_model.nu)
        inlined = jax.jit(jax.vmap(sim.world_step))(data, ctrl, {})
        plain = jax.jit(jax.vmap(lambda d, c, p: sim.physics_step(d, c, p)))(data, ctrl, {})
        for got, want in zip(jax.tree.leaves(inlined), jax.tree.leaves(plain)):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert traced == ["envcoder-trace-ahead"] + ["MainThread"] * 2  # ahead, then only the plain steps


def test_the_physics_step_traced_ahead_for_a_run_s_environments_traces_it_batched_there(monkeypatch):
    """With `worlds`, `trace_ahead` also traces the step under a `vmap` over that many environments, in its thread
    (JAX keeps that batched trace: a rollout of as many environments traced later spent 1.8 -> 0.8 s tracing on the
    CPU, docs/benchmarks/archive/throughput.md § 13); later rollouts of any size trace no MJX step of their own. With
    `wanted()` false (the run's validation is over) nothing is traced ahead."""
    import threading

    from mujoco import mjx

    traces, stepped, step = [], [], mjx.step

    def listener(event, duration, **kwargs):
        if event.endswith("jaxpr_trace_duration") and kwargs.get("fun_name") == "physics_step":
            traces.append(threading.current_thread().name)

    def counted(*args, **kwargs):
        stepped.append(threading.current_thread().name)
        return step(*args, **kwargs)
    monkeypatch.setattr(mjx, "step", counted)
    for thread in threading.enumerate():  # an earlier test's, still tracing: its traces are not this test's
        if thread.name == "envcoder-trace-ahead":
            thread.join()
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        task = get_task("Cartpole")

        def rollout_trace(sim, worlds):
            data = sim.place(jnp.broadcast_to(sim.qpos0, (worlds, sim.mj_model.nq)),
                             jnp.zeros((worlds, sim.mj_model.nv), jnp.float32))
            jax.make_jaxpr(jax.vmap(sim.world_step))(data, jnp.zeros((worlds, sim.mj_model.nu), jnp.float32), {})
        sim = Simulator(task.model_file, task.substeps)
        sim.trace_ahead(worlds=3)
        rollout_trace(sim, 3)
        rollout_trace(sim, 5)
        assert traces == ["envcoder-trace-ahead"] * 2  # one world's step, then the step under vmap over 3
        assert stepped == ["envcoder-trace-ahead"]
        idle = Simulator(task.model_file, task.substeps)
        traces[:], stepped[:] = [], []
        idle.trace_ahead(worlds=3, wanted=lambda: False)
        rollout_trace(idle, 3)  # waits for the thread, which traced nothing: the rollout traces the step itself
        assert traces == [] and stepped == ["MainThread"]
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
