"""Reward files written for Isaac Gym, read as they are: the field's second input format.

IsaacGymEnvs rewards, and the thousands that Eureka and its successors had language models write, are torch functions
`compute_reward(root_states, targets, dt, ...) -> (reward, {name: component})` whose arguments are attributes of the
IsaacGymEnvs task class at reward time (Eureka calls it with `self.<name>` for each argument). Three kinds of file
hold one:

- a bare reward file (Eureka's `*_rewardonly.py`);
- a language model's answer (`.txt`) with the code in a fenced block (its last block that defines `compute_reward`,
  else its first with a function: Eureka calls an answer's first function, whatever its name);
- a whole IsaacGymEnvs task file: only the function its class assigns to `self.rew_buf` (else its last module-level
  `compute_reward`) and the module-level functions that one calls are taken; nothing else of it runs.

`native_source` makes a native candidate of one: the reward function as it was written (imports, decorators and
annotations dropped, `np.` read as `jnp.`), and a `compute_reward(state)` that calls it with the task's Isaac names
(`Task.isaac_names`, in Isaac's conventions) as tensors of `envcoder.shaping.isaac_torch`, torch on jax.numpy. That
text then goes through every check a native file does, in the same jail. What it cannot run is refused before it
runs, in one line that names it: an argument the task class does not have, a name or torch function or tensor
method that envcoder's torch does not know.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import re
from pathlib import Path

from envcoder.shaping.api import CandidateError
from envcoder.shaping.isaac_torch import HELPERS, TENSOR_METHODS, TORCH_FUNCTIONS

SUFFIXES = (".py", ".txt")
"""The kinds of file a candidate folder's Isaac-format files may be (`.txt`: a language model's answer)."""

REWARD = "isaac_reward"
"""The name the Isaac reward function takes in the native file (its wrapper is `compute_reward(state)`)."""

FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)

MODULES = {"torch": "torch", "math": "math", "np": "jnp", "numpy": "jnp", "jnp": "jnp", "F": "functional",
           "functional": "functional"}
"""Module names an Isaac reward may use, and what they are in the native file (`F`: `torch.nn.functional`)."""

OTHER_METHODS = {"items", "keys", "values", "get", "append", "update", "indices", "real", "imag"}
"""Methods of dicts, lists and `torch.max(x, dim)`'s result that a reward may call besides the tensors'."""

TYPING = {"Tuple", "Dict", "List", "Optional", "Union", "Any", "Tensor"}


def is_isaac(source: str, path: str | Path) -> bool:
    """Whether `source` is in Isaac Gym's format rather than envcoder's: a `.txt` file, or a `.py` file that imports
    torch or whose `compute_reward` takes anything but `(state)`."""
    if Path(path).suffix == ".txt":
        return True
    if re.search(r"^\s*(import torch|from torch\b|from isaacgym|@torch\.jit)", source, re.MULTILINE):
        return True
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    rewards = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "compute_reward"]
    return bool(rewards) and [a.arg for a in rewards[-1].args.args][:1] not in (["state"], [])


def starting_text(source: str, file: str, task: str) -> str:
    """`auto --initial`'s text for one file: a reward written for Isaac Gym as its native file (`native_source`), any
    other file unchanged. Run in the jail (`SandboxValidator.jailed`): it parses the candidate's text."""
    return native_source(source, file, task) if is_isaac(source, file) else source


def reward_code(source: str, path: str | Path) -> str:
    """The code that holds the reward: a `.txt` answer's last fenced block that defines `compute_reward` (else its
    first that defines a function), else the file."""
    if Path(path).suffix != ".txt":
        return source
    fenced = FENCE.findall(source)
    blocks = ([block for block in fenced if re.search(r"def\s+compute_reward\s*\(", block)]
              or [block for block in fenced if re.search(r"^\s*def\s+\w+\s*\(", block, re.MULTILINE)][:1])
    if not blocks:
        raise CandidateError(str(path), "has no fenced code block (```python ... ```) that defines a function: "
                                        "an answer's reward must be in one")
    return blocks[-1]


