"""Candidate files before they are read: names, sizes and where they may be."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from envcoder.shaping.api import CandidateError

NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
"""A candidate file's name (without `.py`): it becomes a directory name and a label in every record."""


def check_name(name: str, file: str) -> None:
    """A candidate's name becomes a directory name and a label: letters, digits, `_`, `-` and `.` only."""
    if not NAME_PATTERN.fullmatch(name):
        raise CandidateError(file, f"the file name {name + '.py'!r} has characters other than letters, digits, '_', "
                                   "'-' and '.' (candidate names become directory names and labels): rename the file")


def read_source(path: Path) -> str:
    """A candidate file's text (UTF-8), or a `CandidateError` that says why it cannot be used."""
    file = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise CandidateError(file, f"cannot read the file: {err.strerror or err}") from None
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CandidateError(file, f"is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}): save "
                                   "it as UTF-8") from None
    if not source.strip():
        raise CandidateError(file, "the file is empty: write at least one shaping function")
    return source


@dataclasses.dataclass(frozen=True)
class LoadFailure:
    """A candidate file left out of a run, and why."""

    file: str
    name: str
    error: str


def candidate_files(directory: str | Path) -> list[Path]:
    """The candidate files of `directory`: its `*.py` files not starting with `_`, sorted by name."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"candidate directory {str(directory)!r} does not exist")
    files = sorted(p for p in directory.glob("*.py") if not p.name.startswith("_"))
    if not files:
        raise FileNotFoundError(f"candidate directory {str(directory)!r} has no .py candidate files")
    return files
