"""The hand-over from the jailed worker to the training process: each shaping function of a candidate file as a
serialized program (`jax.export`, StableHLO), batched over groups and environments with both sizes symbolic, and
its constants (`Candidate.function_params`) as an input.

The candidate's process (`envcoder.candidates.worker`) traces its Python once per function (`export_function`); the
verifier (`envcoder.candidates.verifier`) parses, checks, rewrites and measures each program; the training process
loads only the verifier's programs (`Program`) and calls them where it would have called the function, vmapped over a
class's groups (`envcoder.env.grouping`). It never imports or runs the candidate's code, nor parses its bytes. A
function whose behaviour depends on the number of environments or groups cannot be traced with symbolic sizes: it
fails validation instead of training.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
from jax import export

from envcoder.shaping.api import SHAPING_TYPES, CandidateError
from envcoder.shaping.curriculum import CURRICULUM_METRICS

ALLOWED_CUSTOM_CALLS = ("shape_assertion",)
"""Custom calls a program may contain: the checks of its symbolic sizes that `jax.export` writes itself."""

FORBIDDEN_OPERATIONS = ("stablehlo.send", "stablehlo.recv", "stablehlo.infeed", "stablehlo.outfeed",
                        "stablehlo.create_token", "stablehlo.after_all", "stablehlo.rng_bit_generator_host")
"""Operations that reach the host, the network between devices or the runtime: a shaping function needs none."""


def abstract_arguments(api: str, state: Mapping, action_dim: int, discrete: bool,
                       curriculum: Mapping[str, tuple[int, ...]]) -> list[tuple]:
    """The arguments the learner calls `api` with (after `envcoder.candidates.api_callable`), as shapes with the
    group count `g` and environments per group `e` symbolic: one tuple per way it is called (a curriculum is first
    called without previous values). `state`: a sample state `[E, ...]` (the task's fields); `curriculum`: the
    shapes of the candidate's own curriculum values (what its functions see as `state["curriculum"]`)."""
    g, e = export.symbolic_shape("g, e")
    f32 = jnp.float32
    fields = {name: jax.ShapeDtypeStruct((g, e) + tuple(x.shape[1:]), x.dtype) for name, x in state.items()
              if name != "curriculum"}
    if "actions" in fields:  # the candidate's own last action (`action_dim` entries; one-hot where discrete)
        fields["actions"] = jax.ShapeDtypeStruct((g, e, action_dim), state["actions"].dtype)
    if curriculum:
        fields["curriculum"] = {n: jax.ShapeDtypeStruct((g, e) + tuple(s), f32) for n, s in curriculum.items()}
    own = {n: jax.ShapeDtypeStruct((g,) + tuple(s), f32) for n, s in curriculum.items()}
    key = jax.ShapeDtypeStruct((g, 2), jnp.uint32)
    if api == "compute_torque":
        action = (jax.ShapeDtypeStruct((g, e), jnp.int32) if discrete else
                  jax.ShapeDtypeStruct((g, e, action_dim), f32))
        return [(action, fields)]
    if api in ("sample_initial_state", "sample_goal"):
        return [(key, fields)]
    if api == "sample_physics":
        return [(jax.ShapeDtypeStruct((g, e, 2), jnp.uint32), own)]
    if api == "curriculum":
        metrics = {n: jax.ShapeDtypeStruct((g,), f32) for n in CURRICULUM_METRICS}
        iteration = jax.ShapeDtypeStruct((g,), f32)
        return [(iteration, metrics, None), (iteration, metrics, own)]
    return [(fields,)]


def export_function(fn: Callable, param_names: Sequence[str], arguments: list[tuple], platform: str,
                    file: str, api: str) -> list[str]:
    """`fn` (one environment group's function, as the learner calls it: `api_callable`) vmapped over groups, with
    its constants `param_names` swapped in from an input `{name: [g]}`, exported for `platform` once per argument
    shape of `arguments`; the programs as text (base64). Raises `CandidateError` when a trace fails (e.g. the
    function depends on the number of environments)."""
    from envcoder.candidates.load import call_with_params

    def grouped(params, *args):
        return jax.vmap(lambda p, *a: call_with_params(fn, p, *a))(params, *args)
    g = jax.tree.leaves(arguments[0])[0].shape[0]  # the group count of `abstract_arguments`' scope
    params = {name: jax.ShapeDtypeStruct((g,), jnp.float32) for name in param_names}
    programs = []
    for args in arguments:
        try:
            # Lowered for the worker's CPU too, in the same trace: the worker runs it (`check_handover`).
            platforms = tuple(dict.fromkeys((platform, "cpu")))
            exported = export.export(jax.jit(grouped), platforms=platforms)(params, *args)
            programs.append(base64.b64encode(exported.serialize()).decode())
        except Exception as err:  # noqa: BLE001 - the candidate's code failed to trace with symbolic sizes
            text = str(err).strip().split("\n")[0][:300]
            hint = (" (it depends on the number of environments: write it for any number, e.g. with x.shape[0] "
                    "instead of a fixed size)" if "symbolic" in text.lower() or "inconclusive" in text.lower()
                    else "")
            raise CandidateError(file, f"cannot be compiled for any number of environments: {type(err).__name__}: "
                                       f"{text}{hint}", function=api) from None
        check_program(exported, file, api)  # what the training process will check: refused here already
        check_sizes(exported, file, api)
    return programs


_LOCATION = re.compile(r'\s*loc\((?:"[^"]*"|[^()"]|\([^()]*\))*\)')
"""A source location in MLIR text: `loc(#loc3)`, `loc(unknown)`, and a named one on a block's or a function's
argument, `loc("scatter:"(#loc40))` (its name may hold parentheses: `loc("jit(f)/asin"(#loc4))`)."""


def computation_text(module: str) -> str:
    """A program's module (MLIR text) without source locations and argument or result names: what it computes,
    the same for two files that differ only in names, comments, layout or their constants' values."""
    lines = [line for line in module.splitlines() if not line.startswith("#loc")]
    text = _LOCATION.sub("", "\n".join(lines))
    return re.sub(r'jax\.(?:arg|result)_info = "[^"]*",?\s*', "", text)


def check_sizes(exported: export.Exported, file: str, api: str) -> None:
    """Every output is `[g, e, ...]` (`[g, ...]` for a curriculum) with fixed sizes after those: an output whose
    size follows the number of environments or groups (an observation `[E, E // 17]`) is refused."""
    lead = 1 if api == "curriculum" else 2
    for aval in exported.out_avals:
        head, tail = tuple(aval.shape[:lead]), aval.shape[lead:]
        if tuple(str(d) for d in head) != ("g", "e")[:lead] or not all(isinstance(d, int) for d in tail):
            shape = ", ".join(str(d) for d in aval.shape)
            raise CandidateError(file, f"returns an array of shape ({shape}) for g groups of e environments: the "
                                       "sizes after the environment axis must not depend on how many environments "
                                       "run", function=api)


def check_program(exported: export.Exported, file: str, api: str, text: str | None = None) -> None:
    """Refuse a program that does more than pure computation: a custom call other than a size check, host
    callbacks, infeed/outfeed or send/recv, tokens or side effects. `text`: its module, where already at hand."""
    text = exported.mlir_module() if text is None else text
    for target in re.findall(r"stablehlo\.custom_call\s+@([\w.$-]+)", text):
        if target not in ALLOWED_CUSTOM_CALLS:
            raise CandidateError(file, f"its program calls {target!r}, an operation outside pure computation (a host "
                                       "callback or a library call): not allowed in shaping code", function=api)
    for op in FORBIDDEN_OPERATIONS:
        if op in text:
            raise CandidateError(file, f"its program uses {op}, which reaches outside the device: not allowed in "
                                       "shaping code", function=api)
    if exported.ordered_effects or exported.unordered_effects:
        raise CandidateError(file, "its program has side effects: not allowed in shaping code", function=api)


class Program:
    """A candidate's shaping function in the training process: the worker's exported programs, called with the
    constants `{name: [G_c]}` and the arguments of a class's groups `[G_c, E, ...]` (`envcoder.env.grouping`
    calls it instead of vmapping a Python function over the groups: `group_batched`)."""

    group_batched = True

    def __init__(self, programs: Sequence[str], file: str, api: str, cost: Mapping | None = None):
        """`cost`: what the worker measured of it per environment, and of the task's own function of its type
        (`envcoder.candidates.costs.program_costs`, measured by the verifier)."""
        self.file, self.api, self.text, self.cost = file, api, tuple(programs), cost
        self.exported, computation = [], hashlib.sha256()
        for blob in programs:
            exported = export.deserialize(bytearray(base64.b64decode(blob)))
            module = exported.mlir_module()
            check_program(exported, file, api, module)
            check_sizes(exported, file, api)
            self.exported.append(exported)
            computation.update(computation_text(module).encode() + b"\0")
        self.key = computation.hexdigest()[:16]
        """What the programs compute (their modules without source locations and names): a function key made from
        it (`envcoder.candidates.sandbox`) can belong to no other computation, whatever a worker's reply claims."""
        self.__name__ = api

    @property
    def param_names(self) -> set[str]:
        """The names of the constants it takes as data (its first argument's keys)."""
        names = set()
        for exported in self.exported:
            params = jax.tree_util.tree_unflatten(exported.in_tree, exported.in_avals)[0][0]
            names |= set(params) if isinstance(params, Mapping) else set()
        return names

    def __call__(self, params, *args):
        return self._zeros(params, *args) if self._inert else self._run(params, *args)

    def _run(self, params, *args):
        for exported in self.exported:
            skeleton = jax.tree_util.tree_unflatten(exported.in_tree, exported.in_avals)[0]
            fitted = _fit((params, *args), skeleton)
            if fitted is not _MISMATCH:
                return exported.call(*fitted)
        raise ValueError(f"{self.file}: {self.api}() was validated for other arguments than the learner passes "
                         "(an envcoder bug: please report it)")

    def left_out(self) -> "Program":
        """This program replaced by one that computes nothing: zeros of its outputs' shapes (no fields, for a reset
        or a physics sample), for a candidate left out of a run after it hung there (its groups keep their place
        in the run's arrays, so the checkpoint's state fits; they are not ranked)."""
        inert = object.__new__(Program)
        inert.__dict__.update(self.__dict__)
        inert._inert = True
        return inert

    _inert = False

    def _zeros(self, params, *args):
        if self.api in ("sample_initial_state", "sample_physics"):
            return {}
        shapes = jax.eval_shape(self._run, params, *args)
        return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def uses_loops(self) -> bool:
        """Whether any of its programs has a loop whose length is data (a `lax.while_loop`)."""
        return any("stablehlo.while" in e.mlir_module() for e in self.exported)


_MISMATCH = object()


def _own_actions(value, skeleton):
    """The state's `actions` as the candidate sees them: its own entries of a run's action padded to the largest
    candidate's (the padding is other candidates' business)."""
    width = skeleton.shape[-1] if hasattr(skeleton, "shape") else None
    if isinstance(width, int) and hasattr(value, "shape") and value.shape[-1] > width:
        return value[..., :width]
    return value


def _fit(value, skeleton):
    """`value` cut to the structure of `skeleton` (dict keys it lacks are left out: the run's other candidates'
    curriculum values, say), or `_MISMATCH`."""
    if isinstance(skeleton, dict):
        if not isinstance(value, Mapping) or not set(skeleton) <= set(value):
            return _MISMATCH
        out = {k: _fit(_own_actions(value[k], skeleton[k]) if k == "actions" else value[k], skeleton[k])
               for k in skeleton}
        return _MISMATCH if any(v is _MISMATCH for v in out.values()) else out
    if isinstance(skeleton, (tuple, list)):
        if not isinstance(value, (tuple, list)) or len(value) != len(skeleton):
            return _MISMATCH
        out = [_fit(v, s) for v, s in zip(value, skeleton)]
        return _MISMATCH if any(v is _MISMATCH for v in out) else type(skeleton)(out)
    if skeleton is None:
        return None if value is None else _MISMATCH
    return _MISMATCH if value is None or isinstance(value, (Mapping, tuple, list)) else value


def check_against(candidate, task=None) -> None:
    """The sizes of a validated candidate's programs are those validation found (`candidate.obs_dim`, ...), and with
    `task` every output of every program has the dtype, rank and trailing shape its shaping type declares
    (`check_signature`): a hand-over that disagrees with itself or with the learner is refused here rather than
    failing inside the training program."""
    for api, kind in SHAPING_TYPES.items():
        if kind.size is None:
            continue
        size, program = getattr(candidate, kind.size), candidate.functions.get(api)
        widths = {e.out_avals[0].shape[-1] for e in program.exported} if program is not None else set()
        if widths - {size}:
            raise CandidateError(str(candidate.path), f"its program returns {sorted(widths)} features, validation "
                                                      f"found {size}", function=api)
    if task is not None:
        for api, program in candidate.functions.items():
            for exported in getattr(program, "exported", ()):
                check_signature(exported, api, candidate, task, str(candidate.path))


def check_signature(exported: export.Exported, api: str, sizes, task, file: str,
                    state_shapes: Mapping[str, tuple] | None = None) -> None:
    """Every output of `exported` (the program of `api`, batched `[g, e, ...]`) as the learner takes it, exactly:
    float32 where a float is declared (a complex or float64 reward would end the run inside the training program),
    bool for a termination, the declared rank and trailing shape, reward components named as validation found
    (`sizes`: the validated candidate). `state_shapes`: each state field's shape after the environment axis (default
    the task's sample states')."""
    import numpy as np

    out = jax.tree_util.tree_unflatten(exported.out_tree, exported.out_avals)
    f32 = np.dtype(np.float32)

    def refuse(what: str):
        raise CandidateError(file, f"its program {what}: the learner takes what the shaping type declares "
                                   "(`envcoder tasks` shows it)", function=api)
    expect = functools.partial(_expect, refuse=refuse)
    fields = functools.partial(_fields, refuse=refuse)

    if api == "compute_reward":
        reward, components = out if isinstance(out, tuple) and len(out) == 2 else (out, {})
        expect(reward, "as the reward", (f32,), ())
        components = fields(components, "as the reward's components")
        if tuple(sorted(components)) != tuple(sizes.reward_components):
            refuse(f"names the reward components {sorted(components)}, validation found "
                   f"{list(sizes.reward_components)}")
        for name, value in components.items():
            expect(value, f"for the reward component {name!r}", (f32,), ())
    elif SHAPING_TYPES[api].size is not None:  # an observation: its width validated (a critic's, else the actor's)
        kind = SHAPING_TYPES[api]
        width = getattr(sizes, kind.size) or getattr(sizes, SHAPING_TYPES[kind.fallback].size if kind.fallback else
                                                     kind.size)
        expect(out, "as the observation", (f32,), (width,))
    elif api == "compute_torque":
        expect(out, "as the motor command", (f32,), (_actuators(task),))
    elif api == "compute_terminal":
        expect(out, "as the termination", (np.dtype(bool),), ())
    elif api == "sample_goal":
        expect(out, "as the goal", (f32,), (task.num_commands,))
    elif api == "sample_initial_state":
        shapes = state_shapes if state_shapes is not None else _state_shapes(task)
        for name, value in fields(out, "as the reset").items():
            if shapes is not None and name not in shapes:
                refuse(f"returns {name!r}, which is not a state field")
            expect(value, f"for the state field {name!r}", (f32,), None if shapes is None else shapes[name])
    elif api == "sample_physics":
        from envcoder.sim.randomization import FIELDS

        for name, value in fields(out, "as the physics").items():
            if name not in FIELDS:
                refuse(f"returns {name!r}, which is not a physics field")
            expect(value, f"for the physics field {name!r}", (f32, np.dtype(np.int32)), None)
    elif api == "curriculum":
        for name, value in fields(out, "as the curriculum").items():
            expect(value, f"for the curriculum value {name!r}", (f32,), None, head=("g",))
            if len(value.shape) > 2:
                refuse(f"returns a curriculum value {name!r} of rank {len(value.shape) - 1}: use a scalar or a 1-D "
                       "array")


def _expect(value, where: str, dtypes, tail: tuple | None, head=("g", "e"), refuse=None) -> None:
    """`value` (an output's aval) has one of `dtypes`, leading sizes `head` and trailing shape `tail` (None: any)."""
    import numpy as np

    shape = getattr(value, "shape", None)
    if shape is None:
        refuse(f"returns {type(value).__name__} {where}, not an array")
    dims = tuple(str(d) if not isinstance(d, int) else d for d in shape)
    if np.dtype(value.dtype) not in dtypes:
        refuse(f"returns dtype {value.dtype} {where}, expected {' or '.join(str(d) for d in dtypes)}")
    if dims[:len(head)] != head or (tail is not None and dims[len(head):] != tail):
        expected = ", ".join(map(str, head + (tail if tail is not None else ("...",))))
        refuse(f"returns shape ({', '.join(map(str, dims))}) {where}, expected ({expected})")


def _fields(value, where: str, refuse=None) -> dict:
    """`value` is a dict of outputs named by identifiers."""
    if not isinstance(value, dict):
        refuse(f"returns {type(value).__name__} {where}, expected a dict of named arrays")
    for name in value:
        if not (isinstance(name, str) and name.isidentifier()):
            refuse(f"names {name!r} {where}: names are identifiers (such as 'upright')")
    return value


def _actuators(task) -> int:
    """The task model's number of actuators (a motor command's width)."""
    return _actuators_of(str(task.model_file))


@functools.cache
def _actuators_of(model_file: str) -> int:
    import mujoco

    return int(mujoco.MjModel.from_xml_path(model_file).nu)


def _state_shapes(task) -> dict[str, tuple] | None:
    """Each state field's shape after the environment axis, from the task's sample states (None where there are
    none yet: a reset is then checked for its dtype and leading sizes only)."""
    from envcoder.candidates.samples import task_states

    states = task_states(task, make=False)
    return None if states is None else {name: tuple(int(d) for d in x.shape[1:]) for name, x in states.items()
                                        if hasattr(x, "shape")}


def handed_over(path: str, reply: Mapping) -> dict[str, Program]:
    """A file's functions as the training process uses them: the worker's programs in its `reply` (each checked),
    which all the file's validated variants share."""
    return {api: Program(blobs, path, api, reply.get("costs", {}).get(api)) for api, blobs in reply["programs"].items()}
