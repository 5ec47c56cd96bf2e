"""Each step's feed of a generation: the first made from the sample, each next one from the step before
(its outputs fed back, the next token or chunk, the mask and positions grown). Only the current feed
is ever held: what a step makes replaces what the step before it held.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..data import FeedForm
from ..errors import DataError
from .description import Generation, InputSpec

Feed = Mapping[str, np.ndarray]


def first_feed(generation: Generation, sample: Feed) -> dict[str, np.ndarray]:
    """Step 0's feed: the sample :func:`started` (its first chunk, for a streaming model)."""
    feed = started(generation, sample)
    for name in _chunked(generation):
        feed[name] = chunk(generation, name, feed[name], 0)
    return feed


def started(generation: Generation, sample: Feed) -> dict[str, np.ndarray]:
    """The sample with what it leaves out made as a generation starts: empty caches, zero states, a mask
    of ones, positions from 0 (a streaming model's signal whole: :func:`first_feed` takes its first
    chunk)."""
    feed = {name: np.asarray(value) for name, value in sample.items()}
    for name in _chunked(generation):
        if name not in feed:
            raise DataError(f"the sample has no '{name}', the signal the streaming model is fed a chunk at "
                            f"a time")
    ids = generation.tokens.input_ids if generation.tokens else None
    if ids is not None and ids not in feed:
        raise DataError(f"the sample has no '{ids}': a decoder's generation starts from its prompt tokens")
    symbols = _symbols(generation, feed)
    given = feed[ids] if ids is not None else next((feed[n] for n in _chunked(generation)), None)
    batch = int(given.shape[0]) if given is not None and given.ndim else 1
    kinds = {f.input: f.kind for f in generation.feedback}
    given_cache = [f.input for f in generation.feedback
                   if f.kind == "kv" and f.input in feed and feed[f.input].size]
    for spec in generation.inputs:
        if spec.name in feed:
            continue
        if spec.name in generation.grown:
            if given_cache:
                raise DataError(f"the sample gives cache '{given_cache[0]}' but not '{spec.name}': with a "
                                f"cache already filled, its mask and positions are the sample's to give")
            feed[spec.name] = _started(generation, spec, feed)
        elif spec.name in kinds:
            feed[spec.name] = np.zeros(_start_shape(spec, kinds[spec.name] == "kv", symbols, batch),
                                       np.dtype(spec.dtype))
        else:
            raise DataError(f"the sample has no '{spec.name}'")
    return feed


def feed_form(generation: Generation) -> FeedForm:
    """How a sample of ``generation`` may differ from one forward pass's feed (:func:`..data.load_samples`):
    it may leave out what :func:`started` makes (the fed-back inputs, the mask and positions), and a
    streaming model's signal may hold many chunks."""
    sized = generation.chunking is not None and generation.chunking.size is not None
    return FeedForm(generation.fed_inputs | frozenset(generation.grown),
                    frozenset(_chunked(generation)) if sized else frozenset(),
                    lambda sample: started(generation, sample))


def next_feed(generation: Generation, feed: Feed, outputs: Mapping[str, np.ndarray],
              tokens: np.ndarray | None, sample: Feed, step: int) -> dict[str, np.ndarray]:
    """Step ``step``'s feed, from the feed and ``outputs`` of the step before, with ``tokens`` ([batch]) as
    its input ids (a decoder's)."""
    nxt = dict(feed)
    for f in generation.feedback:
        nxt[f.input] = outputs[f.output]
    if generation.tokens is not None and tokens is not None:
        ids = generation.tokens.input_ids
        nxt[ids] = np.asarray(tokens).reshape(-1, 1).astype(feed[ids].dtype)
    if generation.attention_mask:
        mask = feed[generation.attention_mask]
        grown = np.ones((mask.shape[0], 1), mask.dtype)
        nxt[generation.attention_mask] = np.concatenate([mask, grown], axis=-1)
    if generation.position_ids:
        nxt[generation.position_ids] = feed[generation.position_ids][..., -1:] + 1
    if generation.cache_position:
        nxt[generation.cache_position] = feed[generation.cache_position][..., -1:] + 1
    for name in _chunked(generation):
        nxt[name] = chunk(generation, name, np.asarray(sample[name]), step)
    return nxt


def chunk(generation: Generation, name: str, signal: np.ndarray, step: int) -> np.ndarray:
    """The chunk of ``signal`` (the sample's input ``name``) fed at ``step``: chunks in turn along its last
    axis, from the first again once they are used up; the whole of it where no chunk size is known."""
    size = generation.chunking.size if generation.chunking else None
    if size is None:
        return signal
    length = signal.shape[-1] if signal.ndim else 0
    if length < size or length % size:
        raise DataError(f"input '{name}': {length} elements along its last axis are not a whole number of "
                        f"{size}-element chunks")
    at = (step % (length // size)) * size
    return signal[..., at:at + size]


def chunks(generation: Generation, sample: Feed) -> int:
    """How many chunks the sample holds (1 for a model fed the sample whole)."""
    size = generation.chunking.size if generation.chunking else None
    names = _chunked(generation)
    if size is None or not names or names[0] not in sample:
        return 1
    return int(np.shape(sample[names[0]])[-1]) // size


def position(generation: Generation, feed: Feed) -> int | None:
    """The largest position ``feed`` computes (None for a model fed no positions)."""
    name = generation.positions
    return None if name is None or not np.size(feed[name]) else int(np.max(feed[name]))


def _chunked(generation: Generation) -> tuple[str, ...]:
    return generation.chunking.inputs if generation.chunking else ()


def _symbols(generation: Generation, feed: Feed) -> dict[str, int]:
    """Each symbolic dimension's size in the inputs the sample gives."""
    values: dict[str, int] = {}
    for spec in generation.inputs:
        if spec.name in feed and spec.shape is not None:
            for dim, size in zip(spec.shape, np.shape(feed[spec.name])):
                if isinstance(dim, str):
                    values.setdefault(dim, int(size))
    return values


def _start_shape(spec: InputSpec, cache: bool, symbols: Mapping[str, int], batch: int) -> tuple[int, ...]:
    """The shape of the first value of a fed-back input: its declared sizes, its symbols as the sample's
    other inputs size them, its batch axis the sample's batch; a cache's remaining axis (the past) 0."""
    if spec.shape is None:
        raise DataError(f"the sample has no '{spec.name}', and the model declares no shape to start it from")
    shape = []
    for axis, dim in enumerate(spec.shape):
        if isinstance(dim, int):
            shape.append(dim)
        elif isinstance(dim, str) and dim in symbols:
            shape.append(symbols[dim])
        elif axis == 0:
            shape.append(batch)
        elif cache:
            shape.append(0)
        else:
            raise DataError(f"the sample has no '{spec.name}', and its dimension {axis} ({dim or 'unnamed'}) "
                            f"is not sized by the sample's other inputs: give its first value in the sample")
    return tuple(shape)


def _started(generation: Generation, spec: InputSpec, feed: Feed) -> np.ndarray:
    """A mask of ones, or positions from 0, over the sample's tokens (no cache filled yet)."""
    ids = feed[generation.tokens.input_ids] if generation.tokens else None
    if ids is None:
        raise DataError(f"the sample has no '{spec.name}'")
    batch, length = ids.shape[0], ids.shape[-1]
    dtype = np.dtype(spec.dtype or "int64")
    if spec.name == generation.attention_mask:
        return np.ones((batch, length), dtype)
    positions = np.arange(length, dtype=dtype)
    if spec.name == generation.cache_position:
        return positions
    return np.broadcast_to(positions, (batch, length))
