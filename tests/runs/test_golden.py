"""A small Anymal run gives, bit for bit, the results recorded on this kind of CPU (tests/golden/anymal_small/, one
file per kind; on a kind with no recording, every candidate's fitness within 1e-3 of a recording's: tests/goldens.py).
The groups' order in the file follows the code's classes and is not compared. Each time a recording was written again,
and why, is in CHANGELOG.md ("Golden recordings"). Slow: run with `-m slow`; it runs `envcoder` in a process of its
own, as a user does (`goldens.run_as_a_user`)."""

import json

import pytest

from goldens import assert_a_recording_equals, run_as_a_user, same_fitness


@pytest.mark.slow
def test_a_small_anymal_run_gives_the_recorded_results_bit_for_bit(tmp_path):
    out = tmp_path / "anymal"
    assert run_as_a_user(["eval", "--task", "Anymal", "--iterations", "2", "--envs-per-candidate", "16", "--no-tensorboard",
                 "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    assert_a_recording_equals(results, "anymal_small", same_fitness(1e-3))
