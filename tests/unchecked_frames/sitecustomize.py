"""Imported first by a Python process whose path holds this folder: the tests put it on the sandbox workers' path
(`conftest.frames_unchecked`) so that a candidate file may name frame attributes, as an attacker who found another way
to the real builtins would. What the operating system's jail and the verifier hold is then tested behind the static
check (`envcoder.candidates.policy.FRAME_ATTRIBUTES`), which refuses such files first."""

from envcoder.candidates import policy

policy.FRAME_ATTRIBUTES.clear()
