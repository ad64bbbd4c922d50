"""The benchmarks' own loader of trusted candidate files (the bundled ones), in this process and without the sandbox:
what `envcoder` itself never does (every file it trains goes through `envcoder.candidates.prepare`'s jailed workers).
"""

from __future__ import annotations

from envcoder.candidates.load import load_candidates
from envcoder.candidates.variants import cross_candidates, expand_sweeps


def build_candidates(settings):
    """`(candidates, load failures)`: the files of `settings.functions` (an `EvalSettings`), sweeps expanded, crossed
    if `settings.cross`, loaded here without the sandbox."""
    candidates, failures = load_candidates(settings.functions, settings.shaper_types)
    candidates = expand_sweeps(candidates)
    if settings.cross:
        candidates = cross_candidates(candidates, settings.shaper_types)
    return candidates, failures
