"""Proposers: what writes candidates. One small interface, `sample(request) -> Sample`.

- `OpenAIProposer`: OpenAI models through the official `openai` SDK, and any OpenAI-compatible server (vLLM,
  Ollama, ...) through `base_url`.
- `AnthropicProposer`: Anthropic models through the official `anthropic` SDK.
- `OfflineProposer`: no network; changes the best candidates so far by structural moves (terms re-weighted,
  dropped, added, crossed; kernels widened or narrowed) and by jittering their numeric constants.

Retries with backoff on rate limits, server errors and timeouts are the SDKs' own (`max_retries`,
`timeout`); a call that still fails, or a malformed, truncated, endless or huge response, comes back as a `Sample`
with `error` set: a failed sample, never a crash or a hang (`_within`: a call's whole duration is bounded, whatever
the server streams). Errors that no retry can fix (a bad key, an unknown model) raise `ProposerError`.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import math
import os
import random
import threading
import tokenize
from typing import Mapping, Protocol, Sequence

from envcoder.search.moves import fitness_term_source, structural_child
from envcoder.search.state_terms import state_terms
from envcoder.tasks.base import StateField
from envcoder.text import column, parse as parse_source

PROVIDERS = ("openai", "anthropic")
KEY_VARIABLES = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}

PRICES_PER_MTOK = {
    # USD per million (input, output) tokens, list prices as known to this release; a prefix matches the
    # dated versions of a model. Unknown models get no cost estimate (pass --price to set one).
    "gpt-4o-mini": (0.15, 0.60), "gpt-4o": (2.50, 10.00), "gpt-4-turbo": (10.00, 30.00),
    "gpt-4.1-nano": (0.10, 0.40), "gpt-4.1-mini": (0.40, 1.60), "gpt-4.1": (2.00, 8.00),
    "o3-mini": (1.10, 4.40), "o4-mini": (1.10, 4.40), "o3": (2.00, 8.00), "o1": (15.00, 60.00),
    "claude-3-5-haiku": (0.80, 4.00), "claude-3-5-sonnet": (3.00, 15.00), "claude-3-7-sonnet": (3.00, 15.00),
    "claude-sonnet-4": (3.00, 15.00), "claude-opus-4": (15.00, 75.00), "claude-haiku-4": (1.00, 5.00),
}


class ProposerError(RuntimeError):
    """A proposer that cannot work at all (missing key, unknown model, refused credentials)."""


@dataclasses.dataclass(frozen=True)
class Parent:
    """An evaluated candidate the offline proposer may mutate."""

    name: str
    source: str
    fitness: float | None
    """Its task fitness (None: not evaluated yet, e.g. a starting file)."""


@dataclasses.dataclass(frozen=True)
class Request:
    """One sample to draw: a conversation for an LLM, the population for the offline search."""

    system: str
    messages: tuple[dict, ...]
    """`{"role": "user" | "assistant", "content": str}` turns, the last one the user's."""
    iteration: int
    slot: int
    attempt: int
    population: tuple[Parent, ...] = ()
    higher_is_better: bool = True


@dataclasses.dataclass(frozen=True)
class Sample:
    """A proposer's answer."""

    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None
    """Set when the call failed after the SDK's retries or the response was malformed."""


class Proposer(Protocol):
    name: str

    def sample(self, request: Request) -> Sample: ...


def estimate_cost(model: str, input_tokens: int, output_tokens: int,
                  price: tuple[float, float] | None = None) -> float | None:
    """USD for the tokens, from `price` (per million input, output tokens) or the list prices above."""
    if price is None:
        matches = [p for p in PRICES_PER_MTOK if model.startswith(p)]
        if not matches:
            return None
        price = PRICES_PER_MTOK[max(matches, key=len)]
    return (input_tokens * price[0] + output_tokens * price[1]) / 1e6


