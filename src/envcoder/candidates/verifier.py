"""The verifier: the one place where a program that a candidate's process handed over is parsed. The training process
loads only what the verifier writes back.

A candidate's process may be an attacker with full Python or native code: the bytes it sends as a program may be
damaged to crash a parser, labelled for another platform, call the host, loop 2^31 times while reporting no cost, or
carry a size check that fails at the run's own size. Any of these ended a run that parsed them. The verifier runs in
a process of its own (`verify_handover`, in a fresh child of a sandbox worker, which never ran candidate code),
locked in and limited as a candidate's process is (`envcoder.candidates.jail`). For each program it:

1. deserializes it and checks its platforms (the run's and the CPU, nothing else), its devices and effects;
2. checks its inputs against what the learner passes a function of that type (`abstract_arguments`) and its outputs
   against what the shaping type declares (`envcoder.candidates.programs.check_signature`);
3. walks every operation against an allow-list (`check_operations`): StableHLO and CHLO computation, functions and
   calls; no host, device-to-device or runtime operation, no custom call but `jax.export`'s own size checks, each on
   the arguments' sizes alone (a forged one on data could fail inside the training program);
4. writes the module back as a new program (the canonical form) and, from here on, works on that alone;
5. measures its costs with XLA's analyses (`envcoder.candidates.costs.program_costs`), refusing one far costlier than
   the task's own function, and runs it once on the task's sample states.

A verifier that crashes, hangs or refuses costs the one file: the sandbox leaves it out with one line that says why.
"""

from __future__ import annotations

import base64
import dataclasses
import types
from typing import Callable, Mapping

from envcoder.shaping.api import SHAPING_TYPES, CandidateError

MAX_PROGRAM_BYTES = 32 * 2**20
"""The largest program (serialized) the verifier reads."""

STRUCTURE_OPERATIONS = ("builtin.module", "func.func", "func.call", "func.return")
"""Operations that only structure a program: its module, functions and calls between them."""

COMPUTING_DIALECTS = ("stablehlo.", "chlo.")
"""The dialects whose operations compute (less `REFUSED_OPERATIONS` and custom calls)."""

REFUSED_OPERATIONS = frozenset({
    "stablehlo.send", "stablehlo.recv", "stablehlo.infeed", "stablehlo.outfeed", "stablehlo.create_token",
    "stablehlo.after_all", "stablehlo.all_reduce", "stablehlo.all_gather", "stablehlo.all_to_all",
    "stablehlo.reduce_scatter", "stablehlo.collective_permute", "stablehlo.collective_broadcast",
    "stablehlo.partition_id", "stablehlo.replica_id"})
"""Operations that reach the host, other devices or the runtime: a shaping function needs none of them."""

SIZE_CHECK = "shape_assertion"
"""The one custom call a program may hold: `jax.export`'s check of its symbolic sizes."""


