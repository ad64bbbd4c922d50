"""One home for candidates: a file is vetted (`files`), then, in a jailed worker process only (`sandbox`, the parent's
side; `worker`, the worker's; `jail`), checked statically against the security policy (`policy`), loaded (`load`),
validated on a sample state (`validate`) and handed over as programs (`programs`), and expanded into its variants
(`variants`: sweeps and crossing) before a trainer sees it.

    from envcoder.candidates import Candidate, CandidateError, load_candidate, expand_sweeps
"""

from envcoder.candidates.files import LoadFailure, candidate_files, check_name, read_source
from envcoder.candidates.load import (TASK_DEFAULT, Candidate, api_callable, call_with_params, check_statically,
                                      defines, function_key, load_candidate, load_candidates, resolve_functions,
                                      source_api, task_default_candidate)
from envcoder.candidates.policy import ALLOWED_IMPORTS, LOAD_TIME_LIMIT_S, candidate_namespace, time_limit
from envcoder.candidates.variants import cross_candidates, expand_sweeps
from envcoder.shaping.api import SHAPER_TYPES, CandidateError

__all__ = ["ALLOWED_IMPORTS", "LOAD_TIME_LIMIT_S", "SHAPER_TYPES", "TASK_DEFAULT", "Candidate", "CandidateError",
           "LoadFailure",
           "api_callable", "call_with_params", "candidate_files", "candidate_namespace", "check_name",
           "check_statically", "cross_candidates", "defines", "expand_sweeps", "function_key", "load_candidate",
           "load_candidates", "read_source", "resolve_functions", "source_api", "task_default_candidate", "time_limit"]