def provider_for(model: str, provider: str | None = None, base_url: str | None = None) -> str:
    """The provider named, or the one the model name implies (an OpenAI-compatible server with `base_url`)."""
    if provider is not None:
        if provider not in PROVIDERS:
            raise ProposerError(f"unknown provider {provider!r}; choose from {', '.join(PROVIDERS)}")
        return provider
    if model.startswith("claude"):
        return "anthropic"
    if model.startswith(("gpt", "o1", "o3", "o4", "chatgpt")) or base_url is not None:
        return "openai"
    raise ProposerError(f"cannot tell the provider of model {model!r}; pass --provider openai|anthropic "
                        "(or --base-url for an OpenAI-compatible server)")


def _api_key(provider: str, base_url: str | None) -> str:
    variable = KEY_VARIABLES[provider]
    key = os.environ.get(variable)
    if key:
        return key
    if base_url is not None:
        return "not-needed"  # local OpenAI-compatible servers (vLLM, Ollama) accept any key
    raise ProposerError(f"no API key for {provider}: set the environment variable {variable} "
                        f"(or run without --llm to use the offline proposer)")


MAX_REPLY_CHARACTERS = 200_000
"""The longest answer taken (a candidate file may be at most 256 KiB; an answer is one file and some words)."""
BACKOFF_ALLOWANCE_S = 10.0
"""What a call may take beyond its requests' own time limits: the SDKs' waits between retries."""


def _within(seconds: float, call):
    """`call()` in a thread of its own, its result or what it raised; `TimeoutError` past `seconds` (a server that
    streams a byte every two seconds kept every read under the SDK's timeout and `auto` waiting for ever before).
    The thread is left to end with its connection; it holds nothing of the search."""
    outcome: list = []

    def run():
        try:
            outcome.append((True, call()))
        except BaseException as err:  # noqa: BLE001 - handed to the caller
            outcome.append((False, err))
    thread = threading.Thread(target=run, daemon=True, name="envcoder-request")
    thread.start()
    thread.join(seconds)
    if not outcome:
        raise TimeoutError(f"no complete answer within {seconds:g} s (--request-timeout, times the tries)")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _failed(err: BaseException) -> Sample:
    """A failed sample for what a call raised that no retry of ours fixes: its type and first line, cut short."""
    from envcoder.text import one_line

    return Sample("", error=one_line(f"{type(err).__name__}: {err}", 500))


def _taken(text, tokens: tuple[int, int]) -> Sample:
    """The answer's text as a sample, or a failed one where it has none or is too long."""
    if not isinstance(text, str) or not text:
        return Sample("", *tokens, error="malformed response: no text content")
    if len(text) > MAX_REPLY_CHARACTERS:
        return Sample("", *tokens, error=f"an answer of {len(text):,} characters, more than the "
                                         f"{MAX_REPLY_CHARACTERS:,} taken")
    return Sample(text, *tokens)


class OpenAIProposer:
    """Chat completions through the official `openai` SDK (also any OpenAI-compatible `base_url`)."""

    def __init__(self, model: str, base_url: str | None = None, timeout_s: float = 120.0, max_retries: int = 4,
                 temperature: float | None = None, max_tokens: int = 4096):
        import openai

        self.name, self.base_url, self.temperature, self.max_tokens = model, base_url, temperature, max_tokens
        self.deadline_s = timeout_s * (max_retries + 1) + BACKOFF_ALLOWANCE_S * max_retries
        self._openai = openai
        self._client = openai.OpenAI(api_key=_api_key("openai", base_url), base_url=base_url, timeout=timeout_s,
                                     max_retries=max_retries)

    def sample(self, request: Request) -> Sample:
        extra = {} if self.temperature is None else {"temperature": self.temperature}
        # OpenAI's newer models take max_completion_tokens; compatible servers know max_tokens.
        extra["max_tokens" if self.base_url else "max_completion_tokens"] = self.max_tokens
        messages = [{"role": "system", "content": request.system}, *request.messages]
        try:
            response = _within(self.deadline_s, lambda: self._client.chat.completions.create(
                model=self.name, messages=messages, **extra))
        except (self._openai.AuthenticationError, self._openai.PermissionDeniedError,
                self._openai.NotFoundError) as err:
            raise ProposerError(f"{self.name}: {type(err).__name__}: {err}") from None
        except Exception as err:  # noqa: BLE001 - the server's fault (an error, no JSON, too slow): a failed sample
            return _failed(err)
        try:
            text = response.choices[0].message.content
            usage = response.usage
            tokens = (int(usage.prompt_tokens), int(usage.completion_tokens)) if usage else (0, 0)
        except (AttributeError, IndexError, TypeError, ValueError) as err:
            return Sample("", error=f"malformed response: {type(err).__name__}: {err}")
        return _taken(text, tokens)