def _called_names(fn: ast.FunctionDef) -> set[str]:
    return {node.func.id for node in ast.walk(fn) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}


def _assigned(fn: ast.FunctionDef) -> set[str]:
    """Every name a function binds: its arguments, assignments, loop and comprehension targets, `with … as`."""
    names = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    names |= {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.Lambda)) and node is not fn:
            names |= {a.arg for a in node.args.args}
            if isinstance(node, ast.FunctionDef):
                names.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


class _Cleaner(ast.NodeTransformer):
    """Drops decorators and annotations, reads `np.`/`numpy.` as `jnp.` and `F.` as `torch.nn.functional.`."""

    def visit_FunctionDef(self, node):
        node.decorator_list, node.returns = [], None
        for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs:
            arg.annotation = None
        for arg in (node.args.vararg, node.args.kwarg):
            if arg is not None:
                arg.annotation = None
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node):
        if node.value is None:
            return None
        return ast.copy_location(ast.Assign(targets=[node.target], value=self.visit(node.value)), node)

    def visit_Name(self, node):
        if node.id in ("np", "numpy"):
            return ast.copy_location(ast.Name(id="jnp", ctx=node.ctx), node)
        if node.id in ("F", "functional"):
            return ast.copy_location(ast.Attribute(value=ast.Attribute(value=ast.Name(id="torch", ctx=ast.Load()),
                                                                       attr="nn", ctx=ast.Load()),
                                                   attr="functional", ctx=node.ctx), node)
        return node


def _close(name: str, known) -> str:
    """` (did you mean X?)` where `known` has a name close to `name`, else ""."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
    return f" (did you mean {close[0]}?)" if close else ""


def _check_names(functions: list[ast.FunctionDef], constants: set[str], file: str, task) -> None:
    """Refuse, naming it, what envcoder's torch cannot run: an unknown free name, `torch.X`, or a tensor method."""
    defined = {fn.name for fn in functions} | constants | set(HELPERS) | set(MODULES) | TYPING
    allowed_builtins = {"abs", "all", "any", "bool", "dict", "enumerate", "float", "int", "isinstance", "len", "list",
                        "max", "min", "pow", "range", "reversed", "round", "sorted", "sum", "tuple", "zip", "map",
                        "filter", "True", "False", "None", "slice", "str", "print", "set", "divmod", "ValueError",
                        "TypeError", "KeyError", "IndexError", "Exception"}
    for fn in functions:
        local = _assigned(fn)
        for node in ast.walk(fn):
            line = getattr(node, "lineno", None)
            if (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
                    and node.id not in local | defined | allowed_builtins):
                what = ("a builtin envcoder's sandbox does not give candidates" if hasattr(builtins, node.id) else
                        "neither an argument, a local, torch, math nor a helper of isaacgym.torch_utils")
                raise CandidateError(file, f"uses the name {node.id!r}{_close(node.id, set(HELPERS) | local)}, "
                                           f"{what}; the helpers it may call: {', '.join(sorted(set(HELPERS)))}",
                                     function=fn.name, line=line)
            if isinstance(node, ast.Attribute) and "torch" not in local:
                base = node.value
                if isinstance(base, ast.Name) and base.id == "torch" and node.attr not in TORCH_FUNCTIONS:
                    raise CandidateError(file, f"uses torch.{node.attr}{_close(node.attr, TORCH_FUNCTIONS)}, which "
                                               "envcoder's torch (on jax.numpy) does not have: write it with the "
                                               "torch functions it has (envcoder tasks --isaac lists the conventions)",
                                         function=fn.name, line=line)
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and not _module_chain(node, fn):
                if node.attr not in TENSOR_METHODS | OTHER_METHODS:
                    raise CandidateError(file, f"uses .{node.attr}{_close(node.attr, TENSOR_METHODS)}, which "
                                               "envcoder's tensors (torch on jax.numpy) do not have",
                                         function=fn.name, line=node.lineno)


