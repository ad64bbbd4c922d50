"""Rewrites of a flattened reward's statements that keep its array operations as they are, in their order (nothing
is folded or reordered), so that the tidy file compiles to the same program (`envcoder.search.readable`): pairs
split, copies collapsed, a dictionary of terms built in one literal and returned, what nothing reads dropped (an
unread result is in no program: tracing drops it), the
moves' prefixes taken off, the start's quotes, and a tuned constant written as the float32 it trains as."""

from __future__ import annotations

import ast
import copy
import io
import keyword
import re
import tokenize

import numpy as np

from envcoder.search.inline import API

PREFIX = re.compile(r"^(?:_p_|_d\d+_)+")
"""The prefixes `envcoder.search.moves` gives a parent's (`_p_`) and a donor's (`_d0_`, ...) module-level names."""

_PLAIN = re.compile(r"'[^'\"\\\n]*'")
"""A string literal in single quotes with no quote or backslash inside, as `ast.unparse` writes `state["x"]`."""


def quoted_like(text: str, model: str) -> str:
    """`text` with its plain single-quoted strings (`_PLAIN`) in double quotes where `model` (the start) writes
    more of its strings so: the flat file is unparsed, and its diff against the start shows only what changed."""
    def strings(source: str) -> list:
        try:
            return [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.STRING]
        except (tokenize.TokenError, SyntaxError):
            return []
    double = [t.string[0] == '"' for t in strings(model) if t.string[:1] in "'\"" and not t.string.startswith('"""')]
    if sum(double) <= len(double) / 2:
        return text
    lines = text.splitlines(keepends=True)
    for token in reversed(strings(text)):
        (row, start), (end_row, end) = token.start, token.end
        if row == end_row and _PLAIN.fullmatch(token.string):
            lines[row - 1] = lines[row - 1][:start] + '"' + token.string[1:-1] + '"' + lines[row - 1][end:]
    return "".join(lines)


def split_pairs(body: list) -> list:
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


def collapsed(body: list) -> list:
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


def named_entries(body: list) -> list:
    """`d = {**d, "k": <operation>}` whose entry a later statement reads as `d["k"]`: the operation bound to the name
    `k` first (`k = <operation>` before it, the entry `"k": k`), so that the flat file computes it once, as the child
    does, and not once per read; only where nothing after reads the name `k` or a `["k"]` of another dictionary."""
    out = []
    for i, statement in enumerate(body):
        name = _assigned_name(statement)
        value = statement.value if name else None
        if (isinstance(value, ast.Dict) and value.keys and value.keys[0] is None
                and isinstance(value.values[0], ast.Name) and value.values[0].id == name):
            later = body[i + 1:]
            for j in range(1, len(value.keys)):
                key, entry = value.keys[j], value.values[j]
                if isinstance(entry, (ast.Name, ast.Constant)) or _entry_read(entry) or not (
                        isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.isidentifier()
                        and not keyword.iskeyword(key.value)):
                    continue
                reads = [n.value for s in later for n in ast.walk(s) if isinstance(n, ast.Subscript)
                         and isinstance(n.slice, ast.Constant) and n.slice.value == key.value]
                if (any(isinstance(r, ast.Name) and r.id == name for r in reads)
                        and all(isinstance(r, ast.Name) and r.id == name for r in reads)
                        and not any(_reads(s, key.value) for s in later)):
                    out.append(ast.copy_location(ast.Assign(targets=[ast.Name(key.value, ast.Store())], value=entry),
                                                 statement))
                    value.values[j] = ast.Name(key.value, ast.Load())
        out.append(statement)
    return out


def _entry_read(node) -> bool:
    """Whether `node` reads a dictionary's entry (`d["k"]`, a string key: no array operation)."""
    return (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str))


