"""A candidate file loaded: checked statically, executed in the restricted namespace, its shaping functions resolved
against the task's defaults. In a run, a file is loaded here only after its sandboxed validation passed
(`envcoder.candidates.sandbox`)."""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import inspect
import json
import math
import threading
from pathlib import Path
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp

from envcoder.candidates import isaac
from envcoder.candidates.constants import lift_constants
from envcoder.candidates.files import LoadFailure, candidate_files, check_name, read_source
from envcoder.candidates.policy import LOAD_TIME_LIMIT_S, candidate_namespace, check_source, time_limit
from envcoder.shaping.api import ALIASES, FALLBACKS, OPTIONAL_ARGUMENTS, SHAPER_TYPES, SIGNATURES, CandidateError
from envcoder.shaping.curriculum import TableError, parse_table, table_curriculum, table_sampler

MAX_VARIANTS = 1024
"""The most combinations a `PARAMS` sweep may make (a 753-byte file asked for a million and grew the process by
gigabytes): checked before anything is expanded."""


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One shaping candidate: the functions it overrides, and where they came from."""

    name: str
    """Unique name in a run (the file's stem); PRNG keys derive from it, never from a position."""
    path: Path | None
    """The candidate file, or None for the task's defaults."""
    source: str
    """The file's full text, copied into the run directory."""
    functions: Mapping[str, Callable]
    """The overriding functions, by API name (only the selected shaper types)."""
    code_key: str
    """Hash of the candidate's code (all its files)."""
    function_keys: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Identity of each function's code, by API name: groups whose function has the same key share one
    trace, vmapped over them."""
    action_dim: int | None = None
    """The policy's action size: entries of a continuous action, or the number of discrete actions. Before
    validation, what the file declares as `ACTION_DIM` (None: inferred from `compute_torque`)."""
    sweep: Mapping[str, tuple[float, ...]] = dataclasses.field(default_factory=dict)
    """The file's `PARAMS` table: constant name -> values to sweep (expanded by `expand_sweeps`)."""
    params: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """This variant's values of the swept constants (empty when the file sweeps nothing)."""
    function_params: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    """The constants each function sees as data, by API name: its file's float constants
    (`envcoder.candidates.constants`), a sweep's values among them (a crossed candidate mixes files)."""
    providers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Of a crossed candidate: which file's candidate (variant) provides each function, by API name."""
    constants_as_data: bool = True
    """Whether its float constants are inputs of the traced functions (`envcoder.candidates.constants`), or
    literals (a file that needs one as a Python number)."""
    obs_dim: int | None = None
    """The policy's observation size, as validation found it (`envcoder.candidates.validate.validate_candidate`);
    None: not validated (a learner refuses it)."""
    reward_components: tuple[str, ...] = ()
    """The names of its reward's components, as validation found them."""
    critic_obs_dim: int | None = None
    """The size of the critic's own observation (the shaping type `envcoder.shaping.api.CRITIC_OBSERVATION`), as
    validation found it; None: the critic reads the actor's."""

    @property
    def validated(self) -> bool:
        """Whether validation has stated its sizes (only such a candidate trains)."""
        return self.obs_dim is not None and self.action_dim is not None

    def sized_as(self, validated: "Candidate") -> "Candidate":
        """This candidate with the sizes validation found for `validated` (copies of one code with other constants,
        validated once)."""
        return dataclasses.replace(self, obs_dim=validated.obs_dim, action_dim=validated.action_dim,
                                   reward_components=validated.reward_components,
                                   critic_obs_dim=validated.critic_obs_dim)

    def to_wire(self) -> dict:
        """The record as JSON data (a worker's reply): every field but its functions, path and source. The training
        process sent the path and source, and takes the functions as the worker's programs, which a sweep's variants
        share (`envcoder.candidates.sandbox`)."""
        return json.loads(json.dumps({f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                                      if f.name not in ("functions", "path", "source")}))

    @classmethod
    def from_wire(cls, data: Mapping, path: Path | None, source: str, functions: Mapping[str, Callable]) -> "Candidate":
        """The record of `to_wire`'s `data`, with its path, source and functions."""
        return cls(**{**data, "sweep": {k: tuple(v) for k, v in data["sweep"].items()},
                      "reward_components": tuple(data["reward_components"])},
                   path=path, source=source, functions=dict(functions))


def _check_signature(fn: ast.FunctionDef, api_name: str, file: str) -> None:
    expected = SIGNATURES[api_name]
    optional = OPTIONAL_ARGUMENTS.get(api_name, ())
    args = fn.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    required = len(positional) - len(args.defaults)
    if args.vararg is None and (len(positional) < len(expected) or required > len(expected) + len(optional)):
        also = f" (or {api_name}({', '.join(expected + optional)}))" if optional else ""
        raise CandidateError(file, f"wrong signature: takes ({', '.join(positional)}), "
                                   f"the API calls it as {api_name}({', '.join(expected)}){also}",
                             function=fn.name, line=fn.lineno)


def api_callable(api_name: str, fn: Callable) -> Callable:
    """`fn` as the learner calls it: with every argument of the API, its optional ones included (which `fn` may
    ignore), and `sample_physics` with the keys of all environments `[E, 2]` (it is written for one)."""
    if getattr(fn, "group_batched", False):  # a program handed over by the worker: called as it was exported
        return fn
    if api_name == "sample_physics":  # written for one environment; called with every environment's key
        @functools.wraps(fn)
        def per_environment(keys, params):
            return jax.vmap(lambda key: fn(key, params))(keys)
        return per_environment
    optional = OPTIONAL_ARGUMENTS.get(api_name, ())
    if not optional:
        return fn
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return fn
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return fn
    accepted = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)
    takes = SIGNATURES[api_name] + optional
    if accepted >= len(takes):
        return fn

    @functools.wraps(fn)
    def call(*args):
        return fn(*args[:accepted])
    return call