def _module_chain(node: ast.Attribute, fn: ast.FunctionDef) -> bool:
    """Whether `node` is `MODULE.a.b...` of a module name (torch, math, jnp, ...) that `fn` does not rebind."""
    base = node
    while isinstance(base, ast.Attribute):
        base = base.value
    return isinstance(base, ast.Name) and base.id in MODULES and base.id not in _assigned(fn)


def native_source(source: str, file: str, task) -> str:
    """A native candidate file that runs the Isaac reward of `source` (the text of `file`) on `task`'s Isaac names.

    Raises `CandidateError` for a file it cannot run, naming what: no `compute_reward`, a syntax error, an argument
    `task` (a Task, or its name) has no Isaac name for, or a name, torch function or tensor method envcoder's torch
    does not know."""
    if isinstance(task, str):
        from envcoder.tasks import get_task
        task = get_task(task)
    names = getattr(task, "isaac_names", {})
    if not names:
        raise CandidateError(file, f"is a reward written for Isaac Gym, and task {task.name} has no IsaacGymEnvs "
                                   "counterpart (Cartpole, Ant, Humanoid and Anymal have)")
    code = reward_code(source, file)
    try:
        tree = ast.parse(code)
    except SyntaxError as err:
        raise CandidateError(file, f"syntax error in its reward code: {err.msg}", line=err.lineno) from None
    reward = _reward_function(tree)
    if reward is None:
        inline = next((method.name for cls in tree.body if isinstance(cls, ast.ClassDef) for method in cls.body
                       if isinstance(method, ast.FunctionDef) and "self.rew_buf" in ast.unparse(method)), None)
        if inline:
            raise CandidateError(file, f"its task class computes the reward inside its method {inline}, and "
                                       "envcoder runs a module-level reward function: move the reward into a "
                                       "module-level function of the attributes it reads, and have the method call it "
                                       "(`self.rew_buf[:] = compute_reward(self.root_states, ...)`, Eureka's format)")
        raise CandidateError(file, "defines no module-level function: the reward must be one (Eureka's "
                                   "`compute_reward(root_states, ...)`)")
    top = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef) and node is not reward}
    args = reward.args
    if args.vararg or args.kwarg or args.kwonlyargs:
        raise CandidateError(file, "compute_reward takes *args, **kwargs or keyword-only arguments: Isaac's task "
                                   "calls it with one attribute per named argument", function="compute_reward")
    taken = [a.arg for a in args.posonlyargs + args.args]
    given = _call_site(tree, reward, names, file, task)  # a task file's call: `(self.root_states[:, 7:10], ...)`
    if given is None:  # Eureka's call: `self.<name>` for each argument
        unknown = [a for a in taken if a not in names]
        if unknown:
            raise CandidateError(file, f"compute_reward takes {', '.join(map(repr, unknown))}, which {task.name}'s "
                                       f"IsaacGymEnvs task class does not have at reward time; it may take "
                                       f"{', '.join(sorted(names))}", function="compute_reward", line=reward.lineno)
        given = {a: f"isaac[{a!r}]" for a in taken}
    _check_script_types(reward, code, given, names, file, task)
    wanted, queue = [], [reward]
    while queue:  # the module-level functions the reward calls, and theirs
        fn = queue.pop()
        wanted.append(fn)
        queue += [top[name] for name in _called_names(fn) if name in top and top[name] not in wanted + queue]
    used = {node.id for fn in wanted for node in ast.walk(fn) if isinstance(node, ast.Name)}
    constants = [node for node in tree.body if isinstance(node, ast.Assign) and len(node.targets) == 1
                 and isinstance(node.targets[0], ast.Name) and node.targets[0].id in used and _literal(node.value)]
    texts = {id(fn): _function_text(fn, code, REWARD if fn is reward else fn.name) for fn in wanted}
    for fn in wanted:
        _Cleaner().visit(fn)
    _check_names(wanted, {c.targets[0].id for c in constants}, file, task)
    call = ", ".join(given[a] for a in taken)
    in_call = {node.id for node in ast.walk(ast.parse(call or "0")) if isinstance(node, ast.Name)}
    helpers = sorted(name for name in used | in_call if name in HELPERS
                     and (name in in_call or all(name not in _assigned(fn) for fn in wanted)))
    imports = ", ".join(["isaac_state", "to_envcoder", "torch", *helpers])
    body = "\n\n\n".join([ast.unparse(node) for node in constants]
                          + [texts[id(fn)] for fn in sorted(wanted, key=lambda f: f.lineno)])
    return (f'"""{Path(file).name}: a reward written for Isaac Gym, run by envcoder on {task.name}.\n\n'
            f"isaac_reward is the file's compute_reward as it was written (decorators and annotations dropped).\n"
            f"Its arguments are {task.name}'s IsaacGymEnvs attributes in Isaac's conventions (quaternions x, y, z, w;\n"
            f"`envcoder tasks --task {task.name} --isaac` lists them), and `torch` is torch on jax.numpy.\n"
            '"""\n\n'
            f"from envcoder.shaping.isaac_torch import {imports}\n\n\n"
            f"def compute_reward(state):\n"
            f"    isaac = isaac_state(state, {task.name!r})\n"
            f"    return to_envcoder(isaac_reward({call}), state)\n\n\n{body}\n")


