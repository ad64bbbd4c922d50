"""Text that a candidate supplies (its file's error messages, names, reward components), shown as text: never as
Rich markup, never as a terminal's control sequence (design invariant 6); and its source parsed one thread at a
time (`parse`, `unparse`) and laid out within a width (`wrapped`)."""

from __future__ import annotations

import ast
import io
import keyword
import re
import threading
import tokenize

from rich.markup import escape

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Control characters but the newline and the tab (an ESC starts a terminal sequence: a window title, a colour), and
the bidirectional controls (U+202E shows the text after it backwards: a file name that reads as another)."""
_LINE_BREAKS = re.compile(r"[\n\t]")


def plain(text: object) -> str:
    """`text` with its control characters written out (`\\x1b`, `\\u202e`), for a log, a report or a Markdown
    file."""
    return _CONTROL.sub(_written_out, str(text))


def one_line(text: object, limit: int | None = None) -> str:
    """`plain`, and its newlines and tabs written out too: text a candidate, a model, a file name or a run directory
    supplies, which must not print lines of its own (a fake ranking table); cut to `limit` characters."""
    line = _LINE_BREAKS.sub(_written_out, plain(text))
    return line if limit is None or len(line) <= limit else line[:limit - 1] + "…"


def _written_out(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: object) -> str:
    """`text` for a Rich console or table: `one_line`, and its square brackets escaped so that none opens a tag."""
    return escape(one_line(text))


def console(**options):
    """A Rich console for a command's messages: on a terminal they wrap at spaces within its width (a word longer than
    a line folds); elsewhere (a log file, a pipe, a batch job) each message is one line, never cut in a value."""
    from rich.console import Console

    made = Console(**options)
    made.soft_wrap = not made.is_terminal
    return made


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


WIDTH = 100
"""The longest line of a flat find (`envcoder.search.readable`) that `wrapped` leaves whole: `ast.unparse` writes
each statement on one line (a joint-limit cost took 190 characters, a returned dictionary of six terms 160)."""


def wrapped(text: str, width: int = WIDTH) -> str:
    """`text` (Python) with each line longer than `width` broken inside parentheses or braces (after the opening
    one, after a comma, before a binary `+` or `-`), as late as fits, its continuation lines indented four spaces
    more than the statement; `text` itself where the result would not parse to the same tree (the layout is all
    that changes). A comment is left whole."""
    lines = []
    for line in text.splitlines():
        lines += _broken(line, width) if len(line) > width else [line]
    out = "\n".join(lines) + ("\n" if text.endswith("\n") else "")
    try:
        return out if ast.dump(parse(out)) == ast.dump(parse(text)) else text
    except SyntaxError:
        return text


def _broken(line: str, width: int) -> list[str]:
    """One line as `wrapped` breaks it, at the columns of `_cuts`."""
    cuts = _cuts(line)
    pieces, start, lead = [], 0, ""
    while len(lead) + len(line) - start > width:
        fits = [c for c in cuts if start < c <= start + width - len(lead)]
        cut = max(fits, default=min((c for c in cuts if c > start), default=None))
        if cut is None:
            break
        pieces.append(lead + line[start:cut])
        start, lead = cut + (line[cut:cut + 1] == " "), " " * (len(line) - len(line.lstrip()) + 4)
    return pieces + [lead + line[start:]]


def _cuts(line: str) -> list[int]:
    """The columns where `wrapped` may break a line: after an opening parenthesis or brace, and inside one (not in
    a subscript's `[:, 5]`) after each comma and at the space before each binary `+` or `-`."""
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(line + "\n").readline) if t.start[0] == 1
                  and t.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT)]
    except (tokenize.TokenError, SyntaxError):
        return []
    opened, cuts, before = [], [], None
    for token in tokens:
        if token.type == tokenize.OP and token.string in "([{":
            cuts += [token.end[1]] if token.string in "({" else []
            opened.append(token.string)
        elif token.type == tokenize.OP and token.string in ")]}":
            opened = opened[:-1]
        elif opened and opened[-1] in "({" and token.type == tokenize.OP:
            operand = before is not None and (before.type in (tokenize.NUMBER, tokenize.STRING) or before.string
                                              in ")]}" or before.type == tokenize.NAME
                                              and not keyword.iskeyword(before.string))
            if token.string == ",":
                cuts.append(token.end[1])
            elif token.string in "+-" and operand and line[token.start[1] - 1:token.start[1]] == " ":
                cuts.append(token.start[1] - 1)
        before = token
    return [c for c in cuts if line[c:c + 1] not in (")", "]", "}")]  # not before a closing bracket: `f(\n)`
