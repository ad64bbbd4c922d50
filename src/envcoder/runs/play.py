"""`envcoder play`: load one candidate's trained policy from a run, run deterministic episodes, print their
statistics and render a video with MuJoCo's renderer (EGL on a GPU machine, OSMesa on a CPU one; set
`MUJOCO_GL` to choose)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import numpy as np
from rich.console import Console
from rich.table import Table

from envcoder.rl.config import algorithm
from envcoder.runs.checkpoint import load_policy
from envcoder.runs.directory import RunDirectory
from envcoder.candidates.prepare import sandboxed_candidates
from envcoder.runs.eval_settings import settings_from_run
from envcoder.runs.job import Plan
from envcoder.sim import Simulator


@dataclasses.dataclass(frozen=True)
class PlayResult:
    task_fitness: list[float]
    episode_length: list[int]
    shaped_return: list[float]
    checkpoint: str
    video: str | None


def _checkpoint(run: Path, candidate: str, seed: int, which: str, config, console: Console) -> Path:
    """The policy file to play: the group's best (or its last where it has no best yet), or its last."""
    folder = run / "checkpoints" / f"{candidate}#{seed}"
    path = folder / f"{which}.npz"
    if which == "best" and not path.exists() and (folder / "last.npz").exists():
        console.print(f"no best checkpoint (none after save_best_after={config.save_best_after}); using the last")
        path = folder / "last.npz"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: the run saved no checkpoint for {candidate}#{seed} yet")
    return path


def _trained_candidate(run: Path, settings, task, candidate: str):
    """The candidate, validated: only the files it is made of, validated in the sandbox and loaded; they must be
    unchanged since the run."""
    stems = {part.split("[")[0] for part in candidate.split("+")}
    candidates, failures = sandboxed_candidates(settings, task, only=stems)
    if candidate not in {c.name for c in candidates}:
        reasons = "; ".join(f.error for f in failures) or "it is not among the files' candidates"
        raise ValueError(f"{candidate} cannot be played: {reasons}")
    chosen = next(c for c in candidates if c.name == candidate)
    saved = run / "candidates" / f"{candidate}.py"
    if saved.exists() and saved.read_text() != chosen.source:
        source = chosen.path or f"task {task.name}'s default shaping"
        raise ValueError(f"{source} changed since the run; its policy was trained on the copy in {saved} "
                         "(play it with the task as the run had it)")
    return chosen


def play(run: str | Path, candidate: str, seed: int | None = None, which: str = "best", episodes: int = 1,
         video: str | Path | None = None, width: int = 480, height: int = 360,
         console: Console | None = None, trajectory: str | Path | None = None) -> PlayResult:
    """Run `episodes` deterministic episodes of `candidate`'s policy from `run` and print their statistics; with
    `video`, render them; with `trajectory`, write their `qpos [T, episodes, nq]` and `qvel [T, episodes, nv]`
    (at each control step's start)
    and lengths to that .npz."""
    console = console or Console()
    run = Path(run)
    if video:
        check_video_writer(Path(video))
    if trajectory and not Path(trajectory).resolve().parent.is_dir():
        raise FileNotFoundError(f"--trajectory {trajectory}: its folder does not exist (make it first)")
    settings = settings_from_run(run)
    plan = Plan.of(settings, run / f"{settings.algo}.yaml")
    task, fitness_name, config = plan.task, plan.fitness_name, plan.config
    seed = settings.seeds[0] if seed is None else seed
    if seed not in settings.seeds:
        raise ValueError(f"{run} trained seeds {list(settings.seeds)}, not {seed}")
    trained = RunDirectory(run, resume=True, writes=False).read_config()["candidates"]
    if candidate not in trained:
        raise ValueError(f"{run} has no candidate {candidate!r}; it has {', '.join(trained)}")
    path = _checkpoint(run, candidate, seed, which, config, console)
    chosen = _trained_candidate(run, settings, task, candidate)
    console.print(f"{candidate}#{seed}: compiling the policy and the {task.name} physics, then {episodes} "
                  f"deterministic episode(s) from {path.name} (a first run compiles for a minute or two)…",
                  highlight=False)
    sim = Simulator(task.model_file, task.substeps)
    learner = algorithm(settings.algo).learner(task, [chosen], config, episodes, (seed,), sim, fitness=fitness_name)
    ts = learner.init()
    params, obs_rms, meta = load_policy(path, jax.tree.map(lambda x: x[0], ts.params),
                                        jax.tree.map(lambda x: x[0], ts.obs_rms))
    ts = ts._replace(params=jax.tree.map(lambda x: x[None], params), obs_rms=jax.tree.map(lambda x: x[None], obs_rms))
    out = jax.device_get(learner.evaluate_recorded(ts))
    result = PlayResult(task_fitness=[float(x) for x in out["task_fitness"][0]],
                        episode_length=[int(x) for x in out["episode_length"][0]],
                        shaped_return=[float(x) for x in out["shaped_return"][0]],
                        checkpoint=str(path), video=str(video) if video else None)
    table = Table(title=f"{candidate}#{seed} ({path.name}, iteration {meta['iteration']}): deterministic episodes",
                  title_justify="left")
    for column in ("episode", fitness_name, "length", "shaped return"):
        table.add_column(column, justify="right")
    for e in range(episodes):
        table.add_row(str(e), f"{result.task_fitness[e]:.4f}", str(result.episode_length[e]),
                      f"{result.shaped_return[e]:.2f}")
    table.add_row("mean", f"{np.mean(result.task_fitness):.4f}", f"{np.mean(result.episode_length):.0f}",
                  f"{np.mean(result.shaped_return):.2f}")
    console.print(table)
    if trajectory:
        np.savez_compressed(trajectory, qpos=out["qpos"][:, 0], qvel=out["qvel"][:, 0],
                            episode_length=np.asarray(result.episode_length),
                            task_fitness=np.asarray(result.task_fitness), control_dt=sim.control_dt)
        console.print(f"trajectory: {trajectory}", highlight=False, soft_wrap=True)
    if video:
        console.print(f"rendering {int(np.sum(result.episode_length))} frames at {width}×{height}…", highlight=False)
        frames = render(sim, out["qpos"][:, 0], result.episode_length, width, height)
        write_video(Path(video), frames, fps=1.0 / sim.control_dt)
        console.print(f"video: {video} ({len(frames)} frames at {1.0 / sim.control_dt:g} fps)", highlight=False,
                      soft_wrap=True)  # the path stays whole, to copy
        if Path(video).resolve().parent == (run / "videos").resolve():  # the run's videos: its report shows them
            from envcoder.runs.report import write_report

            console.print(f"report: {write_report(run)} shows it", highlight=False, soft_wrap=True)
    return result