class AnthropicProposer:
    """Messages through the official `anthropic` SDK."""

    def __init__(self, model: str, base_url: str | None = None, timeout_s: float = 120.0, max_retries: int = 4,
                 temperature: float | None = None, max_tokens: int = 4096):
        import anthropic

        self.name, self.temperature, self.max_tokens = model, temperature, max_tokens
        self.deadline_s = timeout_s * (max_retries + 1) + BACKOFF_ALLOWANCE_S * max_retries
        self._anthropic = anthropic
        self._client = anthropic.Anthropic(api_key=_api_key("anthropic", None), base_url=base_url,
                                           timeout=timeout_s, max_retries=max_retries)

    def sample(self, request: Request) -> Sample:
        extra = {} if self.temperature is None else {"extra_body": {"temperature": self.temperature}}
        try:
            response = _within(self.deadline_s, lambda: self._client.messages.create(
                model=self.name, system=request.system, messages=list(request.messages), max_tokens=self.max_tokens,
                **extra))
        except (self._anthropic.AuthenticationError, self._anthropic.PermissionDeniedError,
                self._anthropic.NotFoundError) as err:
            raise ProposerError(f"{self.name}: {type(err).__name__}: {err}") from None
        except Exception as err:  # noqa: BLE001 - the server's fault (an error, no JSON, too slow): a failed sample
            return _failed(err)
        try:
            text = "".join(block.text for block in response.content if getattr(block, "type", None) == "text")
            tokens = (int(response.usage.input_tokens), int(response.usage.output_tokens))
        except (AttributeError, TypeError, ValueError) as err:
            return Sample("", error=f"malformed response: {type(err).__name__}: {err}")
        return _taken(text, tokens)


def float_literals(source: str) -> list[tuple[tuple[int, int], tuple[int, int], float]]:
    """`(start, end, value)` of every float literal in `source` (`1.5`, `2e-3`; not ints, which are
    mostly indices, axes and powers; not those in a comparison, which are thresholds: the constants a population
    tunes are the same, `envcoder.candidates.constants`), with `tokenize`'s (row, column) positions."""
    try:
        thresholds = {_position(source, n) for c in ast.walk(parse_source(source)) if isinstance(c, ast.Compare)
                      for n in ast.walk(c) if isinstance(n, ast.Constant)}
    except SyntaxError:
        thresholds = set()
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        text = token.string.lower()
        if token.type == tokenize.NUMBER and not text.endswith("j") and ("." in text or "e" in text) \
                and not text.startswith("0x") and token.start not in thresholds:
            found.append((token.start, token.end, float(text.replace("_", ""))))
    return found


def _position(source: str, node: ast.AST) -> tuple[int, int]:
    """A node's start as `tokenize` gives it: (row, column in characters)."""
    return node.lineno, column(source.splitlines()[node.lineno - 1], node.col_offset)


def _format_float(value: float) -> str:
    text = format(value, ".4g")
    return text if any(c in text for c in ".e") else text + ".0"


