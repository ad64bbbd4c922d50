"""Files written whole or not at all."""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path


@functools.cache
def file_mode() -> int:
    """The mode that `open` gives a new file in this process (0o666 less the umask): a file written here has the
    same mode as one the run's other writers (TensorBoard, NumPy) create, not the temporary file's 0o600."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomically(path: str | Path, data: bytes | str) -> None:
    """Write `data` (text as UTF-8) to `path`, creating its folder: a reader, or a process killed at any moment,
    sees the previous file or the new one, never a part of one. The data goes to a temporary file of its own
    beside `path` (concurrent writers do not share one), which then replaces `path`; on any error the temporary
    file is removed and the error raised."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(handle, file_mode())
        with os.fdopen(handle, "wb") as file:
            file.write(data.encode() if isinstance(data, str) else data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