TENSOR_TYPES = {"Tensor", "torch.Tensor"}
NUMBER_TYPES = {"float", "int", "bool"}


def _script_types(fn: ast.FunctionDef, code: str) -> dict[str, str]:
    """What TorchScript takes each argument of `fn` to be: its annotation, else its `# type: (...)` comment's,
    else `Tensor` (TorchScript's default)."""
    params = [a for a in fn.args.posonlyargs + fn.args.args]
    commented = []
    try:
        scripted = next(node for node in ast.parse(code, type_comments=True).body
                        if isinstance(node, ast.FunctionDef) and node.lineno == fn.lineno)
        if scripted.type_comment:
            inside = scripted.type_comment.split("->")[0].strip()[1:-1]
            commented = [part.strip() for part in re.split(r",(?![^\[]*\])", inside)] if inside else []
    except (SyntaxError, ValueError, StopIteration):
        pass
    types = {}
    for i, arg in enumerate(params):
        if arg.annotation is not None:
            types[arg.arg] = ast.unparse(arg.annotation)
        elif len(commented) == len(params):
            types[arg.arg] = commented[i]
        else:
            types[arg.arg] = "Tensor"
    return types


def _check_script_types(fn: ast.FunctionDef, code: str, given: dict[str, str], names, file: str, task) -> None:
    """Refuse a `torch.jit.script` reward whose argument types cannot take what Isaac's task class passes (`given`:
    the call's text for each argument, `isaac['NAME']` where it passes an attribute as it is): a tensor declared
    for an attribute that is a Python number (or the reverse). TorchScript refuses such a call, and Isaac Gym
    (Eureka counts it an execution error) never trained the reward."""
    scripted = any("jit" in ast.unparse(d) and "script" in ast.unparse(d) for d in fn.decorator_list)
    if not scripted:
        return
    for param, declared in _script_types(fn, code).items():
        attribute = re.fullmatch(r"isaac\['(\w+)'\]", given.get(param, ""))
        name = attribute.group(1) if attribute else None
        if name not in names:
            continue
        holds_tensor = names[name].shape.startswith("[")
        declared_tensor = declared in TENSOR_TYPES
        there = "there" if name == param else f"in self.{name}, which its task class passes"
        if declared_tensor and not holds_tensor and names[name].shape in ("float", "int"):
            annotated = any(a.arg == param and a.annotation is not None for a in fn.args.args)
            how = (f"declares {param!r} a torch.Tensor" if annotated else
                   f"leaves {param!r} unannotated, a Tensor to TorchScript")
            raise CandidateError(file, f"compute_reward is torch.jit.script and {how}, but {task.name}'s IsaacGymEnvs "
                                       f"task class holds a Python {names[name].shape} {there}: TorchScript refuses "
                                       f"that call, as it did in Isaac Gym; declare it {names[name].shape}",
                                 function="compute_reward", line=fn.lineno)
        if declared in NUMBER_TYPES and holds_tensor:
            raise CandidateError(file, f"compute_reward is torch.jit.script and declares {param!r} a {declared}, but "
                                       f"{task.name}'s IsaacGymEnvs task class holds a tensor {names[name].shape} "
                                       f"{there}: TorchScript refuses that call, as it did in Isaac Gym; declare it "
                                       "torch.Tensor", function="compute_reward", line=fn.lineno)


