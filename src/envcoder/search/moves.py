"""Structural moves of the offline search: children that change which terms a reward has, not only its numbers.

A reward's *terms* are the named components its `compute_reward` returns (`return reward, {"name": term, ...}`).
The library of terms holds every term of every candidate seen, and the task's own fitness (as a term: its
per-step quantity, for an error through a kernel). A move writes a child file that calls its parent's reward (and
a donor's, cut to the terms it takes: `_only_terms`) and changes the sum:

- `reweight`: one term times a weight drawn log-uniformly over four orders of magnitude (sometimes negative: a
  term of the wrong sign flips);
- `drop`: one term taken out;
- `add`: a term of another candidate (or the task's fitness, where the parent is not written as the fitness
  already: `rewards_only_the_fitness`) added with a log-uniform weight (folded into the term's own weight where it
  has one, `_scaled_weight`: one constant per term, as a person writes it);
- `kernel`: a float inside an `exp(...)` (a tracking kernel's width) scaled by up to 10× either way;
- `cross`: the terms of a second parent that the first lacks, all added;
- `state`: a term that a task's state offers (`envcoder.search.state_terms`: an alive bonus, the torso upright,
  high or heading to a walk target, costs of actions, joint speeds, torques, power, spinning and joints at their
  limits) with a log-uniform weight of its own range (a cost's made smaller where its top gives the term more than
  `COST_SIZE` on the task's sample states): what shapes a sparse start, whose only term is the fitness (an alive
  bonus of weight `ALIVE_FLOOR` or more in each such child of a start written as the task's error negated).

A parent that is itself a child is read flat (`envcoder.search.readable.flatten`): its terms as a literal, so that
a child's terms can be re-weighted, dropped and crossed too.

The child's weights are module-level float constants, so the constants search (and a population's perturbations)
tunes them without recompiling (`envcoder.candidates.constants`). A child is plain candidate code: it passes the
same checks and validation as any file.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import random
from typing import Sequence

from envcoder.search.readable import flatten, reward_terms
from envcoder.search.tidy import unread, used
from envcoder.text import column, parse as parse_source, unparse as unparse_source

MOVES = ("reweight", "drop", "add", "kernel", "cross", "state")

ALIVE_FLOOR = 1.0
"""The least weight of the alive bonus that every `state` child of a parent written as the task's error negated
carries (`rewards_only_the_fitness(..., negated=True)`: a sparse Anymal start, `-|command - velocity|`). Such a
reward is negative at every step, so a policy learns to end its episodes early (the sparse start's copies lasted
about 15 steps); over ten Anymal searches, those whose first children drew an alive bonus of weight 1 or more
scored a median HNS of 1.17, the others 0.70, and only half of the searches drew one (docs/benchmarks/search.md). A parent of any other kind draws its state terms as before."""

def fitness_term_source(step, name: str = "_task_fitness") -> str:
    """A task fitness's per-step function (`Fitness.step`) as candidate code named `name`, the module-level numbers
    it reads written in as literals (Cartpole's `UPRIGHT_ANGLE`: `< 0.2`), so that its thresholds stay the task's
    where a population tunes a child's constants (a comparison's numbers are none: `envcoder.candidates.constants`)."""
    source = inspect.getsource(step)
    tree = parse_source(source.strip())
    tree.body[0].name = name
    numbers = {n: step.__globals__[n] for n in step.__code__.co_names
               if isinstance(step.__globals__.get(n), (int, float)) and not isinstance(step.__globals__[n], bool)}

    class WrittenIn(ast.NodeTransformer):
        def visit_Name(self, node):
            return ast.copy_location(ast.Constant(numbers[node.id]), node) if node.id in numbers else node
    return unparse_source(ast.fix_missing_locations(WrittenIn().visit(tree)))


def rewards_only_the_fitness(source: str, fitness_source: str, negated: bool = False) -> bool:
    """Whether a file's `compute_reward` is written as the task fitness's step (`fitness_source`, from
    `fitness_term_source`): the same statements, its docstring and the strings' quotes aside; with `negated`, the
    same but for its value returned negated (`return -(...)`: a sparse start of a fitness that is an error, Anymal's).
    Such a file (a sparse start) gains nothing from a higher-is-better fitness as a term: the fitness added to itself
    only scales the reward, which trains as before (PPO normalizes values and advantages)."""
    def body(text: str, name: str | None):
        try:
            tree = parse_source(text)
        except SyntaxError:
            return None
        function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and name in (None, n.name)), None)
        if function is None:
            return None
        return function.body[1:] if ast.get_docstring(function) is not None else function.body
    mine, theirs = body(source, "compute_reward"), body(fitness_source, None)
    if not mine or not theirs:
        return False
    if negated:
        last = mine[-1]
        if not (isinstance(last, ast.Return) and isinstance(last.value, ast.UnaryOp)
                and isinstance(last.value.op, ast.USub)):
            return False
        mine = mine[:-1] + [ast.Return(last.value.operand)]
    return [ast.dump(n) for n in mine] == [ast.dump(n) for n in theirs]


def _renamed(source: str, prefix: str) -> tuple[str, set[str]]:
    """`source` without imports and its module docstring, every module-level name it defines prefixed (so that
    two files live in one), and those names."""
    tree = parse_source(source)
    body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))
            and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    defined = {n.name for n in body if isinstance(n, ast.FunctionDef)} | {
        t.id for n in body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    defined.discard("PARAMS")
    body = [n for n in body if not (isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "PARAMS" for t in n.targets))]  # a child is one file: no sweep

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            if node.id in defined:
                node.id = prefix + node.id
            return node

        def visit_FunctionDef(self, node):
            if node.name in defined:
                node.name = prefix + node.name
            self.generic_visit(node)
            return node
    module = Rename().visit(ast.Module(body=body, type_ignores=[]))
    return unparse_source(ast.fix_missing_locations(module)), {prefix + n for n in defined}


def _imports(*sources: str) -> list[str]:
    lines = ["import jax", "import jax.numpy as jnp"]
    for source in sources:
        for node in parse_source(source).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                line = unparse_source(node)
                if line not in lines:
                    lines.append(line)
    return lines


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _weight(value: float) -> str:
    text = format(value, ".3g")
    return text if any(c in text for c in ".e") else text + ".0"


def structural_child(rng: random.Random, parent, others: Sequence, fitness: tuple[str, bool] | None = None,
                     move: str | None = None, library: Sequence = ()) -> tuple[str, str] | None:
    """`(source, what changed)` of a child of `parent` (a `Parent`) by one structural move (`move`, else drawn
    among those that apply), with donors among `others`, the task's fitness (`(its step's source from
    fitness_term_source, higher_is_better)`; not added to a parent that `rewards_only_the_fitness`) and the terms its
    state offers (`library`: `state_terms`); None when no move applies."""

    def flat(source: str) -> str:  # without the headers of its generation, a child's terms as a literal
        return flatten("".join(line for line in source.splitlines(keepends=True) if not line.startswith("# offline: ")))
    parent = dataclasses.replace(parent, source=flat(parent.source))
    if fitness is not None and fitness[1] and rewards_only_the_fitness(parent.source, fitness[0]):
        fitness = None  # the fitness added to itself only scales the reward: the same run under normalized values
    # A reward that is the task's error negated costs something at every step: it pays a policy to end its episodes.
    costs_only = fitness is not None and not fitness[1] and rewards_only_the_fitness(parent.source, fitness[0], True)
    terms = reward_terms(parent.source)
    others = [dataclasses.replace(o, source=flat(o.source)) for o in others if o.name != parent.name]
    donors = [(o, t) for o in others for t in reward_terms(o.source) if t not in terms]
    kernels = _kernel_literals(parent.source)
    offered = [entry for entry in library if entry[0] not in terms]
    possible = [m for m, ok in (("reweight", terms), ("drop", len(terms) > 1), ("add", donors or fitness),
                                ("kernel", kernels), ("cross", donors), ("state", offered)) if ok]
    if move is None:
        if not possible:
            return None
        move = rng.choice(possible)
    elif move not in possible:
        return None
    if move == "kernel":
        return _scale_kernel(rng, parent, kernels)
    base, _ = _renamed(parent.source, "_p_")
    pieces, lines, weights, note = [base], [], {}, ""
    if move in ("reweight", "drop"):
        note, edited = _weigh_or_drop(rng, move, parent.source, terms, lines, weights)
        if edited is not None:  # the parent's own lines changed, not a term added and then taken away again
            return f"# offline: from {parent.name}; {note}\n{edited}\n", note
    elif move == "state":  # one term, or two or three at once (sometimes more than one is needed at all)
        count = min(len(offered), 1 + (rng.random() < 0.5) + (rng.random() < 0.25))
        alive = next((entry for entry in offered if entry[0] == "alive"), None) if costs_only else None
        if alive is None:
            drawn = rng.sample(offered, count)
        else:  # every such child pays for staying alive, at least as much as a typical error costs (ALIVE_FLOOR)
            rest = [entry for entry in offered if entry is not alive]
            drawn = [[*alive[:2], max(alive[2], ALIVE_FLOOR), alive[3]]] + rng.sample(rest, min(len(rest), count - 1))
        added = []
        for name, expression, low, high in drawn:
            weight = f"W_{name.upper()}"
            weights[weight] = _log_uniform(rng, low, high)
            lines += [f"    {name} = {weight} * ({expression})", f"    reward = reward + {name}",
                      f"    terms = {{**terms, {name!r}: {name}}}"]
            added.append(f"{name!r} (proposed weight {_weight(weights[weight])})")
        note = f"add the state's {'term' if count == 1 else 'terms'} {', '.join(added)}"
    else:  # add, cross: terms of donors (or the task's fitness)
        note = _add_terms(rng, move, donors, fitness, pieces, lines, weights)
    header = [f"# offline: from {parent.name}; {note}", '"""A structural child of the offline search."""']
    constants = [f"{name} = {_weight(value)}" for name, value in weights.items()]
    body = ["def _split(out):", "    return out if isinstance(out, tuple) else (out, {})", "",
            "def compute_reward(state):", "    reward, terms = _split(_p_compute_reward(state))",
            *lines, "    return reward, terms"]
    sources = [parent.source] + [o.source for o, _ in donors]
    return "\n".join(header + _imports(*sources) + [""] + constants + [""] + pieces + [""] + body) + "\n", note


def _weigh_or_drop(rng: random.Random, move: str, source: str, terms: list[str], lines: list[str],
                   weights: dict[str, float]) -> tuple[str, str | None]:
    """The `reweight` or `drop` move on one of `terms`: `(what changed, the parent's source with its own lines
    changed)` where its term is `name = W * (...)` added once (`_scaled_weight`, `_without_term`); else `(what
    changed, None)` with the child's lines appended to `lines` and its weight to `weights`."""
    term = rng.choice(terms)
    if move == "drop":
        lines += [f"    reward = reward - terms[{term!r}]",
                  f"    terms = {{k: v for k, v in terms.items() if k != {term!r}}}"]
        return f"drop term {term!r}", _without_term(source, term)
    weight = _log_uniform(rng, 1e-2, 1e2) * (-1.0 if rng.random() < 0.15 else 1.0)
    weights["W_REWEIGHT"] = weight
    lines += [f"    reward = reward + (W_REWEIGHT - 1.0) * terms[{term!r}]",
              f"    terms = {{**terms, {term!r}: W_REWEIGHT * terms[{term!r}]}}"]
    return f"weight of term {term!r} × {_weight(weight)}", _scaled_weight(source, term, weight)


def _add_terms(rng: random.Random, move: str, donors: list, fitness, pieces: list[str], lines: list[str],
               weights: dict[str, float]) -> str:
    """The `add` or `cross` move: the donors' code (or the task's fitness) appended to `pieces`, the reward's new lines
    to `lines`, their weights to `weights`; returns what changed."""
    if move == "cross":
        donor = rng.choice(sorted({o.name for o, _ in donors}))
        taken = [(o, t) for o, t in donors if o.name == donor]
        note = f"cross with {donor}: add {', '.join(repr(t) for _, t in taken)}"
    elif fitness is not None and (not donors or rng.random() < 0.3):
        taken = []
        source, higher = fitness
        pieces.append(source)
        weights["W_FITNESS"] = _log_uniform(rng, 1e-2, 1e1)
        if higher:
            lines += ["    fitness = W_FITNESS * _task_fitness(state)"]
        else:  # an error: rewarded through a kernel of its own width
            weights["FITNESS_SIGMA"] = _log_uniform(rng, 0.05, 2.0)
            lines += ["    fitness = W_FITNESS * jnp.exp(-_task_fitness(state) ** 2 / FITNESS_SIGMA)"]
        lines += ["    reward = reward + fitness", "    terms = {**terms, 'task_fitness': fitness}"]
        note = f"add the task's fitness as a term (proposed weight {_weight(weights['W_FITNESS'])})"
    else:
        taken = [rng.choice(donors)]
        note = f"add term {taken[0][1]!r} of {taken[0][0].name}"
    for k, donor_name in enumerate(sorted({o.name for o, _ in taken})):
        donor = next(o for o, _ in taken if o.name == donor_name)
        names = [t for o, t in taken if o.name == donor_name]
        source = _only_terms(donor.source, set(names))
        lines += [f"    _, donor{k} = _split(_d{k}_compute_reward(state))"]
        for j, term in enumerate(names):
            weight = 1.0 if move == "cross" else _log_uniform(rng, 1e-2, 1e1)
            folded = _scaled_weight(source, term, weight)
            if folded is not None:  # the term's own weight takes the move's: one constant per term
                source = folded
                lines += [f"    terms = {{**terms, {term!r}: donor{k}[{term!r}]}}"]
            else:
                weights[f"W_ADD{k}_{j}"] = weight
                lines += [f"    terms = {{**terms, {term!r}: W_ADD{k}_{j} * donor{k}[{term!r}]}}"]
            lines += [f"    reward = reward + terms[{term!r}]"]
        pieces.append(_renamed(source, f"_d{k}_")[0])
    return note


def _scaled_weight(source: str, term: str, factor: float) -> str | None:
    """`source` (a donor, `_only_terms`) with the weight of its term `term` times `factor`, where the term is
    `name = W * (...)` in its `compute_reward` and `W` a module-level float constant that nothing else reads; None
    otherwise. So a child adds a donor's term with one weight, not the donor's times its own (`0.78 * 0.039`), which
    its flat find could not fold without changing the float arithmetic; at `factor` 1 the source as it is."""
    tree = parse_source(source)
    function, returned = _returned_terms(tree)
    value = dict(zip([k.value for k in returned.keys], returned.values)).get(term) if returned else None
    if not isinstance(value, ast.Name):
        return None
    assigned = [n for n in function.body if isinstance(n, ast.Assign) and value.id in _stored_names(n)]
    product = assigned[0].value if len(assigned) == 1 else None
    if not (isinstance(product, ast.BinOp) and isinstance(product.op, ast.Mult) and isinstance(product.left, ast.Name)):
        return None
    weight = product.left.id
    constant = [n for n in tree.body if isinstance(n, ast.Assign) and weight in _stored_names(n)]
    reads = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == weight and isinstance(n.ctx, ast.Load)]
    if len(constant) != 1 or len(reads) != 1 or not (isinstance(constant[0].value, ast.Constant)
                                                      and type(constant[0].value.value) is float):
        return None
    if factor != 1.0:
        constant[0].value = ast.Constant(float(_weight(constant[0].value.value * factor)))
    return unparse_source(ast.fix_missing_locations(tree))


def _without_term(source: str, term: str) -> str | None:
    """`source` (read flat) without its term `term`: the line that adds it to the reward (`reward = reward + v`, `v`
    the term's entry in the returned literal) and the entry taken out, and what nothing then reads; None where the
    reward does not add the entry so, once."""
    tree = parse_source(source)
    function, returned = _returned_terms(tree)
    entry = dict(zip([k.value for k in returned.keys], returned.values)).get(term) if returned else None
    total = function.body[-1].value.elts[0] if entry is not None else None
    if not isinstance(total, ast.Name):
        return None
    added = [s for s in function.body if isinstance(s, ast.Assign) and total.id in _stored_names(s)
             and isinstance(s.value, ast.BinOp) and isinstance(s.value.op, ast.Add)
             and isinstance(s.value.left, ast.Name) and s.value.left.id == total.id
             and ast.dump(s.value.right) == ast.dump(entry)]
    if len(added) != 1:
        return None
    index = [k.value for k in returned.keys].index(term)
    del returned.keys[index], returned.values[index]
    function.body = unread([s for s in function.body if s is not added[0]])
    tree.body = used(tree.body)
    return unparse_source(ast.fix_missing_locations(tree))


def _returned_terms(tree: ast.Module) -> tuple[ast.FunctionDef | None, ast.Dict | None]:
    """A module's `compute_reward` and the literal of terms it ends by returning (`return (reward, {"k": v, ...})`,
    string keys), or None for the literal where it does not."""
    function = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "compute_reward"), None)
    last = function.body[-1] if function is not None and function.body else None
    if (isinstance(last, ast.Return) and isinstance(last.value, ast.Tuple) and len(last.value.elts) == 2
            and isinstance(last.value.elts[1], ast.Dict)
            and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in last.value.elts[1].keys)):
        return function, last.value.elts[1]
    return function, None


def _stored_names(statement) -> set[str]:
    return {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _only_terms(source: str, names: set[str]) -> str:
    """A donor (read flat) whose `compute_reward` returns only the terms `names` that a move takes, `(None, {...})`,
    less the statements, functions and constants that nothing then reads: a child carries none of its donor's code
    that its reward does not use (such code trained as nothing, but its constants were inputs of the child's program,
    which its flat find then lacked). The source itself where its reward does not end by returning a literal of
    terms."""
    tree = parse_source(source)
    function, literal = _returned_terms(tree)
    if literal is None:
        return source
    kept = [(k, v) for k, v in zip(literal.keys, literal.values) if k.value in names]
    function.body[-1].value = ast.Tuple([ast.Constant(None), ast.Dict([k for k, _ in kept], [v for _, v in kept])],
                                        ast.Load())
    function.body = unread(function.body)
    tree.body = used(tree.body)
    return unparse_source(ast.fix_missing_locations(tree))


def _kernel_literals(source: str) -> list[tuple[int, int, float]]:
    """`(line, column in characters, value)` of the non-zero float literals inside the arguments of an `exp(...)`
    call in the file's functions (a kernel's width or scale)."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return []
    found, lines = [], source.splitlines()
    for call in ast.walk(tree):
        name = getattr(getattr(call, "func", None), "attr", None) or getattr(getattr(call, "func", None), "id", None)
        if isinstance(call, ast.Call) and name == "exp":
            for arg in call.args:
                found += [(n.lineno, column(lines[n.lineno - 1], n.col_offset), n.value) for n in ast.walk(arg)
                          if isinstance(n, ast.Constant) and type(n.value) is float and n.value != 0.0]
    return sorted(set(found))


def _scale_kernel(rng: random.Random, parent, kernels) -> tuple[str, str]:
    """One kernel literal of `parent` scaled by a factor log-uniform in [0.1, 10]."""
    line, column, value = rng.choice(kernels)
    factor = _log_uniform(rng, 0.1, 10.0)
    lines = parent.source.splitlines(keepends=True)
    text = lines[line - 1]
    end = column + len(text[column:]) - len(text[column:].lstrip("0123456789.eE+-_"))
    new = _weight(value * factor)
    lines[line - 1] = text[:column] + new + text[end:]
    note = f"kernel constant on line {line + 1}: {text[column:end]} -> {new}"  # + 1: the header line
    return f"# offline: from {parent.name}; {note}\n" + "".join(lines), note
