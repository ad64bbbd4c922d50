"""A find as a researcher would have written it: the offline search's structural children flattened.

A child (`envcoder.search.moves`) calls its parent's reward through a renamed copy (`_p_compute_reward`), a
donor's through another (`_d0_compute_reward`), unpacks them with `_split` and adds or re-weights terms; a child
of a child nests the same again. `flatten` writes such a file as one `compute_reward`: every helper that is called
once and runs straight through (no branch around its `return`) inlined where it is called, `_split` of a literal
pair resolved, dictionaries of terms built in one literal, the definitions nothing uses any more removed, and the
prefixes of the names it kept taken off where no other name has that name. Only what does not change the arrays'
operations is rewritten (nothing is folded or reordered), so the flat file computes what the child computes,
operation for operation, and trains as it does (`tests/test_moves.py` trains both side by side). What terms a
file's reward names (`reward_terms`, which the moves read too) is read here.
"""

from __future__ import annotations

import ast
import copy
import difflib
import re

from envcoder.search.inline import API, inline_one
from envcoder.text import parse as parse_source, unparse as unparse_source

PREFIX = re.compile(r"^(?:_p_|_d\d+_)+")
"""The prefixes `envcoder.search.moves` gives a parent's (`_p_`) and a donor's (`_d0_`, ...) module-level names."""