def _function_text(fn: ast.FunctionDef, code: str, name: str) -> str:
    """The function's text as written, comments kept, under `name`: its decorators dropped, its signature without
    annotations, `np.` read as `jnp.` and `F.` as `torch.nn.functional.`; an argument it changes in place is copied
    first (in the native format a function may not change what it is given)."""
    lines = code.splitlines()
    params = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    changed = {node.value.id for node in ast.walk(fn) if isinstance(node, ast.Subscript)
               and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)} & set(params)
    changed |= {node.func.value.id for node in ast.walk(fn) if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                and node.func.attr.endswith("_") and not node.func.attr.startswith("_")} & set(params)
    defaults = [None] * (len(params) - len(fn.args.defaults)) + [ast.unparse(d) for d in fn.args.defaults]
    signature = ", ".join(f"{p}_given" if p in changed else p if d is None else f"{p}={d}"
                          for p, d in zip(params, defaults))
    first = fn.body[0]
    if first.lineno == fn.lineno:  # a one-line function
        clean = _Cleaner().visit(ast.parse(ast.unparse(fn)).body[0])
        clean.name = name
        return ast.unparse(clean)
    ends = [n.end_lineno for n in ast.walk(fn.args) if getattr(n, "end_lineno", None)]
    start = fn.returns.end_lineno if fn.returns is not None else max(ends, default=fn.lineno)
    body = lines[start:fn.end_lineno]  # comments between the signature and the first statement kept
    while body and start < first.lineno - 1 and not body[0].strip().startswith("#") and body[0].strip():
        body, start = body[1:], start + 1  # the rest of the signature, e.g. a closing `) -> ...:` line
    indent = re.match(r"\s*", lines[first.lineno - 1]).group(0)
    copies = [f"{indent}{p} = {p}_given.clone()" for p in params if p in changed]
    text = "\n".join([f"def {name}({signature}):", *copies, *body])
    text = re.sub(r"(?<![\w.])(np|numpy)\.", "jnp.", text)
    return re.sub(r"(?<![\w.])F\.", "torch.nn.functional.", text)


def _reward_function(tree: ast.Module) -> ast.FunctionDef | None:
    """The reward among a file's module-level functions, as Isaac Gym would call it: in a whole task file, the one
    its class assigns to `self.rew_buf`; else the last `compute_reward`; else the first function (Eureka calls the
    first function of an answer, whatever its name)."""
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    by_name = {fn.name: fn for fn in functions}  # a name defined twice: the last, as Python binds it
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    for method in (node for cls in classes for node in ast.walk(cls) if isinstance(node, ast.FunctionDef)):
        to_rew_buf = {name.id for node in ast.walk(method) if isinstance(node, ast.Assign)  # `self.rew_buf[:] = r`
                      and any("rew_buf" in ast.unparse(target) for target in node.targets)
                      for name in ast.walk(node.value) if isinstance(name, ast.Name)} - {"self"}
        for node in ast.walk(method):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id in by_name
                    and any("rew_buf" in ast.unparse(target) or _local_names(target) & to_rew_buf
                            for target in node.targets)):
                return by_name[node.value.func.id]
    if classes and "compute_reward" not in by_name:  # a task file whose class's reward is not a function's
        return None
    return by_name.get("compute_reward") or (functions[0] if functions else None)


