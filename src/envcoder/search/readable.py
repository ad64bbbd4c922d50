"""A find as a researcher would have written it: the offline search's structural children flattened.

A child (`envcoder.search.moves`) calls its parent's reward through a renamed copy (`_p_compute_reward`), a
donor's through another (`_d0_compute_reward`), unpacks them with `_split` and adds or re-weights terms; a child
of a child nests the same again. `flatten` writes such a file as one `compute_reward`: every helper that is called
once and runs straight through (no branch around its `return`) inlined where it is called, `_split` of a literal
pair or of an array expression resolved, and tidied (`envcoder.search.tidy`): dictionaries of terms built in one
literal, the definitions and imports nothing uses any more removed, the prefixes of the names it kept taken off
where no other name has that name, the start's quotes, and tuned constants as the float32 they train as
(`0.9498099`, not `0.9498099088668823`); `readable_text` also breaks its lines longer than 100 characters inside
their brackets. Only what does not change the arrays' operations is rewritten (nothing is folded or reordered), so
the flat file computes what the child computes, operation for operation, and trains as it does
(`tests/search/test_moves.py` trains both side by side). What terms a file's reward names (`reward_terms`, which the moves
read too) is read here.
"""

from __future__ import annotations

import ast
import difflib
import re

from envcoder.search.inline import inline_one
from envcoder.search.tidy import (PREFIX, collapsed, imports_used, merged_terms, named_entries, quoted_like,
                                  returned_literal, rounded_constants, short_floats, split_pairs, unprefixed, unread,
                                  used)
from envcoder.text import parse as parse_source, unparse as unparse_source, wrapped


def reward_terms(source: str) -> list[str]:
    """The names of the components that a file's `compute_reward` returns as a dict literal or a name bound to one,
    a `**terms` in it read from the literal last assigned to `terms` before it (`terms = {**terms, "k": v}` adds to
    what `terms` held); `[]` where it returns none, or not so."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return []
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "compute_reward"), None)
    if function is None:
        return []
    held: dict[str, list[str]] = {}  # the keys each name holds, as the statements run in their order

    def keys(literal: ast.Dict) -> list[str]:
        found = []
        for key, value in zip(literal.keys, literal.values):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                found.append(key.value)
            elif key is None and isinstance(value, ast.Name):
                found += held.get(value.id, [])
        return found
    names = []
    nodes = [n for n in ast.walk(function) if isinstance(n, (ast.Assign, ast.Return))]
    for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset)):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            found = keys(node.value)
            held.update({t.id: found for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) == 2:
            returned = node.value.elts[1]
            found = keys(returned) if isinstance(returned, ast.Dict) else held.get(getattr(returned, "id", None), [])
            names += [k for k in found if k not in names]
    return names


def flatten(source: str) -> str:
    """`source` with its `compute_reward` flattened (see the module docstring); the source itself where there is
    nothing to flatten or it cannot be parsed."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return source
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    reward = functions.get("compute_reward")
    if reward is None:
        return source
    inlined = 0
    while inlined < 64 and inline_one(reward, functions):  # one call a pass; a child of a child of ... nests a few
        inlined += 1
    if not inlined:
        return source
    reward.body = returned_literal(unread(merged_terms(named_entries(collapsed(split_pairs(reward.body))))))
    tree.body = used(tree.body)
    tree = short_floats(unprefixed(tree))
    tree.body = imports_used(tree)
    text = unparse_source(ast.fix_missing_locations(tree))
    text = re.sub(r"\n(?=def )", "\n\n\n", text).replace("\n\n\n\n", "\n\n\n")  # two blank lines before a function
    comments = [re.sub(r" \(proposed weight [^)]*\)", "", line) for line in source.splitlines()
                if line.startswith("# ")]  # the move's note, less the weights it drew: the constants say what trained
    return "\n".join(comments[:1] + [text]) + "\n"


def readable_find(validator, out, source: str, starting: list[dict]) -> dict | None:
    """An `envcoder auto` find written flat as `out/best_readable.py`, checked in the sandbox (`validator`) to be
    the same program as `best.py`, and what changed from the best starting file (`starting`, the search's rows of
    its starting files, best first), in words and as a diff: the summary's record. Where the sandbox could not write
    it (the text is parsed there only, `readable_text`), a record without a file that says why."""
    from envcoder.candidates.sandbox import JailedError

    try:
        found = validator.jailed(readable_text, source=source, start=starting[0]["source"] if starting else None)
    except JailedError as err:
        return {"file": None, "why": f"best.py could not be written flat in the sandbox ({err})",
                "start": starting[0]["name"] if starting else None}
    same = same_programs(validator, found["as_found"], found["flat"])
    (out / "best_readable.py").write_text(found["shown"])
    return {"file": "best_readable.py", "same_program": same, "start": starting[0]["name"] if starting else None,
            "change": found["change"], "diff": found["diff"], "inlined": found["inlined"]}


def readable_text(source: str, start: str | None) -> dict | None:
    """`source` flattened (`flat`; `inlined`: whether anything was; `shown`: the same with its constants to 4
    significant digits, `rounded_constants`, what best_readable.py holds), `source` with the names the flat file took
    prefixes off renamed so (`as_found`: what it is compared with), and what changed from `start` (`change`, `diff`,
    of `shown`; empty without one). A file with nothing to flatten is the find as it reads (what changed from the start is still
    said). Run in the sandbox (`SandboxValidator.jailed`): it parses candidate text."""

    flat = flatten(source)
    inlined = flat != source
    flat = wrapped(quoted_like(flat, start) if start is not None else flat) if inlined or source.startswith(
        "# offline: ") else source
    shown = rounded_constants(flat)
    words, diff = describe_change(start, shown, reward_terms) if start is not None else ("", "")
    return {"flat": flat, "shown": shown, "as_found": renamed(source, flat), "change": words, "diff": diff,
            "inlined": inlined}