def reward_terms(source: str) -> list[str]:
    """The names of the components that a file's `compute_reward` returns as a dict literal, a `**terms` in it read
    from the literal assigned to `terms` (`[]` where it returns none, or not as a literal)."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return []
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "compute_reward"), None)
    if function is None:
        return []
    literals = {t.id: n.value for n in ast.walk(function) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Dict)
                for t in n.targets if isinstance(t, ast.Name)}  # `terms = {...}`, read where `**terms` is unpacked

    def keys(literal: ast.Dict, seen: frozenset) -> list[str]:
        found = []
        for key, value in zip(literal.keys, literal.values):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                found.append(key.value)
            elif key is None and isinstance(value, ast.Name) and value.id in literals and value.id not in seen:
                found += keys(literals[value.id], seen | {value.id})
        return found
    names = []
    for node in ast.walk(function):
        if (isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and len(node.value.elts) == 2
                and isinstance(node.value.elts[1], ast.Dict)):
            names += [k for k in keys(node.value.elts[1], frozenset()) if k not in names]
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
    reward.body = _returned_literal(_unread(_merged_terms(_collapsed(_split_pairs(reward.body)))))
    tree.body = _used(tree.body)
    tree = _unprefixed(tree)
    text = unparse_source(ast.fix_missing_locations(tree))
    text = re.sub(r"\n(?=def )", "\n\n\n", text).replace("\n\n\n\n", "\n\n\n")  # two blank lines before a function
    comments = [line for line in source.splitlines() if line.startswith("# ")]
    return "\n".join(comments[:1] + [text]) + "\n"


def readable_find(validator, out, source: str, starting: list[dict]) -> dict | None:
    """An `envcoder auto` find written flat as `out/best_readable.py`, checked in the sandbox (`validator`) to be
    the same program as `best.py`, and what changed from the best starting file (`starting`, the search's rows of
    its starting files, best first), in words and as a diff: the summary's record. None where there is nothing to
    flatten (or the sandbox could not write it: the text is parsed there only, `readable_text`)."""
    from envcoder.candidates.sandbox import JailedError

    try:
        found = validator.jailed(readable_text, source=source, start=starting[0]["source"] if starting else None)
    except JailedError:
        return None
    if found is None:
        return None
    same = same_programs(validator, found["as_found"], found["flat"])
    (out / "best_readable.py").write_text(found["flat"])
    return {"file": "best_readable.py", "same_program": same, "start": starting[0]["name"] if starting else None,
            "change": found["change"], "diff": found["diff"]}


def readable_text(source: str, start: str | None) -> dict | None:
    """`source` flattened (`flat`), `source` with the names the flat file took prefixes off renamed so (`as_found`:
    what it is compared with), and what changed from `start` (`change`, `diff`; empty without one); None where there
    is nothing to flatten. Run in the sandbox (`SandboxValidator.jailed`): it parses candidate text."""

    flat = flatten(source)
    if flat == source:
        return None
    words, diff = describe_change(start, flat, reward_terms) if start is not None else ("", "")
    return {"flat": flat, "as_found": renamed(source, flat), "change": words, "diff": diff}


def describe_change(start: str, find: str, terms_of) -> tuple[str, str]:
    """What changed from the starting file's source to the find's (both as written), in words (the reward terms
    added and dropped, by `terms_of(source)`) and as a unified diff."""
    before, after = terms_of(start), terms_of(find)
    added = [t for t in after if t not in before]
    dropped = [t for t in before if t not in after]
    words = "; ".join(filter(None, (
        f"terms added: {', '.join(added)}" if added else "", f"terms dropped: {', '.join(dropped)}" if dropped else "",
        "the same terms, re-weighted or re-shaped" if not added and not dropped else "")))
    diff = "".join(difflib.unified_diff(start.splitlines(keepends=True), find.splitlines(keepends=True), "start",
                                        "find"))
    return words, diff


# ---- tidying ------------------------------------------------------------------------------------------------------

def _split_pairs(body: list) -> list:
    """`a, b = (x, y)` as `a = x` and `b = y` where neither `x` nor `y` reads `a` or `b`."""
    out = []
    for statement in body:
        if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Tuple) and isinstance(statement.value, ast.Tuple)
                and len(statement.targets[0].elts) == len(statement.value.elts)
                and all(isinstance(t, ast.Name) for t in statement.targets[0].elts)):
            targets = {t.id for t in statement.targets[0].elts}
            if not any(isinstance(n, ast.Name) and n.id in targets for v in statement.value.elts
                       for n in ast.walk(v)):
                out += [ast.Assign(targets=[ast.Name(t.id, ast.Store())], value=v)
                        for t, v in zip(statement.targets[0].elts, statement.value.elts)]
                continue
        out.append(statement)
    return out


def _collapsed(body: list) -> list:
    """`a = b` (`b` a local that nothing reads afterwards, `a` untouched since `b` was first assigned) dropped, with
    `b` renamed `a` from its first assignment on."""
    body = list(body)
    i = 0
    while i < len(body):
        statement, name = body[i], _assigned_name(body[i])
        if name and isinstance(statement.value, ast.Name) and statement.value.id != name:
            other = statement.value.id
            first = next((j for j in range(i) if other in _stored(body[j])), None)
            if first is not None and not any(_reads(s, other) for s in body[i + 1:]) and not any(
                    _reads(s, name) or name in _stored(s) for s in body[first:i]):
                for s in body[first:i]:
                    for n in ast.walk(s):
                        if isinstance(n, ast.Name) and n.id == other:
                            n.id = name
                del body[i]
                continue
        i += 1
    return body


def _stored(statement) -> set[str]:
    return {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _reads(statement, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(statement))


def _merged_terms(body: list) -> list:
    """A dictionary of terms built in one literal: after `d = {...}`, each `d[key]` read as its entry's value, and
    `d = {**d, key: value}` or `d = {k: v for k, v in d.items() if k != key}` folded into the literal, until `d`
    is assigned otherwise."""
    out, literals = [], {}
    for statement in body:
        for name, (index, literal) in list(literals.items()):
            replaced = _substituted_reads(statement, name, literal)
            if replaced is None:
                del literals[name]
            else:
                statement = replaced
        name = _assigned_name(statement)
        if name in literals:
            index, literal = literals[name]
            merged = _merge(literal, statement.value, name)
            later = set().union(*(_stored(s) for s in out[index + 1:])) if out[index + 1:] else set()
            if merged is not None and not any(_reads(ast.Expr(v), n) for v in merged.values for n in later):
                out[index].value = merged
                literals[name] = (index, merged)
                continue
            del literals[name]
        out.append(statement)
        if name and isinstance(statement.value, ast.Dict) and None not in statement.value.keys and not any(
                isinstance(n, ast.Name) and n.id == name for n in ast.walk(statement.value)):
            literals[name] = (len(out) - 1, statement.value)
    return out


def _substituted_reads(statement, name: str, literal: ast.Dict):
    """`statement` with `name[key]` read as the literal's entry; itself where it does not read `name`; None where it
    reads `name` otherwise (the literal is then no longer followed), unless it only rebinds `name` from it."""
    if not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(statement)):
        return statement
    if _assigned_name(statement) == name and _merge(literal, statement.value, name) is not None:
        return statement  # folded by the caller
    value = _substituted(statement, name, literal)
    return value


def _unread(body: list) -> list:
    """Without `name = <names, or a literal of names>` (no array operation) where nothing after reads `name`."""
    out = list(body)
    for i in range(len(out) - 1, -1, -1):
        name = _assigned_name(out[i])
        value = out[i].value if name else None
        plain = value is not None and all(isinstance(n, (ast.Name, ast.Dict, ast.Tuple, ast.Constant, ast.Load))
                                          for n in ast.walk(value))
        if plain and not any(_reads(s, name) for s in out[i + 1:]):
            del out[i]
    return out


def _returned_literal(body: list) -> list:
    """`d = {...}; ...; return (x, d)` as `...; return (x, {...})` where nothing after reads `d` or changes what the
    literal reads: the components in the return, as a hand-written reward has them."""
    last = body[-1] if body else None
    if not (isinstance(last, ast.Return) and isinstance(last.value, ast.Tuple) and len(last.value.elts) == 2
            and isinstance(last.value.elts[1], ast.Name)):
        return body
    name = last.value.elts[1].id
    index = next((i for i in range(len(body) - 2, -1, -1) if name in _stored(body[i])), None)
    if index is None or _assigned_name(body[index]) != name or not isinstance(body[index].value, ast.Dict):
        return body
    literal = body[index].value
    read = {n.id for n in ast.walk(literal) if isinstance(n, ast.Name)}
    between = body[index + 1:-1]
    if any(_reads(s, name) or _stored(s) & read for s in between):
        return body
    last.value.elts[1] = literal
    return body[:index] + between + [last]


def _assigned_name(statement) -> str | None:
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
        return statement.targets[0].id
    return None


def _merge(literal: ast.Dict, value, name: str):
    entries = list(zip(literal.keys, literal.values))
    if isinstance(value, ast.Dict) and value.keys and value.keys[0] is None and isinstance(
            value.values[0], ast.Name) and value.values[0].id == name and all(k is not None for k in value.keys[1:]):
        extra = list(zip(value.keys[1:], value.values[1:]))
        if any(isinstance(n, ast.Name) and n.id == name for _, v in extra for n in ast.walk(v)):
            extra = [(k, _substituted(v, name, literal)) for k, v in extra]
            if any(v is None for _, v in extra):
                return None
        keys = {ast.unparse(k): i for i, (k, _) in enumerate(entries)}
        for k, v in extra:
            if ast.unparse(k) in keys:
                entries[keys[ast.unparse(k)]] = (k, v)
            else:
                entries.append((k, v))
        return ast.Dict(keys=[k for k, _ in entries], values=[v for _, v in entries])
    dropped = _dropped_key(value, name)
    if dropped is not None:
        kept = [(k, v) for k, v in entries if ast.unparse(k) != dropped]
        return ast.Dict(keys=[k for k, _ in kept], values=[v for _, v in kept])
    return None


def _dropped_key(value, name: str) -> str | None:
    """The key that `{k: v for k, v in name.items() if k != KEY}` leaves out, or None for any other value."""
    if not (isinstance(value, ast.DictComp) and len(value.generators) == 1):
        return None
    generator = value.generators[0]
    if not (isinstance(generator.iter, ast.Call) and isinstance(generator.iter.func, ast.Attribute)
            and generator.iter.func.attr == "items" and isinstance(generator.iter.func.value, ast.Name)
            and generator.iter.func.value.id == name and len(generator.ifs) == 1):
        return None
    test = generator.ifs[0]
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.NotEq)
            and isinstance(test.comparators[0], ast.Constant) and isinstance(test.left, ast.Name)):
        return ast.unparse(test.comparators[0])
    return None


def _substituted(value, name: str, literal: ast.Dict):
    """`value` with `name[key]` (a literal key of `literal`) replaced by that entry's value; None where `name` is
    read otherwise."""
    table = {ast.unparse(k): v for k, v in zip(literal.keys, literal.values)}

    class Substitute(ast.NodeTransformer):
        failed = False

        def visit_Subscript(self, node):
            if isinstance(node.value, ast.Name) and node.value.id == name:
                key = ast.unparse(node.slice)
                if key in table:
                    return copy.deepcopy(table[key])
                self.failed = True
            return self.generic_visit(node)
    substitute = Substitute()
    out = substitute.visit(copy.deepcopy(value))
    left = any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(out))
    return None if substitute.failed or left else out


def _used(body: list) -> list:
    """The module's statements less the functions and constants that no shaping function reaches."""
    defined = {}
    for statement in body:
        if isinstance(statement, ast.FunctionDef):
            defined[statement.name] = statement
        elif isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    defined[target.id] = statement
    reached, frontier = set(), [n for n in defined if n in API or n in ("PARAMS", "ACTION_DIM")]
    while frontier:
        name = frontier.pop()
        if name in reached:
            continue
        reached.add(name)
        frontier += [n.id for n in ast.walk(defined[name]) if isinstance(n, ast.Name) and n.id in defined]
    return [s for s in body if not (isinstance(s, (ast.FunctionDef, ast.Assign)) and s in defined.values()
                                    and not any(n in reached for n, d in defined.items() if d is s))]


def _unprefixed(tree: ast.Module) -> ast.Module:
    """The move's prefixes taken off every name where the bare name is not taken."""
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)} | {
        a.arg for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) for a in n.args.args}
    renames = {}
    for name in sorted(names):
        bare = PREFIX.sub("", name)
        if bare != name and bare and bare not in names and bare not in renames.values():
            renames[name] = bare
    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            node.id = renames.get(node.id, node.id)
            return node

        def visit_FunctionDef(self, node):
            node.name = renames.get(node.name, node.name)
            self.generic_visit(node)
            return node
    return Rename().visit(tree)


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
    return all(_program_text(first[api]) == _program_text(second[api]) for api in first)


def _program_text(program) -> list[str]:
    """Each of the program's modules as text without source locations and argument or result names."""
    texts = []
    for exported in program.exported:
        lines = [line for line in exported.mlir_module().splitlines() if not line.startswith("#loc")]
        text = re.sub(r"\s*loc\((?:#loc\d*|unknown)\)", "", "\n".join(lines))
        texts.append(re.sub(r'jax\.(?:arg|result)_info = "[^"]*",?\s*', "", text))
    return texts
