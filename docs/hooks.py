"""The guide's pages generated from the code, and its links to what is not a page.

- `docs/guide/tasks.md` and `docs/guide/cli.md` hold, between `<!-- envcoder:NAME -->` and `<!-- /envcoder:NAME -->`,
  text made from the code (the tasks' state fields, the command line's help). It is committed, so that the pages
  read whole in the repository; `python docs/hooks.py` writes it again, and the site's build fails where the
  committed text is not what the code makes now (`mkdocs build --strict` in CI).
- A benchmark page's link to a raw record kept in `docs/benchmarks/raw.tar.xz`, or to a file or folder of the
  repository that is not a page (a script, a run's folder), becomes its path in code in the site, with where it is:
  the site has no such file, and a link would be a 404. Any other link the site cannot follow fails the build.
"""

from __future__ import annotations

import functools
import io
import re
import tarfile
from contextlib import redirect_stdout
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
RAW = DOCS / "benchmarks" / "raw.tar.xz"
"""The raw records of the benchmark pages, archived: `tar xJf docs/benchmarks/raw.tar.xz -C docs/benchmarks`."""


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
    import os

    from envcoder.cli_parser import build_parser

    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps the help to the terminal's width: the page's is fixed
    try:
        parser = build_parser()
        parts = []
        commands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        for name, sub in commands.choices.items():
            out = io.StringIO()
            with redirect_stdout(out):
                sub.print_help()
            parts += [f"## envcoder {name}", "", "```text", out.getvalue().rstrip(), "```", ""]
    finally:
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
    return "\n".join(parts)


GENERATED = {"guide/tasks.md": ("tasks", _tasks), "guide/cli.md": ("cli", _cli)}
"""The pages with generated text: page → (marker name, what makes the text)."""


def _span(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- envcoder:{name} -->\n)(.*?)(<!-- /envcoder:{name} -->)", re.S)


def generated(page: str, markdown: str) -> str:
    """`markdown` (the text of `page`) with its generated text made again from the code."""
    name, make = GENERATED[page]
    span = _span(name)
    if not span.search(markdown):
        raise ValueError(f"docs/{page} has no <!-- envcoder:{name} --> … <!-- /envcoder:{name} --> span")
    return span.sub(lambda m: m.group(1) + "\n" + make() + "\n" + m.group(3), markdown)


def stale_pages() -> list[str]:
    """The generated pages whose committed text is not what the code makes now."""
    return [page for page in GENERATED if generated(page, (DOCS / page).read_text()) != (DOCS / page).read_text()]


@functools.lru_cache(maxsize=1)
def raw_records() -> frozenset[str]:
    """The paths (relative to docs/benchmarks) that raw.tar.xz holds, files and the folders above them."""
    if not RAW.exists():
        return frozenset()
    with tarfile.open(RAW) as archive:
        names = {name.removeprefix("./").rstrip("/") for name in archive.getnames()}
    folders = {str(parent) for name in names for parent in Path(name).parents if str(parent) != "."}
    return frozenset(names | folders)


LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)


def where(page: Path, target: str) -> str | None:
    """Where a relative link `target` of the page `page` (a path in docs/) leads when it is not a page or a picture
    of the site: "raw.tar.xz" or "the repository"; None for a page, a picture, or what exists nowhere."""
    path = target.split("#")[0]
    if not path or re.match(r"[a-z]+:", target):
        return None
    resolved = (DOCS / page).parent / path
    if resolved.is_file() and resolved.suffix in (".md", ".png", ".svg", ".gif", ".jpg") \
            and DOCS in resolved.resolve().parents:
        return None
    if resolved.exists():
        return "the repository"
    benchmarks = DOCS / "benchmarks"
    try:
        inside = resolved.resolve().relative_to(benchmarks)
    except ValueError:
        return None
    return "raw.tar.xz" if str(inside).rstrip("/") in raw_records() else None


def with_plain_records(page: Path, markdown: str) -> str:
    """`markdown` with each link to what the site does not hold (`where`) as the path in code and where it is."""
    def plain(match: re.Match) -> str:
        place = where(page, match.group(2))
        if place is None:
            return match.group(0)
        path = match.group(2)
        resolved = ((DOCS / page).parent / path.split("#")[0]).resolve()
        shown = resolved.relative_to(ROOT) if ROOT in resolved.parents else path
        text = match.group(1)
        note = f"`{shown}` in raw.tar.xz" if place == "raw.tar.xz" else f"`{shown}` in the repository"
        bare = text.strip("`").rstrip("/")
        return note if bare in (path.rstrip("/"), str(shown), Path(path).name) else f"{text} ({note})"

    parts = FENCE.split(markdown)
    fences = FENCE.findall(markdown)
    out = [LINK.sub(plain, part) for part in parts]
    return "".join(x for pair in zip(out, fences + [""]) for x in pair)


def on_page_markdown(markdown: str, page, config, files) -> str:
    from mkdocs.exceptions import PluginError

    src = page.file.src_uri
    if src in GENERATED and generated(src, markdown) != markdown:
        raise PluginError(f"docs/{src} is not what the code makes now: run `python docs/hooks.py` and commit it")
    return with_plain_records(Path(src), markdown)


if __name__ == "__main__":  # write the generated pages again
    for name in GENERATED:
        (DOCS / name).write_text(generated(name, (DOCS / name).read_text()))
        print(f"wrote docs/{name}")