def describe_change(start: str, find: str, terms_of) -> tuple[str, str]:
    """What changed from the starting file's source to the find's (both as written), in words (the reward terms
    added and dropped, by `terms_of(source)`) and as a unified diff."""
    before, after = terms_of(start), terms_of(find)
    added = [t for t in after if t not in before]
    dropped = [t for t in before if t not in after]
    was = turned_terms(start)
    turned = [f"{t!r} {'rewards what it is written to penalize' if cost else 'is a cost'} (weight {value:.3g})"
              for t, (value, cost) in turned_terms(find).items() if t in after and t not in was]
    old, new = module_numbers(start), module_numbers(find)
    changed = [f"{name} {old[name]:.4g} → {new[name]:.4g}" for name in new if name in old and new[name] != old[name]]
    largest = max((abs(v) for v in new.values()), default=0.0)
    small = [f"{name} = {value:.3g}" for name, value in new.items()
             if name not in old and largest > 0 and abs(value) < SMALL_WEIGHT * largest]
    words = "; ".join(filter(None, (
        f"terms added: {', '.join(added)}" if added else "", f"terms dropped: {', '.join(dropped)}" if dropped else "",
        "the same terms, re-weighted or re-shaped" if not added and not dropped and not changed else "",
        f"constants changed: {', '.join(changed)}" if changed else "",
        f"new constants under {SMALL_WEIGHT:.1%} of the largest ({largest:.4g}), likely too small for their terms to "
        f"matter: {', '.join(small)}" if small else "",
        f"signs the search turned: {', '.join(turned)}" if turned else "")))
    diff = "".join(difflib.unified_diff(start.splitlines(keepends=True), find.splitlines(keepends=True), "start",
                                        "find"))
    return words, diff


SMALL_WEIGHT = 1e-3
"""A constant a find adds at under this share of its largest constant is named as likely too small to matter."""


def module_numbers(source: str) -> dict[str, float]:
    """The module-level `NAME = <number>` constants of a file (`PARAMS` tables aside), by name without the prefixes
    a search adds (`PREFIX`): what a find's description compares with its start's."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return {}
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            negated = isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub)
            literal = getattr(value.operand if negated else value, "value", None)
            if isinstance(literal, (int, float)) and not isinstance(literal, bool):
                found[PREFIX.sub("", node.targets[0].id)] = float(-literal if negated else literal)
    return found


def turned_terms(source: str) -> dict[str, tuple[float, bool]]:
    """The terms of a file's `compute_reward` written `name = W * (expression)` whose weight `W`, a module-level
    number, is below zero (a population's copy may turn a sign: `envcoder.search.population.INITIAL_FLIP`): `{name:
    (W, whether the expression is written as a cost, -(...))}`. A cost with a weight below zero rewards what it is
    named for; a bonus with one is a cost."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return {}

    def number(node):  # a float literal, or one with a minus
        negated = isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
        value = getattr(node.operand if negated else node, "value", None)
        return (-value if negated else value) if isinstance(value, float) else None
    numbers = {t.id: number(n.value) for n in tree.body if isinstance(n, ast.Assign) and number(n.value) is not None
               for t in n.targets if isinstance(t, ast.Name)}
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "compute_reward"), None)
    turned = {}
    for node in ast.walk(function) if function is not None else ():
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Mult)
                and isinstance(node.value.left, ast.Name) and numbers.get(node.value.left.id, 0.0) < 0.0):
            cost = isinstance(node.value.right, ast.UnaryOp) and isinstance(node.value.right.op, ast.USub)
            turned[node.targets[0].id] = (numbers[node.value.left.id], cost)
    return turned


def renamed(source: str, flat: str) -> str:
    """`source` with every module-level name that `flat` (its `flatten`) took a prefix off renamed so."""
    names = {n.id for n in ast.walk(parse_source(flat)) if isinstance(n, ast.Name)} | {
        n.name for n in ast.walk(parse_source(flat)) if isinstance(n, ast.FunctionDef)}
    tree = parse_source(source)
    constants = {t.id for s in tree.body if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
    renames = {c: PREFIX.sub("", c) for c in constants if PREFIX.sub("", c) != c and PREFIX.sub("", c) in names
               and PREFIX.sub("", c) not in constants}

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            node.id = renames.get(node.id, node.id)
            return node
    return unparse_source(ast.fix_missing_locations(Rename().visit(tree)))


def same_programs(validator, as_found: str, flat: str) -> bool:
    """Whether the sandbox (`validator`, a `SandboxValidator`) hands over the same programs for the flat file and
    for the file as found with its names renamed as in the flat one (`as_found`, `renamed`: a function's constants
    are its program's inputs in the order of their names): each function's StableHLO, its source locations aside."""
    verdicts = validator.validate([("readable_check_as_found", as_found),
                                   ("readable_check_flat", flat)])
    if not all(v.ok for v in verdicts):
        return False
    first, second = (v.candidates[0].functions for v in verdicts)
    if set(first) != set(second):
        return False
    return all(first[api].key == second[api].key for api in first)