def _local_names(target: ast.AST) -> set[str]:
    """The plain names an assignment's target binds (`reward` in `reward, reset = ...`; none in `self.x[:] = ...`)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return {name for element in target.elts for name in _local_names(element)}
    return set()


def _call_site(tree: ast.Module, reward: ast.FunctionDef, names, file: str, task) -> dict[str, str] | None:
    """Of a whole task file: what its task class's call passes for each argument of `reward`, as text of the native
    file (`self.root_states[:, 7:10]` becomes `isaac['root_states'][:, 7:10]`; the method's `actions` is
    `self.actions`, as `VecTask.post_physics_step` passes it; a local the method computed first from attributes is
    put in its place); an argument the call leaves out takes its default. None where the file has no such call
    (Eureka's way then: each argument is the attribute of its name).

    Raises `CandidateError` where the call cannot be made here: it passes something of the class that envcoder does
    not have, or leaves out an argument without a default (TypeError in Isaac Gym too)."""
    calls = [(method, node) for cls in tree.body if isinstance(cls, ast.ClassDef)
             for method in ast.walk(cls) if isinstance(method, ast.FunctionDef)
             for node in ast.walk(method)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == reward.name]
    if not calls:
        return None
    method, call = calls[-1]
    where = dict(function=reward.name, line=call.lineno)
    params = [a.arg for a in reward.args.posonlyargs + reward.args.args]
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise CandidateError(file, f"its task class calls {reward.name} with *args or **kwargs: envcoder reads the "
                                   "call's arguments one by one; name each", **where)
    passed = dict(zip(params, call.args)) | {k.arg: k.value for k in call.keywords}
    if len(call.args) > len(params) or set(passed) - set(params):
        raise CandidateError(file, f"its task class calls {reward.name} with more arguments than it takes "
                                   f"({', '.join(params)}): TypeError in Isaac Gym too", **where)
    locals_ = {}  # the method's locals assigned once before the call, by name
    for node in ast.walk(method):
        if isinstance(node, ast.Assign) and node.lineno < call.lineno:
            for target in node.targets:
                if isinstance(target, ast.Name):
                    locals_[target.id] = node.value if target.id not in locals_ else None
    inputs = {a.arg for a in method.args.args[1:]}  # `actions` in `compute_reward(self, actions)`
    given = {}
    for name, node in passed.items():
        text, missing = _translate(node, names, inputs, locals_)
        if missing:
            raise CandidateError(file, f"its task class passes `{ast.unparse(node)}` for {name!r}, and {missing}; "
                                       f"{task.name}'s IsaacGymEnvs task class has at reward time "
                                       f"{', '.join(sorted(names))}", **where)
        given[name] = text
    defaults = dict(zip(params[len(params) - len(reward.args.defaults):], reward.args.defaults))
    left_out = [p for p in params if p not in given and p not in defaults]
    if left_out:
        raise CandidateError(file, f"its task class calls {reward.name} without {', '.join(map(repr, left_out))}, "
                                   "which have no default: TypeError in Isaac Gym too", **where)
    return {p: given.get(p) or ast.unparse(defaults[p]) for p in params}


def _translate(node: ast.AST, names, inputs: set[str], locals_: dict, depth: int = 0) -> tuple[str, str]:
    """`node`, an argument of the task class's call, as text of the native file, and what of it envcoder cannot
    give ("" where nothing)."""
    missing = []

    class Replace(ast.NodeTransformer):
        def visit_Attribute(self, n):
            if isinstance(n.value, ast.Name) and n.value.id == "self":
                if n.attr not in names:
                    missing.append(f"`self.{n.attr}` is not an attribute envcoder has{_close(n.attr, names)}")
                return ast.Subscript(value=ast.Name(id="isaac", ctx=ast.Load()), slice=ast.Constant(n.attr),
                                     ctx=ast.Load())
            return self.generic_visit(n)

        def visit_Name(self, n):
            if n.id in inputs:
                if n.id not in names:
                    missing.append(f"`{n.id}`, the method's argument, is not an attribute envcoder has")
                return ast.Subscript(value=ast.Name(id="isaac", ctx=ast.Load()), slice=ast.Constant(n.id),
                                     ctx=ast.Load())
            if n.id in locals_ and locals_[n.id] is not None and depth < 8:
                text, lost = _translate(locals_[n.id], names, inputs, locals_, depth + 1)
                missing.extend([lost] if lost else [])
                return ast.parse(f"({text})", mode="eval").body
            if n.id not in MODULES and n.id not in HELPERS and n.id not in ("True", "False", "None"):
                missing.append(f"`{n.id}` is a local of the task class's method that envcoder does not compute "
                               "(only the reward function runs)")
            return n
    text = ast.unparse(Replace().visit(ast.parse(ast.unparse(node), mode="eval").body))
    return text, missing[0] if missing else ""


def _literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except ValueError:
        return False


def describe_isaac(task) -> str:
    """Markdown: the names a reward written for Isaac Gym may take on `task`, with shapes, units and meanings, and
    what runs of torch (`envcoder tasks --task T --isaac`)."""
    if not task.isaac_names:
        return f"# {task.name}: no IsaacGymEnvs counterpart\n\nRewards written for Isaac Gym run on Cartpole, Ant, " \
               "Humanoid and Anymal.\n"
    lines = [f"# {task.name}: the names of its IsaacGymEnvs task class at reward time", "",
             "A reward written for Isaac Gym (`compute_reward(root_states, dt, ...)`, Eureka's format) takes any of "
             "these as arguments, by name, in Isaac's conventions: quaternions are (x, y, z, w), as in Isaac Gym. "
             "`E` is the number of environments.", ""]
    lines += [f"- {name} {spec.shape} ({spec.units}): {spec.meaning}" for name, spec in sorted(task.isaac_names.items())]
    from envcoder.shaping.isaac_torch import torch

    refused = {f"torch.{n}": getattr(torch, n).refused for n in TORCH_FUNCTIONS
               if hasattr(getattr(torch, n), "refused")}
    refused |= {n: fn.refused for n, fn in HELPERS.items() if hasattr(fn, "refused")}
    runs = sorted(n for n in TORCH_FUNCTIONS if not n[0].isupper() and f"torch.{n}" not in refused)
    lines += ["", "## What runs", "",
              f"- torch functions: {', '.join(runs)}",
              f"- tensor methods: {', '.join(sorted(TENSOR_METHODS))}",
              f"- helpers of isaacgym.torch_utils / torch_jit_utils (x, y, z, w): "
              f"{', '.join(sorted(n for n in HELPERS if n not in refused))}",
              "- math, and numpy as jax.numpy (`np.` reads as `jnp.`)",
              "- refused, each saying why: " + "; ".join(f"{n} ({why})" for n, why in sorted(refused.items())), ""]
    return "\n".join(lines)


def check_conversion(original, converted, task, states) -> str | None:
    """Why the converted file's reward differs from the original's on `states` (None: the same reward and the same
    components, to float32 rounding). `original` and `converted` are validated candidates whose functions are the
    jail's programs."""
    import jax
    import numpy as np

    def reward(candidate):  # the program as the learner calls it: constants and states of one group
        program = candidate.functions["compute_reward"]
        constants = candidate.function_params.get("compute_reward", {})
        params = {name: np.asarray([constants[name]], np.float32) for name in program.param_names}
        out = jax.tree.map(lambda x: x[0], program(params, jax.tree.map(lambda x: np.asarray(x)[None], states)))
        total, parts = out if isinstance(out, tuple) else (out, {})
        return np.asarray(total), {name: np.asarray(value) for name, value in parts.items()}

    (a, parts_a), (b, parts_b) = reward(original), reward(converted)
    if sorted(parts_a) != sorted(parts_b):
        return f"its components are {', '.join(sorted(parts_b))}, the original's {', '.join(sorted(parts_a))}"
    for name, x, y in [("reward", a, b)] + [(name, parts_a[name], parts_b[name]) for name in parts_a]:
        if x.shape != y.shape or not np.allclose(x, y, rtol=1e-5, atol=1e-6, equal_nan=True):
            worst = float(np.nanmax(np.abs(x - y))) if x.shape == y.shape else float("nan")
            return f"its {name} differs from the original's on the sample states (largest difference {worst:.3g})"
    return None