def verify_handover(request: Mapping, task, states: Mapping, on_phase: Callable[[str, str], None]) -> dict:
    """The verified form of one file's hand-over: `{"programs": {function: [program (base64)]}, "costs": {function:
    cost}}`, or `CandidateError` with why it is refused.

    `request`: `{"path", "programs": {function: [program]}, "claims": the file's first validated variant's record
    (`Candidate.to_wire`: its sizes and constants), "platform": the run's, "cost_envs": [environments]}`, all of it
    the candidate's process's word. `states`: the task's sample states `[E, ...]`. `on_phase(function, step)` tells
    the sandbox where the verifier is (a hang names it)."""
    from envcoder.candidates.costs import check_program_cost, program_costs
    from envcoder.candidates.load import api_callable
    from envcoder.candidates.programs import abstract_arguments

    file, programs, claims = str(request.get("path")), request.get("programs"), request.get("claims")
    if not isinstance(programs, dict) or not programs or not isinstance(claims, dict):
        raise CandidateError(file, "its hand-over holds no programs")
    unknown = [str(api)[:40] for api in programs if api not in SHAPING_TYPES]
    if unknown:
        raise CandidateError(file, f"its hand-over names {unknown}, which are not shaping functions")
    sizes = _claimed_sizes(claims, file)
    platforms = tuple(dict.fromkeys((str(request.get("platform")), "cpu")))
    read = {}
    for api in sorted(programs, key=lambda api: api != "curriculum"):  # the curriculum's shapes are other inputs
        on_phase(api, "reading")
        blobs = programs[api]
        if not isinstance(blobs, list) or not 1 <= len(blobs) <= 2:
            raise CandidateError(file, "its hand-over holds no program list", function=api)
        read[api] = [_read(blob, file, api, platforms) for blob in blobs]
    curriculum = _curriculum_shapes(read.get("curriculum"), task, states)
    shapes = {name: tuple(int(d) for d in x.shape[1:]) for name, x in states.items() if hasattr(x, "shape")}
    verified, costs = {}, {}
    for api, exported in read.items():
        on_phase(api, "checking")
        names = sizes.function_params.get(api, {})
        arguments = abstract_arguments(api, states, sizes.action_dim, task.discrete, curriculum)
        if len(exported) != len(arguments):
            raise CandidateError(file, f"its hand-over holds {len(exported)} program(s), the learner calls it in "
                                       f"{len(arguments)} way(s)", function=api)
        for program, args in zip(exported, arguments):
            _check_inputs(program, names, args, file, api)
            _check_outputs(program, api, sizes, task, file, shapes)
        on_phase(api, "checking")
        canonical = [_canonical(program, file, api) for program in exported]
        on_phase(api, "measuring")
        own = api_callable(api, task.defaults[api]) if api in task.defaults else None
        executables: list = []
        costs[api] = program_costs(own, names, [c for c, _ in canonical], arguments, request.get("cost_envs") or [64],
                                   executables)
        # Before it runs at the sample's size: at the run's own size the training process holds it to the same
        # bar and to the device's memory (`envcoder.candidates.costs.check_costs`).
        check_program_cost(costs[api], api, file, min(costs[api]["envs"]))
        on_phase(api, "running")
        for executable, args in zip(executables, arguments):
            _run_once(executable, costs[api]["envs"][0], names, args, states, file, api)
        verified[api] = [blob for _, blob in canonical]
    return {"programs": verified, "costs": costs}


def _claimed_sizes(claims: Mapping, file: str) -> types.SimpleNamespace:
    """The sizes and constants the candidate's process claims for the file (checked for type here, against the
    programs below, and against every variant's record by the sandbox)."""
    def size(name):
        value = claims.get(name)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2**16):
            raise CandidateError(file, f"its hand-over claims {name} = {str(value)[:40]}, not a size")
        return value
    fields = {kind.size for kind in SHAPING_TYPES.values() if kind.size} | {"action_dim"}
    found = {name: size(name) for name in fields}
    components = claims.get("reward_components") or []
    params = claims.get("function_params") or {}
    if not (isinstance(components, list) and all(isinstance(c, str) and c.isidentifier() for c in components)):
        raise CandidateError(file, "its hand-over names reward components that are not identifiers")
    if not (isinstance(params, dict) and all(isinstance(p, dict) and all(
            isinstance(k, str) and k.isidentifier() and isinstance(v, (int, float)) and not isinstance(v, bool)
            for k, v in p.items()) for p in params.values())):
        raise CandidateError(file, "its hand-over gives constants that are not named numbers")
    if not found["action_dim"]:
        raise CandidateError(file, "its hand-over claims no action size")
    return types.SimpleNamespace(**found, reward_components=tuple(components), function_params=params)