def check_statically(source: str, file: str, shaper_types: Sequence[str]) -> tuple[ast.Module, dict[str, str]]:
    """Every check that needs no execution: syntax, the sandbox rules of `check_source`, and that the file
    defines at least one selected function with the API's signature.

    Returns the parsed tree and `{api name: function name}` of the selected functions it defines.
    """
    try:
        tree = ast.parse(source, filename=file)
    except SyntaxError as err:
        raise CandidateError(file, f"syntax error: {err.msg}", line=err.lineno) from None
    check_source(tree, file)
    defined = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    wanted = {}
    for fn_name, node in defined.items():
        api_name = ALIASES.get(fn_name, fn_name)
        if api_name in shaper_types:
            _check_signature(node, api_name, file)
            wanted[api_name] = fn_name
    if not wanted and "curriculum" in shaper_types and _assigns(tree, "CURRICULUM"):
        return tree, wanted
    if not wanted:
        near = [n for n in defined if n not in SIGNATURES and n not in ALIASES and n.startswith(("compute", "sample"))]
        hint = f" (found {', '.join(near)}: misspelled?)" if near else ""
        raise CandidateError(file, f"defines none of the selected shaping functions "
                                   f"{', '.join(shaper_types)}{hint}")
    return tree, wanted


def _assigns(tree: ast.Module, name: str) -> bool:
    """Whether the module's top level assigns `name`."""
    return any(isinstance(t, ast.Name) and t.id == name for node in tree.body if isinstance(node, ast.Assign)
               for t in node.targets)


