"""Text that a candidate supplies (its file's error messages, names, reward components), shown as text: never as
Rich markup, never as a terminal's control sequence (design invariant 6); and its source parsed one thread at a
time (`parse`, `unparse`)."""

from __future__ import annotations

import ast
import re
import threading

from rich.markup import escape

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""Control characters but the newline and the tab: an ESC starts a terminal sequence (a window title, a colour)."""


def plain(text: object) -> str:
    """`text` with its control characters written out (`\\x1b`), for a log, a report or a Markdown file."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def shown(text: object) -> str:
    """`text` for a Rich console or table: `plain`, and its square brackets escaped so that none opens a tag."""
    return escape(plain(text))


_AST = threading.Lock()
"""Python 3.11's `ast` keeps state of the interpreter's while it converts a tree: two threads that parse at once
(the offline proposer's pool) ended `envcoder auto` with "SystemError: AST constructor recursion depth mismatch"."""


def parse(source: str, **options) -> ast.Module:
    """`ast.parse(source)`, one thread at a time."""
    with _AST:
        return ast.parse(source, **options)


def unparse(node: ast.AST) -> str:
    """`ast.unparse(node)`, one thread at a time."""
    with _AST:
        return ast.unparse(node)


def column(line: str, utf8_offset: int) -> int:
    """The column in characters on `line` of a node's `col_offset` or `end_col_offset`, which `ast` counts in UTF-8
    bytes: they differ where non-ASCII text comes before it on the line (`state["ω"] > 0.25`)."""
    return len(line.encode()[:utf8_offset].decode(errors="ignore"))


def plural(n: int, word: str, many: str | None = None) -> str:
    """`n` and `word` agreeing in number: "1 candidate", "2 candidates" (`many`: where it is not word + "s")."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"
