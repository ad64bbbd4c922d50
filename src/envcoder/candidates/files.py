"""Candidate files before they are read: names, sizes, kinds of file and where they may be."""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from pathlib import Path
from typing import Sequence

from envcoder.shaping.api import CandidateError

NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
"""A candidate file's name (without `.py`): it becomes a directory name and a label in every record."""


SUFFIXES = (".py", ".txt")
"""A candidate file's kinds: envcoder's or Isaac Gym's format (`.py`), or a language model's answer (`.txt`)."""

MAX_SOURCE_BYTES = 256 * 2**10
"""The largest candidate file read (a shaping file is a few KiB; the limit keeps a huge one out of memory and out of
the run directory)."""

MAX_NAME_BYTES = 200
"""The longest candidate name, in UTF-8 bytes: names become directory names (at most 255 bytes on common
filesystems), with room for a suffix."""


def check_name(name: str, file: str) -> None:
    """A candidate's name becomes a directory name and a label: letters, digits, `_`, `-` and `.` only, at most
    `MAX_NAME_BYTES` bytes."""
    if not NAME_PATTERN.fullmatch(name):
        raise CandidateError(file, f"the file name {name + '.py'!r} has characters other than letters, digits, '_', "
                                   "'-' and '.' (candidate names become directory names and labels): rename the file")
    check_length(name, file)


def check_length(name: str, file: str) -> None:
    """A candidate's (or a sweep variant's) name fits a directory name: at most `MAX_NAME_BYTES` bytes."""
    if len(name.encode()) > MAX_NAME_BYTES:
        raise CandidateError(file, f"the name is {len(name.encode())} bytes long (at most {MAX_NAME_BYTES}: it becomes "
                                   "a directory name); for a sweep, a variant's name holds its values: rename the "
                                   "file or sweep fewer constants")


def read_source(path: Path, folder: Path | None = None) -> str:
    """A candidate file's text (UTF-8), or a `CandidateError` that says why it cannot be used. The file is vetted
    before it is read: a regular file (not a FIFO, device or folder), inside `folder` (default: the folder it is
    listed in; a link that leads out of it is refused), at most `MAX_SOURCE_BYTES`."""
    file, path = str(path), Path(path)
    folder = Path(folder if folder is not None else path.parent).resolve()
    target = path.resolve()
    if target != folder and folder not in target.parents:
        raise CandidateError(file, f"is a link to {target}, outside its folder {folder}: copy the file into the "
                                   "folder instead")
    try:  # opened without following a link or blocking (a FIFO), then checked on what was opened
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise CandidateError(file, f"cannot read the file: {err.strerror or err}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CandidateError(file, "is not a regular file (a FIFO, device or folder): candidate files are plain "
                                       "text files")
        if info.st_size > MAX_SOURCE_BYTES:
            raise CandidateError(file, f"is {info.st_size / 2**10:,.0f} KiB; a candidate file may be at most "
                                       f"{MAX_SOURCE_BYTES // 2**10} KiB")
        data = handle.read(MAX_SOURCE_BYTES + 1)
    if len(data) > MAX_SOURCE_BYTES:
        raise CandidateError(file, f"is larger than {MAX_SOURCE_BYTES // 2**10} KiB, the most a candidate file may be")
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
    """A candidate file left out of a run, and why: each field one line with its control characters written out
    (`envcoder.text.one_line`), whoever supplied the text, so that `failures.json`, the report, the console and a
    search's records show it as text."""

    file: str
    name: str
    error: str

    def __post_init__(self):
        from envcoder.text import one_line

        for field in ("file", "name", "error"):
            object.__setattr__(self, field, one_line(getattr(self, field)))


def candidate_files(functions: str | Path | Sequence[str | Path]) -> list[Path]:
    """The candidate files of `functions`: a folder (its `*.py` and `*.txt` files not starting with `_`, sorted by
    name; a `.txt` file is a language model's answer with a reward written for Isaac Gym), a `.py` or `.txt` file,
    or several of either, in the order given. Two files of one name (a candidate's name is its file's stem) are an
    error that names both."""
    paths = [Path(functions)] if isinstance(functions, (str, Path)) else [Path(p) for p in functions]
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and not p.name.startswith("_"))
            if not found:
                raise FileNotFoundError(f"candidate directory {str(path)!r} has no .py or .txt candidate files")
            files += found
        elif path.suffix in SUFFIXES and path.exists():
            files.append(path)
        elif path.exists():
            raise FileNotFoundError(f"{str(path)!r} is neither a folder of candidate files nor a .py or .txt file: give "
                                    "a folder, or a candidate's .py (or an LLM answer's .txt) file")
        else:
            raise FileNotFoundError(f"candidate directory {str(path)!r} does not exist" if path.suffix not in SUFFIXES
                                    else f"candidate file {str(path)!r} does not exist")
    seen: dict[str, Path] = {}
    for file in files:
        if file.stem in seen and seen[file.stem].resolve() != file.resolve():
            raise ValueError(f"two candidate files are named {file.stem!r}: {seen[file.stem]} and {file}; rename one "
                             "(a candidate's name is its file's)")
        seen.setdefault(file.stem, file)
    return list(dict.fromkeys(seen.values()))