def _range_pairs(source: str, literals) -> dict[int, tuple[int, int]]:
    """For the float literals (indices into `literals`) that form a `"range": [lo, hi]` of a module-level
    `CURRICULUM` table, each one's pair of indices."""
    try:
        tree = parse_source(source)
    except SyntaxError:
        return {}
    where = {start: i for i, (start, _, _) in enumerate(literals)}
    pairs = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "CURRICULUM"
                                                     for t in node.targets) and isinstance(node.value, ast.Dict)):
            continue
        for entry in node.value.values:
            if not isinstance(entry, ast.Dict):
                continue
            for key, value in zip(entry.keys, entry.values):
                if isinstance(key, ast.Constant) and key.value == "range" and isinstance(value, (ast.List, ast.Tuple)) \
                        and len(value.elts) == 2:
                    ends = tuple(where.get(_position(source, e)) for e in value.elts)
                    if None not in ends:
                        pairs.update({ends[0]: ends, ends[1]: ends})
    return pairs


class OfflineProposer:
    """An evolutionary search over candidates' terms and constants; needs no network.

    A child is a parent, chosen uniformly among the `parents` best evaluated candidates (or among the
    starting files before anything is evaluated), changed by one structural move with probability `structural`
    (or always, where the parent has no float constant): a term re-weighted by orders of magnitude, dropped, taken
    from another candidate or the task's fitness (`fitness`: its step's source and direction), one that the task's
    state offers added (`library`: `envcoder.search.state_terms.state_terms`), a kernel's width scaled, or two parents'
    terms crossed (`envcoder.search.moves`). Otherwise each of its float literals (not a comparison's) is
    multiplied, with probability `rate` (at least one), by `exp(N(0, scale))`: the sign is kept and zeros are left
    alone. The child's first line says what changed. Draws are seeded by (seed, iteration, slot, attempt), so a
    resumed run proposes the same children.

    With `jail` (`SandboxValidator.jailed`), a child is written in the sandbox: the parents are candidate text, which
    the process that trains never parses (`envcoder auto` passes its validator's); without, here.
    """

    name = "offline"

    def __init__(self, seed: int = 0, parents: int = 3, rate: float = 0.5, scale: float = 0.7,
                 structural: float = 0.5, fitness: tuple[str, bool] | None = None, jail=None,
                 library: Sequence = ()):
        self.seed, self.parents, self.rate, self.scale = seed, parents, rate, scale
        self.structural, self.fitness, self.jail, self.library = structural, fitness, jail, [list(t) for t in library]

    def sample(self, request: Request) -> Sample:
        if self.jail is None:
            return self.propose(request)
        from envcoder.candidates.sandbox import JailedError

        settings = {"seed": self.seed, "parents": self.parents, "rate": self.rate, "scale": self.scale,
                    "structural": self.structural, "fitness": self.fitness, "library": self.library}
        request = {**dataclasses.asdict(request), "system": "", "messages": ()}  # what a child is made of
        try:
            return Sample(**self.jail(offline_sample, settings=settings, request=request))
        except JailedError as err:
            return Sample("", error=f"writing a child in the sandbox failed: {err}")

    def propose(self, request: Request) -> Sample:
        """A child of the request's population (see the class), written in this process."""
        rng = random.Random(f"{self.seed}:{request.iteration}:{request.slot}:{request.attempt}")
        evaluated = [p for p in request.population if p.fitness is not None and math.isfinite(p.fitness)]
        if evaluated:
            evaluated.sort(key=lambda p: p.fitness, reverse=request.higher_is_better)
            pool = evaluated[:self.parents]
        else:
            pool = list(request.population)
        if not pool:
            return Sample("", error="the offline proposer has no candidate to mutate (give --initial files)")
        parent = pool[rng.randrange(len(pool))] if evaluated else pool[request.slot % len(pool)]
        source = "\n".join(line for line in parent.source.splitlines() if not line.startswith("# offline: "))
        literals = [literal for literal in float_literals(source) if literal[2] != 0.0]  # zero stays zero anyway
        if not literals or rng.random() < self.structural:
            child = structural_child(rng, parent, evaluated or pool, self.fitness, library=self.library)
            if child is not None:
                return Sample(child[0])
        if not literals:
            return Sample("", error=f"{parent.name} has no non-zero float constant and no term that a structural "
                                    "move could change")
        chosen = [i for i in range(len(literals)) if rng.random() < self.rate] or [rng.randrange(len(literals))]
        # A CURRICULUM range [lo, hi] is mutated as one: its width around its centre, so that lo ≤ hi stays true.
        pairs = _range_pairs(source, literals)
        chosen = sorted({j for i in chosen for j in pairs.get(i, (i,))})
        factors = {}
        for i in chosen:
            factors.setdefault(pairs.get(i, (i,)), math.exp(rng.gauss(0.0, self.scale)))
        replaced = {}
        for members, factor in factors.items():
            values = [literals[i][2] for i in members]
            if len(members) == 2:
                centre, half = (values[0] + values[1]) / 2, (values[1] - values[0]) / 2 * factor
                if values[0] > 0:  # a positive range (a scale) stays positive
                    half = min(half, 0.9 * centre)
                replaced.update({members[0]: centre - half, members[1]: centre + half})
            else:
                replaced[members[0]] = values[0] * factor
        lines = source.splitlines(keepends=True)
        changes = []
        for i in sorted(replaced, key=lambda i: literals[i][0], reverse=True):  # from the end: positions stay valid
            (row, col), (end_row, end_col), value = literals[i]
            new = _format_float(replaced[i])
            line = lines[row - 1]
            lines[row - 1] = line[:col] + new + line[end_col:]
            changes.append(f"line {row + 1}: {line[col:end_col]} -> {new}")  # + 1: the header line
        header = f"# offline: from {parent.name}; {', '.join(reversed(changes))}\n"
        return Sample(header + "".join(lines))


