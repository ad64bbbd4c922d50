"""A candidate's float constants as data: the numbers a proposer tunes become inputs of the traced program, so
candidates whose code differs only in them share one trace and one compiled program.

`lift_constants` rewrites a file's syntax tree: every float literal in the body of a function the file defines
becomes a module-level constant `_K_<n>` (numbered in order of appearance), and every module-level constant that
is a float literal (`SIGMA = 0.25`, `W = -1e-3`) stays a constant of its own name. The learner then calls the
functions with the constants swapped in as traced per-group values (`call_with_params`), as it does for a `PARAMS`
sweep. Integers stay literals (they are sizes, indices and exponents), and so do the numbers of a comparison (a
threshold: `height > 0.8`, `|angle| < 0.2` says what counts, and a search that scales it by orders of magnitude
changes the task, not a weight) and every number outside function bodies and plain module-level assignments
(default arguments, derived module-level expressions).

A file that needs one of its floats as a Python number (`if SIGMA > 0.5:`, `jnp.arange(0.0, 1.0, 0.1)`) fails to
trace with it as data; validation then loads it with its literals as they are (`load_candidate(lift=False)`).
"""

from __future__ import annotations

import ast
import copy

from envcoder.text import column, parse as parse_source

PREFIX = "_K_"
"""The names of the constants lifted out of function bodies: `_K_0`, `_K_1`, …"""


def _float(node: ast.AST) -> float | None:
    """The value of a float literal, or of a negated one; None for anything else (ints and bools included)."""
    if isinstance(node, ast.Constant) and type(node.value) is float:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)) and isinstance(
            node.operand, ast.Constant) and type(node.operand.value) is float:
        return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
    return None


class _Lifter(ast.NodeTransformer):
    """Replaces the float literals of function bodies with names of module-level constants."""

    def __init__(self, taken: set[str]):
        self.constants: dict[str, float] = {}
        self.spans: dict[str, tuple[int, int, int, int]] = {}  # where each literal was in the source
        self.prefix = PREFIX
        while any(name.startswith(self.prefix) for name in taken):
            self.prefix = "_" + self.prefix

    def visit_FunctionDef(self, node: ast.FunctionDef):
        node.body = [self.visit(statement) for statement in node.body]  # not the defaults or decorators
        return node

    def visit_Lambda(self, node: ast.Lambda):
        node.body = self.visit(node.body)
        return node

    def visit_Constant(self, node: ast.Constant):
        if type(node.value) is not float:
            return node
        return self._lift(node, node.value)

    def visit_UnaryOp(self, node: ast.UnaryOp):
        value = _float(node)  # `-0.5` is one constant, its sign data too: a value of either sign is the same code
        return self.generic_visit(node) if value is None else self._lift(node, value)

    def _lift(self, node: ast.AST, value: float) -> ast.Name:
        name = f"{self.prefix}{len(self.constants)}"
        self.constants[name] = value
        self.spans[name] = (node.lineno, node.col_offset, node.end_lineno, node.end_col_offset)
        return ast.copy_location(ast.Name(id=name, ctx=ast.Load()), node)

    def visit_Subscript(self, node: ast.Subscript):
        node.value = self.visit(node.value)  # an index stays as it is
        return node

    def visit_Compare(self, node: ast.Compare):
        # A comparison's numbers are a threshold (`height > 0.8`, `up < cos(30.0°)`): they decide what counts, not
        # how much, and are no weight to scale. They stay literals.
        return node


def lift_constants(tree: ast.Module) -> tuple[ast.Module, dict[str, float], str]:
    """`(tree with its floats lifted, {constant: value}, key)`: `key` identifies the lifted code whatever the
    constants' values (files that differ only in them have the same key). `tree` is not changed."""
    tree = copy.deepcopy(tree)
    constants: dict[str, float] = {}
    for node in tree.body:  # module-level float constants keep their names
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and _float(node.value) is not None):
            constants[node.targets[0].id] = _float(node.value)
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    lifter = _Lifter(taken)
    tree.body = [lifter.visit(node) if isinstance(node, ast.FunctionDef) else node for node in tree.body]
    lifted = [ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=ast.Constant(value))
              for name, value in lifter.constants.items()]
    start = 1 if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(
        getattr(tree.body[0], "value", None), ast.Constant) else 0  # after the docstring
    tree.body[start:start] = lifted
    tree = ast.fix_missing_locations(tree)
    constants.update(lifter.constants)
    return tree, constants, ast.dump(_blank(tree, constants))


def _blank(tree: ast.Module, constants: dict[str, float]) -> ast.Module:
    """`tree` with the values of its constants' assignments set to 0.0 (what the key is made of)."""
    blank = copy.deepcopy(tree)
    for node in blank.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in constants):
            node.value = ast.Constant(0.0)
    return blank


def with_constants(source: str, values: dict[str, float]) -> str:
    """`source` with the constants that `lift_constants` finds in it set to `values` (by their names there; the
    others as they are): a plain file, e.g. a population's winner with the constants it was trained with at the
    end. A literal's sign is part of its value (`-0.5` is the constant -0.5), and a negative value written into a
    function is parenthesized (`(-0.5) ** 2`), so that a copy with a sign flipped is the same code."""
    tree = parse_source(source)
    spans = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and _float(node.value) is not None):
            value = node.value
            spans[node.targets[0].id] = (value.lineno, value.col_offset, value.end_lineno, value.end_col_offset)
    module_level = set(spans)
    lifter = _Lifter({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)})
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            lifter.visit(node)
    spans.update({PREFIX + name[len(lifter.prefix):]: span for name, span in lifter.spans.items()})
    lines = source.splitlines(keepends=True)
    for name, (row, start, end_row, end) in sorted(
            ((n, spans[n]) for n in values if n in spans), key=lambda item: item[1], reverse=True):
        text = repr(float(values[name]))
        if values[name] < 0 and name not in module_level:
            text = f"({text})"
        if row == end_row:  # ast's columns count bytes, a str's characters
            old = lines[row - 1]
            lines[row - 1] = old[:column(old, start)] + text + old[column(old, end):]
    return "".join(lines)


def code_keys(sources: list[str]) -> list[list | None]:
    """`[code key, constants]` of each source (`lift_constants`), or None where it does not parse: what identifies
    its code whatever its float constants, and those. Run in the sandbox (`SandboxValidator.jailed`), on text a
    candidate wrote."""
    found = []
    for source in sources:
        try:
            _, constants, key = lift_constants(parse_source(source))
            found.append([key, constants])
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            found.append(None)
    return found


def sources_with_constants(pairs: list) -> list[str]:
    """`with_constants(source, values)` of each `(source, values)`: run in the sandbox (`SandboxValidator.jailed`)."""
    return [with_constants(source, values) for source, values in pairs]
