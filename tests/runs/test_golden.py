"""A small Anymal run gives, bit for bit, the results recorded on this kind of CPU (tests/golden/anymal_small/, one
file per kind; on a kind with no recording, every candidate's fitness within 1e-3 of a recording's: tests/goldens.py).
The first was recorded before the redesign of the trainer into environment, learners and driver (the README's
Cartpole run is checked the same way in test_readme_run); the file was written again when
the ranking gained learning speed (AUC), its declared range and its separation, with every group's number unchanged;
and again when the candidates' float constants became inputs of the traced programs: 4 of the 10 candidates' numbers
then moved in their 6th or 7th digit (XLA folds a literal constant, e.g. a division by it, otherwise than an input),
within test_equivalence's tolerance, and one environment of soft_pd's evaluation ended a step later (episode length
76.69 -> 76.75); and again when the training process began to run the candidates as the sandbox's exported programs
(issue #40): every candidate's numbers moved, task fitness by 1e-7 typically and by 4e-5 at most, episode lengths by
up to 1e-3 where an evaluation episode ended a step earlier or later (XLA compiles a program called through its
export boundary otherwise than code traced inline), and the ranking stayed the same. The README's Cartpole run stayed
bit for bit. Written again when a literal's sign became part of its constant (`* -0.000025` one input, not a negated
one): the two candidates with such a literal moved (reference's task fitness by 1e-7; strict_termination's by 3e-5,
one of its evaluation episodes ending earlier, episode length 333.94 -> 333.75), the ranking stayed the same. The
groups' order in the file follows the code's classes and is not compared. The second file was recorded on the CI
machines with AVX-512 FP16 and AMX (2026-11-26), the same code: fitnesses moved by up to 7e-5, one evaluation
episode length by 9 steps (reference), the ranking stayed the same. Written again for this kind of CPU when the
training process began to key each program by what it computes rather than by the file's code (2026-12-06): two
files' functions that compute the same now share one class of groups; reference's task fitness moved by 7e-5 (one
evaluation episode ended earlier: episode length 498.31 -> 489.06), strict_termination's by 1e-7, the ranking stayed
the same. The other kinds' recordings predate it: on those kinds, record again (tests/goldens.py). Another machine
of the same flags gives other bits (`…-second-machine.json`, recorded 2026-12-07; the code before the verifier gave the
same there), and either recording passes. Slow: run with
`-m slow`; it runs `envcoder` in a process of its own, as a user does (`goldens.run_as_a_user`)."""

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