def offline_sample(settings: dict, request: dict) -> dict:
    """`OfflineProposer(**settings).propose(request)` from and to JSON: what the sandbox runs for a jailed offline
    proposer."""
    population = tuple(Parent(**parent) for parent in request["population"])
    fitness = tuple(settings["fitness"]) if settings.get("fitness") else None
    sample = OfflineProposer(**{**settings, "fitness": fitness}).propose(
        Request(**{**request, "messages": tuple(request["messages"]), "population": population}))
    return {"text": sample.text, "error": sample.error}


STRUCTURAL = {"population": 1.0, "offline": 0.5, "jitter": 0.0, "random": 0.0, "seeds": 1.0}
"""The offline proposer's share of structural moves under each `--proposer` (population: its children change
structure only, as the population tunes their constants; seeds: the same children, trained as proposed)."""


def make_proposer(model: str | None, provider: str | None = None, base_url: str | None = None,
                  timeout_s: float = 120.0, max_retries: int = 4, temperature: float | None = None,
                  max_tokens: int = 4096, seed: int = 0, fitness=None, search: str = "offline",
                  jail=None, state_fields: Mapping[str, StateField] | None = None,
                  states: Mapping | None = None) -> Proposer:
    """The offline proposer without a model (`fitness`: the task's `Fitness`, a term its structural moves may
    add, as may the terms its state offers, `state_fields`: the task's, their costs' weights sized on its sample
    `states`; `search`: the run's `--proposer`; `jail`: where it writes its children, `OfflineProposer`);
    otherwise the model's provider's SDK."""
    if model is None:
        term = (fitness_term_source(fitness.step), fitness.higher_is_better) if fitness is not None else None
        return OfflineProposer(seed=seed, fitness=term, structural=STRUCTURAL[search], jail=jail,
                               library=state_terms(state_fields or {}, states))
    cls = {"openai": OpenAIProposer, "anthropic": AnthropicProposer}[provider_for(model, provider, base_url)]
    return cls(model, base_url=base_url, timeout_s=timeout_s, max_retries=max_retries, temperature=temperature,
               max_tokens=max_tokens)


__all__ = ["Proposer", "Request", "Sample", "Parent", "ProposerError", "OpenAIProposer", "AnthropicProposer",
           "OfflineProposer", "offline_sample", "make_proposer", "provider_for", "estimate_cost", "float_literals"]
