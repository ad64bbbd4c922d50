"""The Ant and Humanoid models against what they take from IsaacGymEnvs' nv_ant.xml and nv_humanoid.xml
(docs/benchmarks/learning.md lists each value and what still differs), checked with MuJoCo C on the CPU."""

import mujoco
import numpy as np
import pytest

from envcoder.sim import Simulator
from envcoder.tasks import get_task


def _model(name: str) -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_path(str(get_task(name).model_file))


def _settle(model: mujoco.MjModel, qpos: np.ndarray, seconds: float) -> mujoco.MjData:
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    for _ in range(int(round(seconds / model.opt.timestep))):
        mujoco.mj_step(model, data)
    return data


def test_the_ant_has_nv_ants_motors_joints_and_step():
    model, task = _model("Ant"), get_task("Ant")
    np.testing.assert_allclose(model.actuator_ctrlrange[:, 1], 15.0)  # gear 15 × powerScale 1
    hips, ankles = np.degrees(model.jnt_range[1::2]), np.degrees(model.jnt_range[2::2])
    np.testing.assert_allclose(np.abs(hips), 40.0, atol=1e-4)
    np.testing.assert_allclose(np.sort(np.abs(ankles), axis=1), [[30.0, 100.0]] * 4, atol=1e-4)
    np.testing.assert_allclose(model.opt.timestep * task.substeps, 1 / 60, rtol=1e-4)  # Isaac's dt, 2 substeps
    np.testing.assert_allclose(model.dof_damping[6:], 0.1)


def test_no_two_geoms_of_the_ant_can_touch_within_its_joint_ranges():
    """The ant.xml leaves out the pairs of its own geoms (Isaac's actors collide with themselves) since none can
    touch: the model with every pair collides, posed at random between and at the joint limits, high in the air,
    has no contact."""
    spec = mujoco.MjSpec.from_file(str(get_task("Ant").model_file))
    for geom in spec.geoms:
        geom.contype, geom.conaffinity = 1, 1
    model = spec.compile()
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    low, high = model.jnt_range[1:, 0], model.jnt_range[1:, 1]
    for k in range(5_000):
        data.qpos[:] = model.qpos0
        data.qpos[2] = 5.0
        data.qpos[7:] = rng.uniform(low, high) if k % 2 else np.where(rng.random(8) < 0.5, low, high)
        mujoco.mj_forward(model, data)
        assert data.ncon == 0, [(model.geom(c.geom1).name, model.geom(c.geom2).name) for c in data.contact]


@pytest.mark.parametrize("name", ["Ant", "Humanoid"])
def test_every_geom_of_the_ant_and_the_humanoid_collides_with_the_floor(name):
    model = _model(name)
    floor = model.geom("floor").id
    pairs = {frozenset(p) for p in zip(model.pair_geom1.tolist(), model.pair_geom2.tolist())}
    for geom in range(model.ngeom):
        if geom == floor:
            continue
        by_bits = (model.geom_contype[geom] & model.geom_conaffinity[floor]) or \
            (model.geom_contype[floor] & model.geom_conaffinity[geom])
        assert by_bits or frozenset((geom, floor)) in pairs, model.geom(geom).name


def test_the_humanoid_dropped_on_its_side_rests_on_the_floor_not_under_it():
    """With feet-only contacts it fell through the floor (torso at -0.93 m after 1.5 s)."""
    model = _model("Humanoid")
    qpos = np.array(model.qpos0)
    qpos[2], qpos[3:7] = 0.6, [np.sqrt(0.5), np.sqrt(0.5), 0.0, 0.0]  # lying on its side
    data = _settle(model, qpos, 1.5)
    assert 0.05 < data.qpos[2] < 0.5
    assert np.all(np.isfinite(data.qpos))


def _touching(model: mujoco.MjModel, joints: dict[str, float]) -> set[tuple[str, str]]:
    """The pairs of geoms in contact with the Humanoid posed high in the air at `joints` (degrees)."""
    data = mujoco.MjData(model)
    data.qpos[:] = model.qpos0
    data.qpos[2] = 3.0
    for joint, degrees in joints.items():
        data.qpos[model.jnt_qposadr[model.joint(joint).id]] = np.radians(degrees)
    mujoco.mj_forward(model, data)
    return {tuple(sorted((model.geom(c.geom1).name, model.geom(c.geom2).name))) for c in data.contact[:data.ncon]}


def test_the_humanoids_legs_collide_with_each_other():
    """The legs posed through each other (both hips turned in to their limits, the right knee bent) touch: four
    contacts between thighs and shins."""
    pose = {"right_hip_x": 15.0, "left_hip_x": 15.0, "right_hip_z": -60.0, "left_hip_z": 35.0, "right_knee": -90.0}
    assert _touching(_model("Humanoid"), pose) == {("left_shin", "right_shin"), ("left_shin", "right_thigh"),
                                                  ("left_thigh", "right_shin"), ("left_thigh", "right_thigh")}


