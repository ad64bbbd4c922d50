"""The guide and the README: every relative link leads to something, and the pages generated from the code are
current (CI's `mkdocs build --strict` checks both for the site too: docs/hooks.py)."""

import importlib
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"```.*?```", re.S)


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_relative_link_of_the_readme_and_the_guide_leads_somewhere():
    """A link to a file or folder of the repository, or, from a benchmark page, to a raw record that
    docs/benchmarks/raw.tar.xz holds; links to the web are not followed here (CI has no network)."""
    hooks = _hooks()
    dead = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for match in LINK.finditer(FENCE.sub("", page.read_text())):
            target = match.group(1)
            path = target.split("#")[0]
            if not path or re.match(r"[a-z]+:", target):
                continue
            if (page.parent / path).exists():
                continue
            if page.is_relative_to(ROOT / "docs") and hooks.where(page.relative_to(ROOT / "docs"), target):
                continue
            dead.append(f"{page.relative_to(ROOT)}: {target}")
    assert not dead, "\n".join(dead)


def test_the_generated_pages_are_what_the_code_makes_now():
    """docs/guide/cli.md and tasks.md hold the command line's help and the tasks' fields, committed: changing an
    option or a state field without `python docs/hooks.py` fails here (and the site's build)."""
    assert _hooks().stale_pages() == []
    cli = (ROOT / "docs" / "guide" / "cli.md").read_text()
    assert "## envcoder eval" in cli and "--envs-per-candidate" in cli and "--seeds" in cli
    assert "| `dof_pos` |" in (ROOT / "docs" / "guide" / "tasks.md").read_text()


def test_every_page_the_command_line_s_help_names_exists():
    """The help of every command names pages of the repository by path (docs/guide/gpus.md, a benchmark page with
    its section): each exists, and so does each section it names (§ N)."""
    from envcoder.cli_parser import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # argparse keeps its subcommands only there
    named = []
    for name, command in commands.items():
        text = " ".join(command.format_help().split()).replace("- ", "-")
        for path, section in re.findall(r"(docs/[\w/.-]+\.md)(?: § (\d+))?", text):
            page = ROOT / path
            if not page.exists():
                named.append(f"{name}: {path}")
            elif section and not re.search(rf"^#+ {section}\.", page.read_text(), re.M):
                named.append(f"{name}: {path} § {section}")
    assert not named, named


DOTTED = re.compile(r"`(envcoder(?:\.[A-Za-z_]\w*)+)")


def _resolves(name: str) -> bool:
    """Whether `envcoder.a.b.C.d` names something: the longest importable module, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_every_dotted_name_the_guide_and_the_code_mention_exists():
    """A module, class or function named as `envcoder.x.y` (in backquotes) in the README, the guide or a docstring
    or comment of the package is one that imports: a rename leaves no stale name behind."""
    named: dict[str, set[str]] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md")),
                 *sorted((ROOT / "src" / "envcoder").rglob("*.py"))]:
        for match in DOTTED.finditer(path.read_text()):
            named.setdefault(match.group(1), set()).add(str(path.relative_to(ROOT)))
    assert len(named) > 50  # the scan finds what it should
    stale = {name: sorted(where) for name, where in named.items() if not _resolves(name)}
    assert not stale, stale
