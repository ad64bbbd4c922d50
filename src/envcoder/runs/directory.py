"""The run directory: everything needed to read, compare and reproduce a run.

    <out>/config.json        resolved settings, task, candidate list, versions, command line
    <out>/ppo.yaml           the resolved settings of the algorithm (dqn.yaml for --algo dqn), reusable as --config
    <out>/candidates/*.py    the source of every candidate as it was evaluated
    <out>/failures.json      candidates left out, with file, function and reason
    <out>/metrics.csv        one row per iteration and group: training metrics
    <out>/results.json       final evaluation per group and the ranking
    <out>/checkpoints/       the full training state (for --resume) and each candidate's best and last policy
"""

from __future__ import annotations

import csv
import dataclasses
import fcntl
import io
import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import yaml

from envcoder.atomic import file_mode, write_atomically


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; null reads as "no value"
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def read_json(path: Path):
    """A JSON file's content; a damaged one (cut short, not JSON) is a `ValueError` that names it."""
    text = path.read_text()
    try:
        return json.loads(text)
    except ValueError as err:
        raise ValueError(f"{path} is damaged ({err}): restore it, or start the run again with another --out") from None


def write_json(path: Path, obj) -> None:
    write_atomically(path, json.dumps(_jsonable(obj), indent=2) + "\n")


class UnwritableDirectoryError(ValueError):
    """A run directory this process cannot create or write in; the message says what to change."""


