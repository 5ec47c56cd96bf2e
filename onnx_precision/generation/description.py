"""The generation, described: which outputs feed which inputs at the next step, how the next input is
made, what grows, how many steps.

A :class:`Generation` is a frozen value. :mod:`.infer` builds one from the names a model was exported
with (Hugging Face optimum, onnxruntime-genai, the recurrent ``state``/``hN`` conventions) or from a
``genai_config.json``, with a user's :class:`~onnx_precision.options.GenerationOptions` over them (the
option group ``convert``, ``check`` and ``analyze`` share); :mod:`.steps` makes each step's feed from it,
and :class:`.runner.GenerationRunner` runs it.

A decoder is a generation with :attr:`Generation.tokens` (greedy: the argmax of the last position's
logits is the next ``input_ids``); a streaming model (Silero VAD's ``state``, a GRU's hidden state)
is one without, whose :attr:`Generation.chunking` feeds the sample's signal a chunk per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..errors import UsageError
from ..options import GenerationOptions

# decode steps after the prefill (or chunks after the first) unless told otherwise: the option's default
DEFAULT_STEPS: int = GenerationOptions.steps
# The steps after the first over which plans are judged before the one chosen is judged over all of them
# (the search's horizon), and the written model on the runtimes besides the run's own: a failing plan stops
# at its first failing step anyway, so this is what a passing one costs (9 forward passes, not K + 1).
# SmolLM2-135M (30 layers, 2 busy cores): 0.23-0.47 s a step emulated, 15-31 s for a 64-step generation.
HORIZON = 8

FeedbackKind = Literal["kv", "state"]
Dim = int | str | None  # a declared dimension: a size, a symbol, or unknown


@dataclass(frozen=True)
class Feedback:
    """Output ``output`` of one step is input ``input`` of the next. ``kv``: a cache that grows by the
    step's positions (``present.0.key`` -> ``past_key_values.0.key``); ``state``: a recurrent state of
    fixed size (``stateN`` -> ``state``)."""

    output: str
    input: str
    kind: FeedbackKind


@dataclass(frozen=True)
class InputSpec:
    """A graph input as declared: what a missing first value (an empty cache, a zero state, a mask of
    ones) is made from."""

    name: str
    dtype: str  # numpy's name of its element type: "float32", "int64"
    shape: tuple[Dim, ...] | None  # None: no shape declared


@dataclass(frozen=True)
class Tokens:
    """Greedy decoding: the argmax of ``logits`` at the last position is the next ``input_ids``."""

    logits: str
    input_ids: str


@dataclass(frozen=True)
class Chunking:
    """A streaming model's signal inputs, fed ``size`` elements along their last axis per step, in
    turn (from the start again once the sample's chunks are used up); ``size`` None: each step feeds
    the sample's value whole."""

    inputs: tuple[str, ...]
    size: int | None

    def __post_init__(self) -> None:
        if self.size is not None and self.size < 1:
            raise UsageError(f"--chunk {self.size}: a chunk is at least 1 element")


@dataclass(frozen=True)
class Generation:
    """How a model runs over many steps: step 0 is the sample as given (a prefill, a first chunk),
    steps 1..``steps`` are each fed the previous step's ``feedback`` outputs, the next token
    (``tokens``) or the next chunk (``chunking``), and the grown ``attention_mask``/``position_ids``/
    ``cache_position``. ``max_length``: the length (tokens, or chunks) the plan is asked to hold,
    beyond what the steps verify (:mod:`.bound`). ``inputs``: every graph input as declared. ``source``:
    where the description came from, for the summary ("optimum names", "genai_config.json", ...)."""

    feedback: tuple[Feedback, ...]
    inputs: tuple[InputSpec, ...]
    tokens: Tokens | None = None
    attention_mask: str | None = None
    position_ids: str | None = None
    cache_position: str | None = None
    chunking: Chunking | None = None
    steps: int = DEFAULT_STEPS
    max_length: int | None = None
    source: str = "names"

    def __post_init__(self) -> None:
        if not self.feedback:
            raise UsageError("a generation feeds at least one output back as an input (--feedback OUT=IN)")
        if self.steps < 1:
            raise UsageError(f"--steps {self.steps}: a generation has at least 1 step after the first")
        if self.max_length is not None and self.max_length < 1:
            raise UsageError(f"--max-length {self.max_length}: a length is at least 1")

    @property
    def fed_outputs(self) -> frozenset[str]:
        return frozenset(f.output for f in self.feedback)

    @property
    def fed_inputs(self) -> frozenset[str]:
        return frozenset(f.input for f in self.feedback)

    @property
    def grown(self) -> tuple[str, ...]:
        """The inputs that grow by a step's positions: the mask, the positions."""
        return tuple(n for n in (self.attention_mask, self.position_ids, self.cache_position) if n)

    @property
    def positions(self) -> str | None:
        """The input whose values are the positions computed (``position_ids``, else ``cache_position``)."""
        return self.position_ids or self.cache_position

    @property
    def kind(self) -> str:
        return "decoder" if self.tokens is not None else "streaming"

    @property
    def unit(self) -> str:
        """What a length counts: tokens for a decoder, chunks for a streaming model."""
        return "tokens" if self.tokens is not None else "chunks"

    def spec(self, name: str) -> InputSpec | None:
        return next((s for s in self.inputs if s.name == name), None)

    def summary(self) -> str:
        """One line for the run's summary: "decoder: 2 KV pairs fed back, greedy, 64 steps"."""
        kv = [f.input for f in self.feedback if f.kind == "kv"]
        states = len(self.feedback) - len(kv)
        pairs = sum(_value_of(name) in kv for name in kv)
        fed = []
        if kv:
            fed.append(f"{pairs} KV pair{'s' * (pairs != 1)}" if 2 * pairs == len(kv)
                       else f"{len(kv)} KV cache{'s' * (len(kv) != 1)}")
        if states:
            fed.append(f"{states} state{'s' * (states != 1)}")
        chunk = self.chunking.size if self.chunking else None
        how = ("greedy" if self.tokens is not None
               else f"chunks of {chunk}" if chunk else "the sample each step")
        text = f"{self.kind}: {' and '.join(fed)} fed back, {how}, {self.steps} step{'s' * (self.steps != 1)}"
        if self.max_length is not None:
            text += f", held to {self.max_length} {self.unit}"
        return text


def _value_of(key: str) -> str:
    """The name of the value cache beside the key cache ``key`` (its last "key" made "value")."""
    at = key.rfind("key")
    return "" if at < 0 else key[:at] + "value" + key[at + 3:]