def merged_terms(body: list) -> list:
    """A dictionary of terms built in one literal: after `d = {...}`, each `d[key]` read as its entry's value, and
    `d = {**d, key: value}` or `d = {k: v for k, v in d.items() if k != key}` folded into the literal, until `d`
    is assigned otherwise. The literal stays where it was if what the new entries read is known there, else it
    moves down to the new entries where its own entries are names (no operation changes place)."""
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
            between = [s for s in out[index + 1:] if s is not None]
            later = set().union(set(), *(_stored(s) for s in between))
            if merged is not None and not any(_reads(ast.Expr(v), n) for v in merged.values for n in later):
                out[index].value = merged
                literals[name] = (index, merged)
                continue
            if merged is not None and all(isinstance(v, (ast.Name, ast.Constant)) for v in literal.values) and not (
                    {v.id for v in literal.values if isinstance(v, ast.Name)} & later) and not any(
                    _reads(s, name) for s in between):
                out[index] = None
                statement = ast.Assign(targets=[ast.Name(name, ast.Store())], value=merged)
            else:
                del literals[name]
        out.append(statement)
        if name and isinstance(statement.value, ast.Dict) and None not in statement.value.keys and not any(
                isinstance(n, ast.Name) and n.id == name for n in ast.walk(statement.value)):
            literals[name] = (len(out) - 1, statement.value)
    return [s for s in out if s is not None]


def _substituted_reads(statement, name: str, literal: ast.Dict):
    """`statement` with `name[key]` read as the literal's entry; itself where it does not read `name`; None where it
    reads `name` otherwise (the literal is then no longer followed), unless it only rebinds `name` from it."""
    if not any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(statement)):
        return statement
    if _assigned_name(statement) == name and _merge(literal, statement.value, name) is not None:
        return statement  # folded by the caller
    value = _substituted(statement, name, literal)
    return value


def unread(body: list) -> list:
    """Without `name = ...` where nothing after reads `name`, from the end (so a chain `_ = _ + x` that ends unread
    goes whole: a donor's own reward sum, which a move never uses). An array operation whose result nothing reads is
    no operation of the program: tracing drops it (its StableHLO is the same, `readable.same_programs` checks)."""
    out = list(body)
    for i in range(len(out) - 1, -1, -1):
        name = _assigned_name(out[i])
        if name is not None and not any(_reads(s, name) for s in out[i + 1:]):
            del out[i]
    return out


def returned_literal(body: list) -> list:
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


def used(body: list) -> list:
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


def imports_used(tree: ast.Module) -> list:
    """The module's statements less the imports whose names nothing reads (a move imports `jax` for any child)."""
    read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}

    def bound(alias: ast.alias) -> str:
        return alias.asname or alias.name.split(".")[0]
    return [s for s in tree.body if not (isinstance(s, (ast.Import, ast.ImportFrom)) and s.names and all(
        bound(a) not in read and a.name != "*" for a in s.names) and getattr(s, "module", None) != "__future__")]


def unprefixed(tree: ast.Module) -> ast.Module:
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


def short_floats(tree: ast.Module) -> ast.Module:
    """Each module-level `NAME = <float>` whose value is a float32 written out in full (a population's tuned
    constant, `0.9498099088668823`) as the shortest number that is the same float32 (`0.9498099`), where only
    functions read `NAME`: the learner passes such constants to the program as float32 (`envcoder.candidates.
    constants`), so the program and its inputs stay as they were."""
    read_outside = {n.id for s in tree.body if not isinstance(s, ast.FunctionDef) for n in ast.walk(s)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for statement in tree.body:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.targets[0], ast.Name) and statement.targets[0].id not in read_outside):
            continue
        node = statement.value
        literal = node.operand if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) else node
        if not (isinstance(literal, ast.Constant) and type(literal.value) is float):
            continue
        single = np.float32(literal.value)
        if np.isfinite(single) and float(single) == literal.value:
            literal.value = float(str(single))
    return tree


READABLE_DIGITS = 4
"""Significant digits of a module-level constant in a readable file (`rounded_constants`)."""

_CONSTANT_LINE = re.compile(r"^([A-Za-z_]\w*\s*=\s*)(-?(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?)(\s*(?:#.*)?)$", re.M)


def rounded_constants(text: str, digits: int = READABLE_DIGITS) -> str:
    """`text` with each module-level `NAME = <float>` line's number written to `digits` significant digits (a tuned
    constant, `0.9498099088668823`, as `0.9498`): what a person reads. The program is the same (constants are its
    inputs); its values differ below the fourth digit, so best.py, not this, is what trained."""
    def shorter(match: re.Match) -> str:
        value = float(match.group(2))
        short = float(f"{value:.{digits}g}")
        return f"{match.group(1)}{short!r}{match.group(3)}"
    return _CONSTANT_LINE.sub(shorter, text)