def _read(blob, file: str, api: str, platforms: tuple[str, ...]):
    """One program deserialized, its platforms exactly `platforms`, one device, no effects or safety checks
    disabled."""
    from jax import export

    if not isinstance(blob, str) or len(blob) > MAX_PROGRAM_BYTES * 4 // 3 + 4:
        raise CandidateError(file, "its hand-over holds a program that is not text of a readable size", function=api)
    try:
        data = base64.b64decode(blob, validate=True)
        exported = export.deserialize(bytearray(data))
    except Exception as err:  # noqa: BLE001 - whatever damaged bytes make the deserializer raise
        raise CandidateError(file, f"its program cannot be read: {type(err).__name__}: {str(err)[:200]}",
                             function=api) from None
    if tuple(exported.platforms) != platforms:
        raise CandidateError(file, f"its program is made for the platforms {list(exported.platforms)[:4]}, the run "
                                   f"takes {list(platforms)}", function=api)
    if exported.nr_devices != 1 or exported.ordered_effects or exported.unordered_effects:
        raise CandidateError(file, "its program spans devices or has side effects: not allowed in shaping code",
                             function=api)
    if exported.disabled_safety_checks:
        raise CandidateError(file, "its program turns JAX's safety checks off: not allowed in shaping code",
                             function=api)
    if any(s is not None for s in (*exported.in_shardings_hlo, *exported.out_shardings_hlo)):
        raise CandidateError(file, "its program is sharded: not allowed in shaping code", function=api)
    return exported


def _check_inputs(exported, names, args: tuple, file: str, api: str) -> None:
    """The program takes exactly what the learner passes: its constants `{name: [g]}` and `args` (the shapes of
    `abstract_arguments`, the sizes `g` and `e` symbolic)."""
    import jax
    import jax.numpy as jnp

    g = jax.tree.leaves(args)[0].shape[0]
    expected = ({name: jax.ShapeDtypeStruct((g,), jnp.float32) for name in names}, *args)
    leaves, tree = jax.tree.flatten(expected)
    given = [(tuple(str(d) for d in a.shape), str(a.dtype)) for a in exported.in_avals]
    wanted = [(tuple(str(d) for d in a.shape), str(a.dtype)) for a in leaves]
    if exported.in_tree != jax.tree.structure((expected, {})) or given != wanted:
        raise CandidateError(file, "its program takes other arguments than the learner passes a function of its type "
                                   f"(with the constants {sorted(names)})", function=api)


def _check_outputs(exported, api: str, sizes, task, file: str, shapes: Mapping) -> None:
    """Each output as the shaping type declares (`check_signature`), its sizes after the environment axis fixed."""
    from envcoder.candidates.programs import check_signature, check_sizes

    check_sizes(exported, file, api)
    check_signature(exported, api, sizes, task, file, shapes)


def _curriculum_shapes(programs, task, states) -> dict[str, tuple[int, ...]]:
    """The shapes of the candidate's curriculum values (what its functions see as `state["curriculum"]`): its own
    curriculum program's outputs, else the task's own curriculum's."""
    import jax
    import jax.numpy as jnp

    from envcoder.candidates.load import api_callable
    from envcoder.shaping.curriculum import CURRICULUM_METRICS

    if programs:
        out = jax.tree_util.tree_unflatten(programs[0].out_tree, programs[0].out_avals)
        if not isinstance(out, dict):
            return {}
        return {n: tuple(int(d) for d in v.shape[1:]) for n, v in out.items()
                if all(isinstance(d, int) for d in v.shape[1:])}
    own = task.defaults.get("curriculum")
    if own is None:
        return {}
    nan = {n: jnp.float32(jnp.nan) for n in CURRICULUM_METRICS}
    out = jax.eval_shape(api_callable("curriculum", own), jnp.float32(0), nan, None)
    return {n: tuple(v.shape) for n, v in (out or {}).items()}


SIZE_ARITHMETIC = frozenset({
    "stablehlo.constant", "stablehlo.get_dimension_size", "stablehlo.compare", "stablehlo.add",
    "stablehlo.subtract", "stablehlo.multiply", "stablehlo.divide", "stablehlo.remainder", "stablehlo.maximum",
    "stablehlo.minimum", "stablehlo.and", "stablehlo.or", "stablehlo.not", "stablehlo.select", "stablehlo.convert",
    "stablehlo.reshape", "stablehlo.negate", "stablehlo.sign", "stablehlo.abs"})
"""What a size check's operands may be computed with: the arguments' sizes, constants and arithmetic on them."""