def load_candidate(path: str | Path, shaper_types: Sequence[str] = ("compute_reward",), name: str | None = None,
                   source: str | None = None, lift: bool = True, task=None) -> Candidate:
    """Load one candidate file, keeping only the functions of `shaper_types`. With `lift`, its float constants
    are data (`envcoder.candidates.constants`): the functions' `function_params`, and files that differ only in
    them have the same function keys. A reward written for Isaac Gym (`envcoder.candidates.isaac`) runs as the
    native file made of it for `task`; the candidate's `source` stays the file's own text.

    Raises `CandidateError` naming the file, function and reason for any problem.
    """
    path = Path(path)
    file = str(path)
    check_name(name or path.stem, file)
    source = read_source(path) if source is None else source
    code = source
    if isaac.is_isaac(source, path):
        if task is None:
            raise CandidateError(file, "is a reward written for Isaac Gym: it is read for a task (give --task)")
        code = isaac.native_source(source, file, task)
    tree, wanted = check_statically(code, file, shaper_types)
    constants, key_text = {}, ast.dump(tree)
    if lift:
        tree, constants, key_text = lift_constants(tree)

    namespace = candidate_namespace()
    try:
        with time_limit(LOAD_TIME_LIMIT_S, "running the file's module-level code"):
            exec(compile(tree, file, "exec"), namespace)  # noqa: S102 - sandboxed: checked tree, restricted builtins
    except CandidateError:
        raise
    except BaseException as err:  # the file's own top-level code failed
        raise CandidateError(file, f"module-level code failed: {type(err).__name__}: {err}") from None

    functions = {api: namespace[fn_name] for api, fn_name in wanted.items()}
    code_key = hashlib.sha256(key_text.encode()).hexdigest()[:16]
    function_keys = {api: f"{code_key}:{fn_name}" for api, fn_name in wanted.items()}
    if "CURRICULUM" in namespace and "curriculum" in shaper_types:
        if "curriculum" in functions:
            raise CandidateError(file, "defines both curriculum() and a CURRICULUM table: keep one")
        try:
            table = parse_table(namespace["CURRICULUM"], defines_sampler="sample_physics" in functions)
        except TableError as err:
            raise CandidateError(file, str(err)) from None
        functions["curriculum"], function_keys["curriculum"] = table_curriculum(table), f"{code_key}:CURRICULUM"
        if "sample_physics" not in functions and "sample_physics" in shaper_types:
            functions["sample_physics"] = table_sampler(table)
            function_keys["sample_physics"] = f"{code_key}:CURRICULUM"

    action_dim = namespace.get("ACTION_DIM")
    if action_dim is not None and (not isinstance(action_dim, int) or action_dim < 1):
        raise CandidateError(file, f"ACTION_DIM must be a positive int, got {action_dim!r}")
    if action_dim is not None and "compute_torque" not in functions:
        raise CandidateError(file, "ACTION_DIM is set but the file defines no compute_torque to use it")
    return Candidate(
        name=name or path.stem,
        path=path,
        source=source,
        functions=functions,
        code_key=code_key,
        function_keys=function_keys,
        action_dim=action_dim,
        sweep=_parse_sweep(namespace.get("PARAMS"), namespace, file),
        function_params={api: dict(constants) for api in functions if not function_keys[api].endswith(":CURRICULUM")
                         and constants},
        constants_as_data=lift,
    )


TASK_DEFAULT = "task_default"
"""The name of the candidate that keeps every shaping function of its task (`task_default_candidate`)."""


def task_default_candidate(task, shaper_types: Sequence[str]) -> Candidate:
    """The task's own shaping as a candidate named `TASK_DEFAULT`: it overrides nothing, so it trains with the
    task's default functions. Its `source`, which the run directory keeps, shows the defaults of `shaper_types`
    for reading (they run from the task's module, not from that text)."""
    parts = []
    for api in shaper_types:
        fn = task.defaults.get(api)
        if fn is None:
            continue
        try:
            parts.append(inspect.getsource(fn))
        except (OSError, TypeError):
            parts.append(f"# {api}: {getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}\n")
    module = inspect.getmodule(next(iter(task.defaults.values())))
    source = (f'"""{TASK_DEFAULT}: the {task.name} task\'s own shaping ({getattr(module, "__name__", "?")}), trained '
              f'as a candidate to compare with.\nNothing in this file runs: the task\'s default functions of '
              f'{", ".join(shaper_types)} are copied here for reading."""\n\n' + "\n\n".join(parts))
    return Candidate(name=TASK_DEFAULT, path=None, source=source, functions={},
                     code_key=hashlib.sha256(source.encode()).hexdigest()[:16])