def render(sim: Simulator, qpos: np.ndarray, lengths, width: int, height: int) -> list[np.ndarray]:
    """Frames of each episode in turn (`qpos [T, E, nq]`), with a camera that follows the robot's base."""
    import os

    import mujoco

    if not hasattr(mujoco, "Renderer"):  # MuJoCo could not load the OpenGL library MUJOCO_GL names
        backend = os.environ.get("MUJOCO_GL", "glfw")
        raise RuntimeError(f"MuJoCo's renderer is unavailable: MUJOCO_GL={backend} but its OpenGL library could not "
                           "be loaded. Install it (Debian: libegl1 for egl, libosmesa6 for osmesa) or set "
                           "MUJOCO_GL to one that is installed; the episode statistics above need no rendering")
    model = sim.mj_model
    data = mujoco.MjData(model)
    camera = mujoco.MjvCamera()
    camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
    camera.trackbodyid = 1
    camera.distance = max(1.5, 0.6 * model.stat.extent)
    model.vis.headlight.ambient[:] = 0.45  # the task models carry no lights of their own
    model.vis.headlight.diffuse[:] = 0.7
    camera.elevation, camera.azimuth = -20.0, 135.0
    frames = []
    try:
        renderer = mujoco.Renderer(model, height, width)
    except Exception as err:  # noqa: BLE001 - e.g. PyOpenGL without its library: AttributeError on glGetError
        backend = os.environ.get("MUJOCO_GL", "glfw")
        raise RuntimeError(f"cannot render the video: MuJoCo's OpenGL backend MUJOCO_GL={backend} does not work on "
                           f"this machine ({type(err).__name__}: {err}). Install it (Debian: libosmesa6 for osmesa, "
                           "libegl1 for egl) or set MUJOCO_GL to one that is installed; the episode statistics above "
                           "need no rendering") from None
    with renderer:
        for e, length in enumerate(lengths):
            for t in range(int(length)):
                data.qpos[:] = qpos[t, e]
                mujoco.mj_forward(model, data)
                renderer.update_scene(data, camera)
                frames.append(renderer.render().copy())
    return frames


def check_video_writer(path: Path) -> None:
    """A `ValueError` that says what to install or choose, unless `write_video` can write `path` here."""
    suffix = path.suffix.lower()
    if suffix not in (".mp4", ".gif"):
        raise ValueError(f"--video {path}: write a .mp4 or a .gif")
    try:
        if suffix == ".mp4":
            import imageio  # noqa: F401
            import imageio_ffmpeg  # noqa: F401
        else:
            import PIL  # noqa: F401
    except ImportError as err:
        need = 'the video extra: pip install -e ".[video]", or write a .gif (Pillow only)' if suffix == ".mp4" \
            else "Pillow: pip install pillow"
        raise ValueError(f"--video {path} needs {need} ({err})") from None


def write_video(path: Path, frames, fps: float) -> None:
    """An .mp4 (imageio's ffmpeg), or an animated .gif (Pillow; needs no ffmpeg), written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".partial" + path.suffix)
    if path.suffix.lower() == ".gif":
        from PIL import Image

        images = [Image.fromarray(frame) for frame in frames]
        # GIF delays are whole hundredths of a second; browsers slow anything under 20 ms down to 100 ms.
        images[0].save(tmp, save_all=True, append_images=images[1:], loop=0,
                       duration=max(20, round(1000 / fps, -1)))
    else:
        import imageio

        with imageio.get_writer(tmp, fps=fps, macro_block_size=8) as writer:
            for frame in frames:
                writer.append_data(frame)
    tmp.replace(path)