def writable_directory(path: Path, option: str = "--out") -> None:
    """Create `path` (with its parents) and check that this process can write in it: else `UnwritableDirectoryError`
    naming the path, why (read-only file system, permission denied …) and the `option` to change."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path / ".write-test", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        os.unlink(path / ".write-test")
    except OSError as err:
        raise UnwritableDirectoryError(f"cannot write the run directory {str(path)!r}: {err.strerror or err}; choose "
                                       f"an {option} in a folder you can write to") from None


_HELD: dict[Path, int] = {}
"""The run directories this process writes, each with the descriptor of its held lock (`_lock`)."""


def _lock(path: Path) -> None:
    """Hold `path/.lock` for as long as this process lives: a second process that would write the same run directory
    (an `eval --resume` of a run still training) is refused, rather than both training it."""
    key = path.resolve()
    if key in _HELD:
        return
    fd = os.open(path / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, file_mode())
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise FileExistsError(f"run directory {str(path)!r} is in use by another envcoder process (pid {holder}): "
                              "wait for it to end, or choose another --out") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _HELD[key] = fd


class RunDirectory:
    def __init__(self, path: str | Path, resume: bool = False, writes: bool = True):
        """A new run directory, or with `resume` an existing one whose records are continued. Without `writes`
        (the processes of a multi-host run other than process 0) it is only read: every write does nothing."""
        self.path = Path(path)
        self.writes = writes
        self.checkpoints = self.path / "checkpoints"
        self._metrics_file = None
        self._metrics_writer = None
        if resume and not (self.path / "config.json").exists():
            raise FileNotFoundError(f"{self.path}/config.json does not exist: {self.path} is not an `envcoder eval` "
                                    "run directory")
        if not writes:
            return
        if not resume and self.path.exists() and any(self.path.iterdir()):
            raise FileExistsError(f"run directory {str(self.path)!r} already exists and is not empty; "
                                  f"choose another --out, or continue it with `envcoder eval --resume {self.path}`")
        self._created = not resume and not self.path.exists()
        writable_directory(self.path)
        (self.path / "candidates").mkdir(exist_ok=True)
        _lock(self.path)

    def discard(self) -> None:
        """Remove the directory again where this run created it (a run that trained nothing leaves nothing)."""
        if self.writes and getattr(self, "_created", False):
            shutil.rmtree(self.path, ignore_errors=True)
            fd = _HELD.pop(self.path.resolve(), None)
            if fd is not None:
                os.close(fd)

    def read_config(self) -> dict:
        return read_json(self.path / "config.json")

    def read_hung(self) -> list[dict]:
        """`hung.json`: the candidates a hung iteration left out of this run, `[{"candidates", "after_iteration",
        "reason"}]` ([] when none)."""
        path = self.path / "hung.json"
        return read_json(path) if path.exists() else []

    def keep_metrics_before(self, iteration: int) -> None:
        """Drop the metrics rows of iterations from `iteration` on (written after the checkpoint that a
        resumed run continues from), so the file reads as if the run had not been interrupted."""
        if not self.writes:
            return
        path = self.path / "metrics.csv"
        if not path.exists():
            return
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        kept = rows[:1] + [row for row in rows[1:] if int(row[0]) < iteration]
        if len(kept) > 1:
            buffer = io.StringIO()
            csv.writer(buffer).writerows(kept)
            write_atomically(path, buffer.getvalue())
            self._columns = rows[0]
            self._metrics_file = open(path, "a", newline="")
            self._metrics_writer = csv.writer(self._metrics_file)
        else:
            path.unlink()

    def _metrics_rows(self) -> list[dict]:
        path = self.path / "metrics.csv"
        if not path.exists():
            return []
        if self._metrics_file is not None and not self._metrics_file.closed:
            self._metrics_file.flush()
        with open(path, newline="") as f:
            return list(csv.DictReader(f))

    def read_metrics(self, labels: list[str], start: int, end: int, keys) -> list[tuple[int, dict]]:
        """`(iteration, {key: [G] array})` of the iterations `[start, end)` in metrics.csv, for the groups
        `labels` (`candidate#seed`; NaN where a group has no value)."""
        index = {label: g for g, label in enumerate(labels)}
        out: dict[int, dict] = {}
        for row in self._metrics_rows():
            iteration, g = int(row["iteration"]), index.get(f"{row['candidate']}#{row['seed']}")
            if g is None or not start <= iteration < end:
                continue
            values = out.setdefault(iteration, {key: np.full(len(labels), np.nan) for key in keys})
            for key in keys:
                values[key][g] = float(row[key]) if row[key] != "" else np.nan
        return sorted(out.items())

    def read_series(self, candidate: str, key: str) -> dict[int, float]:
        """`{iteration: mean over seeds of key}` of one candidate in metrics.csv (iterations where no seed has a
        value are left out)."""
        per: dict[int, list[float]] = {}
        for row in self._metrics_rows():
            if row["candidate"] == candidate and row[key] != "":
                per.setdefault(int(row["iteration"]), []).append(float(row[key]))
        return {i: float(np.mean(v)) for i, v in sorted(per.items())}

    def read_group_series(self, key: str) -> dict[tuple[str, int], dict[int, float]]:
        """`{(candidate, seed): {iteration: key}}` of every group in metrics.csv (NaN where a row has no value)."""
        series: dict[tuple[str, int], dict[int, float]] = {}
        for row in self._metrics_rows():
            series.setdefault((row["candidate"], int(row["seed"])), {})[int(row["iteration"])] = (
                float(row[key]) if row[key] != "" else float("nan"))
        return series

    def write_config(self, config: dict) -> None:
        if not self.writes:
            return
        write_json(self.path / "config.json", config)

    def write_algorithm_config(self, config, algo: str) -> None:
        """The resolved settings of the run's algorithm as YAML (`<algo>.yaml`), reusable as `--config`."""
        if not self.writes:
            return
        def plain(value):  # YAML has lists, not tuples
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            return list(value) if isinstance(value, tuple) else value
        settings = plain(dataclasses.asdict(config))
        text = f"# Resolved {algo.upper()} settings of this run (rl_games names); reuse with --config.\n"
        write_atomically(self.path / f"{algo}.yaml", text + yaml.safe_dump(settings, sort_keys=False))

    def write_candidates(self, candidates) -> None:
        if not self.writes:
            return
        for candidate in candidates:
            (self.path / "candidates" / f"{candidate.name}.py").write_text(candidate.source)

    def write_failures(self, failures) -> None:
        if not self.writes:
            return
        write_json(self.path / "failures.json", [dataclasses.asdict(f) for f in failures])

    def append_metrics(self, iteration: int, labels: list[str], metrics: dict, extra: dict) -> None:
        """One row per group for this iteration; `metrics` holds `[G]` arrays, `extra` run-wide scalars."""
        if not self.writes:
            return
        if self._metrics_writer is None:
            self._columns = ["iteration", "candidate", "seed", *extra, *metrics]
            self._metrics_file = open(self.path / "metrics.csv", "w", newline="")
            self._metrics_writer = csv.writer(self._metrics_file)
            self._metrics_writer.writerow(self._columns)
        for g, label in enumerate(labels):
            name, seed = label.rsplit("#", 1)
            # By the header's columns: a later rung of a halving schedule may lack some candidates' reward terms.
            values = {"iteration": iteration, "candidate": name, "seed": seed, **extra,
                      **{k: float(v[g]) for k, v in metrics.items()}}
            row = [values.get(column, float("nan")) for column in self._columns]
            self._metrics_writer.writerow(["" if isinstance(v, float) and math.isnan(v) else v for v in row])
        self._metrics_file.flush()

    def write_results(self, results: dict) -> None:
        if not self.writes:
            return
        write_json(self.path / "results.json", results)

    def close(self) -> None:
        if self._metrics_file is not None:
            self._metrics_file.close()