def check_operations(module, file: str, api: str) -> None:
    """Walk every operation of `module` (an MLIR module) against the allow-list: what it computes, and `jax.export`'s
    size checks (`SIZE_CHECK`) on the arguments' sizes alone, so that none can fail on data, nor at any size the
    learner passes that the arguments' shapes allow."""
    def walk(operation):
        for region in operation.regions:
            for block in region.blocks:
                for op in list(block.operations):
                    op = op.operation
                    name = op.name
                    if name == "stablehlo.custom_call":
                        _size_check(op, file, api)
                        continue
                    if name not in STRUCTURE_OPERATIONS and (
                            not name.startswith(COMPUTING_DIALECTS) or name in REFUSED_OPERATIONS):
                        raise CandidateError(file, f"its program uses {name[:60]}, which is not pure computation: "
                                                   "not allowed in shaping code", function=api)
                    walk(op)
    walk(module.operation)


def _size_check(op, file: str, api: str) -> None:
    """A custom call is allowed only as `jax.export`'s size check: that target, no results, nothing but its
    message, version and side-effect flag as attributes."""
    attributes = op.attributes
    target = str(attributes["call_target_name"]).strip('"') if "call_target_name" in attributes else "?"
    extra = {a if isinstance(a, str) else str(a.name) for a in attributes}
    if target != SIZE_CHECK or len(op.results) or not extra <= {"call_target_name", "error_message", "api_version",
                                                                 "has_side_effect"}:
        raise CandidateError(file, f"its program calls {target[:60]!r}, an operation outside pure computation (a host "
                                   "callback or a library call): not allowed in shaping code", function=api)
    if not all(_of_sizes(value) for value in op.operands):
        raise CandidateError(file, "its program checks a condition on data where `jax.export` checks only the "
                                   "arguments' sizes: it could fail inside the training program", function=api)


def _of_sizes(value, depth: int = 0) -> bool:
    """Whether `value` (an MLIR value) is computed from the arguments' sizes and constants alone
    (`SIZE_ARITHMETIC`), not from an argument's data."""
    owner = value.owner
    if depth > 64 or not hasattr(owner, "operands") or getattr(owner, "name", None) not in SIZE_ARITHMETIC:
        return False  # an argument itself (a block's), or any other operation
    if owner.name == "stablehlo.get_dimension_size":
        return True
    return all(_of_sizes(operand, depth + 1) for operand in owner.operands)


def _canonical(exported, file: str, api: str):
    """`(program, blob)`: `exported` with its module checked (`check_operations`) and written anew (serialized by
    this process), then read back from those bytes: the program the training process will load, computing what the
    child's did (the same module: a run's group order, which follows what its programs compute, stays as it was)."""
    from jax import export
    from jax._src.export import _export
    from jax._src.interpreters import mlir

    with mlir.make_ir_context():
        try:
            module = exported.mlir_module(serialized=False)
        except Exception as err:  # noqa: BLE001 - damaged bytecode that the deserializer still took
            raise CandidateError(file, f"its program's module cannot be read: {type(err).__name__}: "
                                       f"{str(err)[:200]}", function=api) from None
        check_operations(module, file, api)
        module_bytes = _export._module_to_bytecode(module)
    fields = {"mlir_module_serialized": module_bytes}
    if "_get_vjp" in {f.name for f in dataclasses.fields(exported)}:
        fields["_get_vjp"] = None
    blob = dataclasses.replace(exported, **fields).serialize()
    return export.deserialize(bytearray(blob)), base64.b64encode(blob).decode()


def _run_once(executable, envs: int, names: Mapping[str, float], args: tuple, states: Mapping, file: str,
              api: str) -> None:
    """Run the program once, as compiled at one group of `envs` environments, on the first `envs` of the task's sample
    states (repeated where there are fewer)."""
    import jax
    import numpy as np

    from envcoder.candidates.handover import concrete_arguments

    have = len(next(v for k, v in states.items() if k != "curriculum"))
    rows = np.arange(envs) % have
    sample = {k: (np.asarray(v)[rows] if k != "curriculum" else v) for k, v in states.items()}
    values = {n: np.full((1,), v, np.float32) for n, v in names.items()}
    try:
        jax.block_until_ready(executable(values, *concrete_arguments(args, sample, 1, envs)))
    except Exception as err:  # noqa: BLE001 - what it does at the sample's size
        text = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        raise CandidateError(file, f"its program fails on the sample states ({envs} environments): "
                                   f"{type(err).__name__}: {text}", function=api) from None
