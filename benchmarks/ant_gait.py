"""What a trained Ant does with its body: how deep its feet sink into the floor, how far its joints pass their
limits, how long it is in the air, how fast it runs (docs/benchmarks/eureka.md, "The field's budget").

`record` plays every candidate and seed of `envcoder eval` runs (their best checkpoints, deterministic episodes)
and keeps each policy's joint positions (`envcoder play --trajectory`); `analyze` measures them with MuJoCo on the
CPU against the task's own model, whatever physics the run trained under.

    python benchmarks/ant_gait.py record runs/ant_preset runs/ant_preset_s4 --episodes 8 --out OUT/gait
    python benchmarks/ant_gait.py analyze OUT/gait --out docs/benchmarks/eureka/ant_gait.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

FEET = ("foot_1", "foot_2", "foot_3", "foot_4")


def record(runs: list[Path], episodes: int, out: Path, seeds: int | None = None) -> None:
    from envcoder.runs.play import play

    out.mkdir(parents=True, exist_ok=True)
    for run in runs:
        config = json.loads((run / "config.json").read_text())
        for candidate in config["candidates"]:
            for seed in config["seeds"][:seeds]:
                target = out / f"{run.name}__{candidate}__{seed}.npz"
                if not target.exists():
                    play(run, candidate, seed, episodes=episodes, trajectory=target)


def measure(path: Path) -> dict:
    import mujoco

    from envcoder.tasks.ant import TASK

    model = mujoco.MjModel.from_xml_path(str(TASK.model_file))
    data = mujoco.MjData(model)
    saved = np.load(path)
    qpos, lengths, dt = saved["qpos"], saved["episode_length"], float(saved["control_dt"])
    lower, upper = model.jnt_range[1:, 0], model.jnt_range[1:, 1]
    floor = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    qvel = saved["qvel"] if "qvel" in saved else None  # older recordings have none
    depth, past, airborne, height, speed, spin, joint_speed = [], [], [], [], [], [], []
    for e, length in enumerate(lengths):
        for t in range(int(length)):
            data.qpos[:] = qpos[t, e]
            if qvel is not None:
                data.qvel[:] = qvel[t, e]
            mujoco.mj_forward(model, data)
            if qvel is not None:  # each body's angular speed in the world (what PhysX would clamp), the joints' rates
                spin.append(float(np.max(np.linalg.norm(data.cvel[1:, :3], axis=1))))
                joint_speed.append(float(np.max(np.abs(qvel[t, e, 6:]))))
            touching = [c for c in data.contact[:data.ncon] if floor in (c.geom1, c.geom2)]
            depth.append(max([-c.dist for c in touching], default=0.0))
            airborne.append(not touching)
            joints = qpos[t, e, 7:]
            past.append(float(np.max(np.maximum(joints - upper, lower - joints))))
            height.append(qpos[t, e, 2])
        speed.append((qpos[int(length) - 1, e, 0] - qpos[0, e, 0]) / (dt * max(int(length) - 1, 1)))
    depth, past = np.asarray(depth), np.degrees(np.asarray(past))
    return {"episodes": len(lengths), "episode_length": float(np.mean(lengths)),
            "task_fitness": float(np.mean(saved["task_fitness"])), "speed_m_per_s": float(np.mean(speed)),
            "foot_depth_mm": {"mean": 1000 * float(depth.mean()), "p99": 1000 * float(np.percentile(depth, 99)),
                              "max": 1000 * float(depth.max())},
            "joint_past_limit_deg": {"p50": float(np.percentile(past, 50)), "p99": float(np.percentile(past, 99)),
                                     "max": float(past.max()), "steps_over_5deg": float(np.mean(past > 5))},
            "airborne_steps": float(np.mean(airborne)), "torso_height_max_m": float(np.max(height)),
            **({"body_angular_speed_rad_s": _spread(spin, (64.0, 100.0)),
                "joint_speed_rad_s": _spread(joint_speed, (64.0, 100.0))} if spin else {})}


def _spread(values, limits) -> dict:
    """The p50, p99 and maximum of `values`, and the share of them above each of `limits`."""
    values = np.asarray(values)
    return {"p50": float(np.percentile(values, 50)), "p99": float(np.percentile(values, 99)),
            "max": float(values.max()), **{f"over_{limit:g}": float(np.mean(values > limit)) for limit in limits}}


def analyze(folder: Path, out: Path | None) -> None:
    rows = {path.stem: measure(path) for path in sorted(folder.glob("*.npz"))}
    for name, row in rows.items():
        joints = row["joint_past_limit_deg"]
        print(f"{name:60s} {row['speed_m_per_s']:6.2f} m/s | feet {row['foot_depth_mm']['mean']:5.1f} mm mean "
              f"{row['foot_depth_mm']['p99']:5.1f} p99 | joints past limit p99 {joints['p99']:5.1f} deg, "
              f"{100 * joints['steps_over_5deg']:4.1f}% of steps > 5 deg | airborne "
              f"{100 * row['airborne_steps']:4.1f}% | torso max {row['torso_height_max_m']:.2f} m"
              + (f" | body spin p99 {row['body_angular_speed_rad_s']['p99']:5.1f} rad/s, "
                 f"{100 * row['body_angular_speed_rad_s']['over_64']:4.1f}% of steps > 64, joint rate p99 "
                 f"{row['joint_speed_rad_s']['p99']:5.1f} rad/s" if "joint_speed_rad_s" in row else ""))
    if out:
        out.write_text(json.dumps(rows, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("runs", type=Path, nargs="+")
    rec.add_argument("--episodes", type=int, default=8)
    rec.add_argument("--seeds", type=int, default=None, help="each candidate's first this many seeds (default all)")
    rec.add_argument("--out", type=Path, required=True)
    ana = sub.add_parser("analyze")
    ana.add_argument("folder", type=Path)
    ana.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.command == "record":
        record(args.runs, args.episodes, args.out, args.seeds)
    else:
        analyze(args.folder, args.out)


if __name__ == "__main__":
    main()