def test_the_humanoids_arm_swung_across_its_body_meets_its_waist_pelvis_and_other_thigh():
    """The right arm swung across the body (shoulders 70° and -30°, elbow -70°) goes through the lower waist, the
    pelvis and the left thigh: six contacts, where the arms used to pass through the body."""
    pose = {"right_shoulder1": 70.0, "right_shoulder2": -30.0, "right_elbow": -70.0}
    assert _touching(_model("Humanoid"), pose) == {
        ("butt", "right_hand"), ("butt", "right_lower_arm"), ("left_thigh", "right_hand"),
        ("left_thigh", "right_lower_arm"), ("lower_waist", "right_lower_arm"), ("lower_waist", "right_upper_arm")}


@pytest.mark.slow  # 30 s here: the Humanoid stepped
def test_the_humanoid_collides_every_pair_of_body_parts_that_isaac_collides():
    """IsaacGymEnvs collides every pair of nv_humanoid's bodies that are not parent and child (its head and hands
    are bodies of their own, here geoms of the torso and the lower arms). Posed at random between and at the joint
    limits, high in the air, the model touches in exactly the pairs that a model colliding every pair of geoms
    touches in, less those of a parent and a child in Isaac's tree: none is missing, none is extra."""
    model = _model("Humanoid")
    spec = mujoco.MjSpec.from_file(str(get_task("Humanoid").model_file))
    for geom in spec.geoms:
        geom.contype, geom.conaffinity = 1, 1
    every = spec.compile()
    every.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_FILTERPARENT
    own_body = {"head": "torso", "right_hand": "right_lower_arm", "left_hand": "left_lower_arm"}  # their parents

    def isaac_body(name):
        return name if name in own_body else every.body(every.geom_bodyid[every.geom(name).id]).name

    def parent(body):
        return own_body.get(body) or every.body(every.body_parentid[every.body(body).id]).name

    def isaacs(a, b):
        first, second = isaac_body(a), isaac_body(b)
        return first != second and parent(first) != second and parent(second) != first
    rng = np.random.default_rng(0)
    joints = [every.joint(j).name for j in range(1, every.njnt)]
    low, high = np.degrees(every.jnt_range[1:, 0]), np.degrees(every.jnt_range[1:, 1])
    seen = set()
    for k in range(3_000):
        pose = dict(zip(joints, rng.uniform(low, high) if k % 2 else np.where(rng.random(len(low)) < 0.5, low, high)))
        expected = {pair for pair in _touching(every, pose) if isaacs(*pair)}
        assert _touching(model, pose) == expected, pose
        seen |= expected
    assert len(seen) > 100  # arms with the body and the legs, legs with each other and the body


def test_the_humanoid_standing_carries_its_weight_on_both_capsules_of_each_foot():
    """Stood on the floor at its reference pose, after 0.25 s (before its knees give): the task's contact force on
    each foot (`contact_forces`, as the sandbox's sample states compute it) holds up half the robot's weight to 5%,
    and both capsules of each foot push, the inner one more."""
    task = get_task("Humanoid")
    sim = Simulator(task.model_file, task.substeps)
    data = _settle(sim.mj_model, np.r_[sim.mj_model.qpos0[:2], sim.mj_model.qpos0[2] - 0.055, sim.mj_model.qpos0[3:]],
                   0.25)
    half_weight = sim.mj_model.body_subtreemass[1] * 9.81 / 2  # about 200 N
    _, feet = sim.mujoco_state([data], sim.geom_members(task.contact_geoms))
    np.testing.assert_allclose(feet[0, :, 2], half_weight, rtol=0.05)
    _, capsules = sim.mujoco_state([data], sim.geom_members([c for foot in task.contact_geoms for c in foot]))
    outer, inner = capsules[0, 0::2, 2], capsules[0, 1::2, 2]  # right_right, left_right; left_left, right_left
    assert np.all(outer > 0.15 * half_weight) and np.all(inner > outer)
    np.testing.assert_allclose(outer + inner, feet[0, :, 2], rtol=1e-6)


def test_the_humanoid_has_nv_humanoids_joint_ranges_springs_and_damping():
    model = _model("Humanoid")
    expected = {  # joint: (range in degrees, damping, stiffness), nv_humanoid.xml's joint classes
        "right_hip_x": ((-45, 15), 5, 10), "left_hip_y": ((-120, 45), 5, 20), "right_knee": ((-160, 2), 0.1, 5),
        "left_ankle_x": ((-50, 50), 1, 2), "abdomen_z": ((-45, 45), 5, 20), "right_shoulder1": ((-90, 70), 5, 10),
        "left_elbow": ((-90, 50), 1, 2)}
    for name, (degrees, damping, stiffness) in expected.items():
        joint = model.joint(name)
        np.testing.assert_allclose(np.degrees(model.jnt_range[joint.id]), degrees, atol=1e-4, err_msg=name)
        assert model.dof_damping[model.jnt_dofadr[joint.id]] == pytest.approx(damping), name
        assert model.jnt_stiffness[joint.id] == pytest.approx(stiffness), name
