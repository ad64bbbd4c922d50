"""Files written whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: str | Path, data: bytes | str) -> None:
    """Write `data` (text as UTF-8) to `path`, creating its folder: a reader, or a process killed at any moment,
    sees the previous file or the new one, never a part of one. The data goes to a temporary file of its own
    beside `path` (concurrent writers do not share one), which then replaces `path`; on any error the temporary
    file is removed and the error raised."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data.encode() if isinstance(data, str) else data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
