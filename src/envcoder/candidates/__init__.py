"""One home for candidates: a file is vetted (`files`), then, in a jailed worker process only (`sandbox`, the parent's
side; `worker`, the worker's; `jail`), checked statically against the security policy (`policy`), loaded (`load`),
validated on a sample state (`validate`) and handed over as programs (`programs`), and expanded into its variants
(`variants`: sweeps and crossing) before a learner sees it.

    from envcoder.candidates import Candidate, CandidateError, load_candidate, expand_sweeps

The names below are imported when first used: importing one submodule (the sandbox, to start its workers before the
command's own imports) does not import MuJoCo and the rest.
"""

import importlib

_HOMES = {
    "files": ("LoadFailure", "candidate_files", "check_name", "read_source"),
    "load": ("TASK_DEFAULT", "Candidate", "api_callable", "call_with_params", "check_statically", "defines",
             "function_key", "load_candidate", "load_candidates", "resolve_functions", "source_api",
             "task_default_candidate"),
    "policy": ("ALLOWED_IMPORTS", "LOAD_TIME_LIMIT_S", "candidate_namespace", "time_limit"),
    "variants": ("cross_candidates", "expand_sweeps"),
}
_WHERE = {name: f"envcoder.candidates.{module}" for module, names in _HOMES.items() for name in names}
_WHERE.update(SHAPER_TYPES="envcoder.shaping.api", CandidateError="envcoder.shaping.api")

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'envcoder.candidates' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))
