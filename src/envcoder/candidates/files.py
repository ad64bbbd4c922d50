"""Candidate files before they are read: names, sizes and where they may be."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Sequence

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


def candidate_files(functions: str | Path | Sequence[str | Path]) -> list[Path]:
    """The candidate files of `functions`: a folder (its `*.py` files not starting with `_`, sorted by name), a
    `.py` file, or several of either, in the order given. Two files of one name (a candidate's name is its file's
    stem) are an error that names both."""
    paths = [Path(functions)] if isinstance(functions, (str, Path)) else [Path(p) for p in functions]
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
            if not found:
                raise FileNotFoundError(f"candidate directory {str(path)!r} has no .py candidate files")
            files += found
        elif path.suffix == ".py" and path.exists():
            files.append(path)
        else:
            raise FileNotFoundError(f"candidate directory {str(path)!r} does not exist" if path.suffix != ".py"
                                    else f"candidate file {str(path)!r} does not exist")
    seen: dict[str, Path] = {}
    for file in files:
        if file.stem in seen and seen[file.stem].resolve() != file.resolve():
            raise ValueError(f"two candidate files are named {file.stem!r}: {seen[file.stem]} and {file}; rename one "
                             "(a candidate's name is its file's)")
        seen.setdefault(file.stem, file)
    return list(dict.fromkeys(seen.values()))
