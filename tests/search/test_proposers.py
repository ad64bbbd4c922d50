"""Proposers against a fake server (the real openai/anthropic SDKs, no network), code extraction, the offline
mutation search and the cost estimate. No JAX work here: these run in seconds."""

import textwrap

import pytest

from envcoder.search.prompts import extract_code
from envcoder.search.proposers import (AnthropicProposer, OfflineProposer, OpenAIProposer, Parent, ProposerError,
                                       Request, estimate_cost, float_literals, make_proposer)
from fake_llm import USAGE, FakeLLMServer

CODE = "def compute_reward(state):\n    return state['dof_pos'][:, 1]\n"
ANSWER = f"Here is a reward that pays for the pole angle.\n\n```python\n{CODE}```\nIt should work."
REQUEST = Request(system="rules", messages=({"role": "user", "content": "write a reward"},), iteration=0, slot=0,
                  attempt=0)


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-openai-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-anthropic-key")


def openai_at(server, **kw):
    return OpenAIProposer("gpt-4o", base_url=f"{server.url}/v1", **{"timeout_s": 1.0, "max_retries": 2, **kw})


def anthropic_at(server, **kw):
    return AnthropicProposer("claude-sonnet-5", base_url=server.url, **{"timeout_s": 1.0, "max_retries": 2, **kw})


def test_openai_wire_format_with_rate_limit_and_server_error_retried_by_the_sdk():
    with FakeLLMServer([("status", 429), ("status", 500), ("text", ANSWER)]) as server:
        sample = openai_at(server).sample(REQUEST)
    assert sample.error is None and sample.text == ANSWER and (sample.input_tokens, sample.output_tokens) == USAGE
    assert [r["step"] for r in server.requests] == ["status", "status", "text"]
    request = server.requests[-1]
    assert request["path"] == "/v1/chat/completions" and request["body"]["model"] == "gpt-4o"
    assert request["body"]["messages"] == [{"role": "system", "content": "rules"},
                                           {"role": "user", "content": "write a reward"}]
    assert request["headers"]["authorization"] == "Bearer test-openai-key"


def test_anthropic_wire_format_with_rate_limit_and_a_stall_past_the_timeout():
    with FakeLLMServer([("status", 429), ("stall", 2.5), ("text", ANSWER)]) as server:
        sample = anthropic_at(server).sample(REQUEST)
    assert sample.error is None and sample.text == ANSWER and (sample.input_tokens, sample.output_tokens) == USAGE
    request = server.requests[-1]
    assert request["path"] == "/v1/messages" and len(server.requests) == 3
    assert request["body"]["system"] == "rules" and request["body"]["max_tokens"] == 4096
    assert request["body"]["messages"] == [{"role": "user", "content": "write a reward"}]
    headers = request["headers"]  # the SDK's choice of header has changed across versions
    assert headers.get("x-api-key") == "test-anthropic-key" or headers["authorization"] == "Bearer test-anthropic-key"


@pytest.mark.parametrize("make", [openai_at, anthropic_at])
def test_malformed_response_and_exhausted_retries_are_failed_samples(make):
    with FakeLLMServer([("raw", {"oops": 1}), ("status", 500), ("status", 503), ("status", 500)]) as server:
        proposer = make(server)
        malformed = proposer.sample(REQUEST)
        failed = proposer.sample(REQUEST)
    assert malformed.error.startswith("malformed response") and malformed.text == ""
    assert "500" in failed.error and len(server.requests) == 4  # one try + max_retries=2


@pytest.mark.parametrize("make", [openai_at, anthropic_at])
def test_a_server_that_answers_no_json_endlessly_or_too_much_gives_failed_samples(make):
    """A hostile or broken server ends nothing: a body that is not JSON ended `auto` (exit 2), a body dripped one
    byte at a time kept every read within the timeout and hung it, a huge answer is not taken."""
    import time

    huge = ("text", "x" * 300_000)
    with FakeLLMServer([("bytes", b'{"choices": [not json'), ("drip", 0.3), huge]) as server:
        proposer = make(server, max_retries=0)
        not_json = proposer.sample(REQUEST)
        start = time.monotonic()
        dripped = proposer.sample(REQUEST)
        took = time.monotonic() - start
        too_long = proposer.sample(REQUEST)
    assert not_json.text == "" and not_json.error and "\n" not in not_json.error
    assert dripped.text == "" and "no complete answer within 1 s" in dripped.error and took < 3
    assert too_long.text == "" and "characters, more than the 200,000 taken" in too_long.error


