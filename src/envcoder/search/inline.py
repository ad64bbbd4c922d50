"""Inlining for `envcoder.search.readable`: a module-level helper that runs straight through to one `return`
written into its caller, its local names renamed where the caller uses them, and `a if isinstance(x, tuple) else b`
decided where `x` is written out. Pure rewriting of the syntax tree: nothing of the candidate runs."""

from __future__ import annotations

import ast
import copy

from envcoder.shaping.api import ALIASES, SHAPER_TYPES

API = (*SHAPER_TYPES, *ALIASES)
"""The shaping functions: never inlined, and what every other definition is kept for."""


def _straight(function: ast.FunctionDef) -> bool:
    """Whether `function` runs straight through to one `return` at its end (no other return, no branch, loop or
    nested definition), with plain positional parameters."""
    body, args = function.body, function.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.defaults or args.posonlyargs or not body:
        return False
    if not isinstance(body[-1], ast.Return) or body[-1].value is None:
        return False
    for statement in body[:-1]:
        if not isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)):
            return False
        if any(isinstance(n, (ast.Return, ast.Lambda, ast.FunctionDef, ast.Yield, ast.Global, ast.Nonlocal,
                              ast.NamedExpr)) for n in ast.walk(statement)):
            return False
    return not any(isinstance(n, (ast.Yield, ast.NamedExpr, ast.Lambda)) for n in ast.walk(body[-1]))


def inline_one(caller: ast.FunctionDef, functions: dict) -> bool:
    """Inline the first call in `caller` of a straight module-level helper whose arguments hold no other such
    call; False where none is left."""
    for index, statement in enumerate(caller.body):
        for node in ast.walk(statement):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords):
                continue
            callee = functions.get(node.func.id)
            if callee is None or callee.name in API or not _straight(callee) or \
                    len(node.args) != len(callee.args.args) or any(isinstance(a, ast.Starred) for a in node.args):
                continue
            if any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in functions
                   and n.func.id not in API for a in node.args for n in ast.walk(a)):
                continue  # its arguments first (the innermost call)
            statements, value = _body_at(callee, node.args, _names(caller))
            if value is None:
                continue
            _replace(statement, node, value)
            caller.body[index:index] = statements
            return True
    return False


def _names(function: ast.FunctionDef) -> set[str]:
    return {n.id for n in ast.walk(function) if isinstance(n, ast.Name)} | {a.arg for a in function.args.args}


def _body_at(callee: ast.FunctionDef, arguments: list, taken: set[str]):
    """The callee's statements and returned expression for a call with `arguments`, its local names renamed
    where the caller uses them; None where its `_split`-like test cannot be decided."""
    body = copy.deepcopy(callee.body)
    local = {a.arg for a in callee.args.args} | {t.id for s in body for t in ast.walk(s)
                                                 if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
    renames = {}
    for name in sorted(local):
        new, k = name, 2
        while new in taken or new in renames.values():
            new, k = f"{name}_{k}", k + 1
        renames[name] = new
    statements = []
    substitutions = {}
    for parameter, argument in zip(callee.args.args, arguments):
        if isinstance(argument, (ast.Name, ast.Constant, ast.Tuple)) and not _assigned(body, parameter.arg):
            substitutions[parameter.arg] = argument  # the argument itself where the parameter is read only
        else:
            statements.append(ast.Assign(targets=[ast.Name(renames[parameter.arg], ast.Store())],
                                         value=copy.deepcopy(argument)))

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id in substitutions and isinstance(node.ctx, ast.Load):
                return copy.deepcopy(substitutions[node.id])
            if node.id in renames:
                node.id = renames[node.id]
            return node
    body = [Rename().visit(s) for s in body]
    bound = {s.targets[0].id: s.value for s in statements}  # a parameter bound to its argument's expression
    value = _decided(body[-1].value, bound)
    return (None, None) if value is None else (statements + body[:-1], value)


def _assigned(body: list, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for s in body
               for n in ast.walk(s))


def _decided(value, bound: dict | None = None):
    """`value` with `a if isinstance(x, tuple) else b` decided where `x` is written out (a tuple or not; a name
    `bound` to an expression counts as that expression); None where such a test is left that cannot be."""
    bound = bound or {}
    class Decide(ast.NodeTransformer):
        undecided = False

        def visit_IfExp(self, node):
            self.generic_visit(node)
            test = node.test
            if (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"
                    and len(test.args) == 2 and isinstance(test.args[1], ast.Name) and test.args[1].id == "tuple"):
                subject = test.args[0]
                if isinstance(subject, ast.Name) and subject.id in bound:
                    subject = bound[subject.id]
                if isinstance(subject, ast.Tuple):
                    return node.body
                if isinstance(subject, (ast.BinOp, ast.UnaryOp, ast.Constant)) or _array_index(subject) or (
                        isinstance(subject, ast.Call) and not isinstance(subject.func, ast.Name)):
                    return node.orelse  # an array expression
                self.undecided = True
            return node
    decide = Decide()
    value = decide.visit(value)
    return None if decide.undecided else value


def _array_index(node) -> bool:
    """Whether `node` indexes along several axes with a slice among them (`state["root_states"][:, 7]`), which only
    an array takes (a tuple or a list takes no tuple of slices)."""
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and any(
        isinstance(e, ast.Slice) or (isinstance(e, ast.Constant) and e.value in (None, Ellipsis))
        for e in node.slice.elts)


def _replace(tree, old, new) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is old:
                        value[i] = new
                        return