def _parse_sweep(table, namespace: dict, file: str) -> dict[str, tuple[float, ...]]:
    """Check a `PARAMS = {"NAME": [values...]}` table; each NAME is a module-level constant."""
    if table is None:
        return {}
    if not isinstance(table, dict) or not table:
        raise CandidateError(file, "PARAMS must be a non-empty dict of constant name -> list of values")
    sweep = {}
    for key, values in table.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise CandidateError(file, f"PARAMS key {key!r} must be the name of a module-level constant")
        if key not in namespace:
            raise CandidateError(file, f"PARAMS names {key!r}, but the file defines no constant {key} "
                                       f"(add e.g. `{key} = {values[0] if values else 1.0}` at module level)")
        if (not isinstance(values, (list, tuple)) or not values
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
            raise CandidateError(file, f"PARAMS[{key!r}] must be a non-empty list of numbers")
        sweep[key] = tuple(float(v) for v in values)
    combinations = math.prod(len(v) for v in sweep.values())
    if combinations > MAX_VARIANTS:
        raise CandidateError(file, f"PARAMS makes {combinations:,} combinations; at most {MAX_VARIANTS:,}: sweep fewer "
                                   "values, or split the sweep over several files")
    return sweep


def call_with_params(fn: Callable, params: Mapping, *args):
    """Call a candidate function with its swept constants set to `params` (numbers or traced arrays).

    The constants are globals of the candidate's own namespace; they are swapped in for the call
    only. Under `jax.vmap` this traces the function once for all variants of a file. The swap holds a lock:
    the learner traces its evaluation in a background thread while the main thread traces the iteration.
    """
    if not params:
        return fn(*args)
    namespace = inspect.unwrap(fn).__globals__
    with _SWAP_LOCK:
        saved = {name: namespace[name] for name in params}
        namespace.update(params)
        try:
            return fn(*args)
        finally:
            namespace.update(saved)


_SWAP_LOCK = threading.RLock()


def load_candidates(directory: str | Path, shaper_types: Sequence[str]) -> tuple[list[Candidate], list[LoadFailure]]:
    """Load every candidate file of `directory` in this process (no sandbox: for trusted files); failures are
    returned, not raised."""
    candidates, failures = [], []
    for file in candidate_files(directory):
        try:
            candidates.append(load_candidate(file, shaper_types))
        except CandidateError as err:
            failures.append(LoadFailure(file=str(file), name=file.stem, error=str(err)))
    return candidates, failures


def source_api(candidate: Candidate, api_name: str, defaults: Mapping[str, Callable]) -> str:
    """The API whose function of `candidate` serves as its `api_name` (itself, or its `FALLBACKS` entry where
    neither the candidate nor the task defines `api_name`)."""
    if api_name in FALLBACKS and api_name not in candidate.functions and api_name not in defaults:
        return FALLBACKS[api_name]
    return api_name


def resolve_functions(candidate: Candidate, defaults: Mapping[str, Callable]) -> dict[str, Callable]:
    """The full set of shaping functions for a candidate, its own called with its constants as the learner calls
    them (`with_constants`), and the task's defaults for the rest."""
    resolved = {}
    for api in SHAPER_TYPES:
        source = source_api(candidate, api, defaults)
        fn = api_callable(api, candidate.functions[source] if source in candidate.functions else defaults[source])
        params = candidate.function_params.get(source)
        resolved[api] = with_constants(fn, params) if params else fn
    return resolved


def with_constants(fn: Callable, params: Mapping[str, float]) -> Callable:
    """`fn` with its constants `params` swapped in as the learner swaps them: traced float32 values, vmapped over
    the groups that share its code (here one), so that a function that needs a constant as a Python number fails
    here as it would in training."""
    values = {name: jnp.asarray([value], jnp.float32) for name, value in params.items()}

    @functools.wraps(fn)
    def call(*args):
        batched = jax.tree.map(lambda x: jnp.expand_dims(x, 0), args)
        out = jax.vmap(lambda p, *a: call_with_params(fn, p, *a))(values, *batched)
        return jax.tree.map(lambda x: x[0], out)
    return call


def defines(candidate: Candidate, api_name: str, defaults: Mapping[str, Callable]) -> bool:
    """Whether `candidate` (or the task, for it) defines `api_name` itself, rather than falling back."""
    return source_api(candidate, api_name, defaults) == api_name


def function_key(candidate: Candidate, api_name: str) -> str:
    """Identity of the code behind one API function of a candidate ('default' when it uses the task's)."""
    return candidate.function_keys.get(api_name, "default")