@pytest.mark.parametrize("make", [openai_at, anthropic_at])
def test_refused_credentials_stop_the_run(make):
    with FakeLLMServer([("status", 401)]) as server:
        with pytest.raises(ProposerError, match="AuthenticationError"):
            make(server).sample(REQUEST)


def test_missing_key_and_unknown_provider_name_what_to_do(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ProposerError, match="set the environment variable OPENAI_API_KEY"):
        make_proposer("gpt-4o")
    with pytest.raises(ProposerError, match="set the environment variable ANTHROPIC_API_KEY"):
        make_proposer("claude-sonnet-5")
    with pytest.raises(ProposerError, match="pass --provider openai|anthropic"):
        make_proposer("llama3")
    # A local OpenAI-compatible server needs no key, and any model name goes.
    assert isinstance(make_proposer("llama3", base_url="http://127.0.0.1:9/v1"), OpenAIProposer)
    assert isinstance(make_proposer(None), OfflineProposer)


def test_extract_code_from_prose_blocks_and_bare_code():
    assert extract_code(ANSWER, ["compute_reward"]) == CODE
    helper = "```python\nimport jax.numpy as jnp\nSCALE = 2.0\n```\nand the reward:\n```py\n" + CODE + "```"
    assert extract_code(helper, ["compute_reward"]) == CODE  # the block that defines the function
    two = f"```python\n{CODE}```\n```python\ndef compute_observation(state):\n    return state['dof_pos']\n```"
    joined = extract_code(two, ["compute_reward", "compute_observation"])
    assert "def compute_reward" in joined and "def compute_observation" in joined
    assert extract_code(CODE, ["compute_reward"]) == CODE
    assert extract_code("Sure! Here it is:\nimport jax\n" + CODE, ["compute_reward"]).startswith("import jax\n")
    with pytest.raises(ValueError, match="no Python code"):
        extract_code("I cannot help with that.", ["compute_reward"])


PARENT = textwrap.dedent("""\
    ALIVE = 0.5  # bonus
    def compute_reward(state):
        x = state["dof_pos"][:, 1] ** 2
        return ALIVE - 2e-1 * x + 0.0 * state["dof_vel"][:, 0]
    """)


def test_offline_proposer_mutates_float_constants_only_and_is_reproducible():
    assert [v for *_, v in float_literals(PARENT)] == [0.5, 0.2, 0.0]
    assert [v for *_, v in float_literals("def r(s):\n    return 0.5 * (s > 0.8) - 1e-2 * (s < 0.1 * 3.0)\n")] == [
        0.5, 1e-2]  # a comparison's numbers are thresholds, which the search leaves alone
    assert [v for *_, v in float_literals("def r(s):\n    return 1.5 * (s['ω'] > 0.25) + 0.5\n")] == [1.5, 0.5]
    request = Request("", (), iteration=1, slot=2, attempt=0, population=(Parent("p", PARENT, 0.3),))
    child = OfflineProposer(seed=7).sample(request).text
    assert child == OfflineProposer(seed=7).sample(request).text  # resumable: same draw for the same slot
    header, body = child.split("\n", 1)
    assert header.startswith("# offline: from p;")
    old, new = [v for *_, v in float_literals(PARENT)], [v for *_, v in float_literals(body)]
    assert len(new) == 3 and new != old
    assert all((a > 0) == (b > 0) and (a == 0) == (b == 0) for a, b in zip(old, new))  # sign kept, zero stays
    assert body.replace(" ", "").count('[:,1]**2') == 1 and "# bonus" in body  # ints and comments untouched


def test_offline_proposer_picks_parents_among_the_best():
    population = tuple(Parent(f"p{i}", PARENT, fitness) for i, fitness in enumerate([0.1, 0.9, 0.5, 0.8, None]))
    proposer = OfflineProposer(parents=2)
    parents = {proposer.sample(Request("", (), 1, slot, 0, population)).text.split(";")[0] for slot in range(20)}
    assert parents == {"# offline: from p1", "# offline: from p3"}
    lower = {proposer.sample(Request("", (), 1, slot, 0, population, higher_is_better=False)).text.split(";")[0]
             for slot in range(20)}
    assert lower == {"# offline: from p0", "# offline: from p2"}


def test_cost_estimate_uses_the_longest_matching_list_price():
    assert estimate_cost("gpt-4o-2024-08-06", 1_000_000, 1_000_000) == pytest.approx(12.5)
    assert estimate_cost("gpt-4o-mini", 1_000_000, 0) == pytest.approx(0.15)
    assert estimate_cost("my-local-model", 10, 10) is None
    assert estimate_cost("my-local-model", 1_000_000, 2_000_000, price=(1.0, 2.0)) == pytest.approx(5.0)

