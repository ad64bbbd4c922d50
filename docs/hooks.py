"""MkDocs hooks: the pages generated from the code (the tasks' state fields, the command line's help)."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

MARKERS = {}


def _cell(text: str) -> str:
    """Text in a Markdown table's cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _tasks() -> str:
    from envcoder.tasks import TASKS

    parts = []
    for task in TASKS.values():
        parts += [f"## {task.name}", "", task.description, "", "| field | shape | units | meaning |",
                  "|---|---|---|---|"]
        parts += [f"| `{name}` | `{f.shape}` | {f.units} | {_cell(f.meaning)} |"
                  for name, f in task.state_fields.items()]
        parts += ["", "Fitness (`--fitness`, the first is the default):", ""]
        parts += [f"- `{name}`: {f.doc} ({'higher' if f.higher_is_better else 'lower'} is better)"
                  for name, f in task.fitness.items()]
        parts.append("")
    return "\n".join(parts)


def _cli() -> str:
    from envcoder.cli_parser import build_parser

    parser = build_parser()
    parts = []
    commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sub in commands.choices.items():
        out = io.StringIO()
        with redirect_stdout(out):
            sub.print_help()
        parts += [f"## envcoder {name}", "", "```text", out.getvalue().rstrip(), "```", ""]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:
    for marker, make in (("<!-- envcoder:tasks -->", _tasks), ("<!-- envcoder:cli -->", _cli)):
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
