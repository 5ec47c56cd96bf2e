"""What the decoder rules share: the ops that only move values, the generation a model runs, and two
lookups (a tensor's one consumer, a scalar constant)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import onnx

from ...context import ModelContext
from ...errors import PrecisionError
from ...storage import read_array
from ..facts import ModelFacts

if TYPE_CHECKING:
    from ...generation.description import Generation

# ops that move or select values without computing on them
MOVES = frozenset({"Unsqueeze", "Squeeze", "Reshape", "Flatten", "Transpose", "Expand", "Concat", "Slice",
                   "Identity", "Tile", "Gather"})


def generation_of(facts: ModelFacts) -> Generation | None:
    """The generation the model runs: the caller's (``facts.generation``), else the one its names and the
    ``genai_config.json`` beside it describe; None for a model that runs none."""
    return facts.generation if facts.generation is not None else facts.ctx.memo(_inferred_generation)


def _inferred_generation(ctx: ModelContext) -> Generation | None:
    # imported here: the generation package's runner imports the oracle, which imports the rules
    from ...generation.infer import infer_generation

    try:
        return infer_generation(ctx.model, model_path=ctx.path)
    except PrecisionError:  # a config the generation stage refuses is its to report; the rules go without
        return None


def one_consumer(ctx: ModelContext, tensor: str, *ops: str) -> onnx.NodeProto | None:
    """The one consumer of ``tensor`` when it is one of ``ops`` and ``tensor`` is no graph output."""
    readers = ctx.index.consumers.get(tensor, ())
    outputs = {o.name for o in ctx.model.graph.output}
    return readers[0].node if len(readers) == 1 and readers[0].node.op_type in ops and tensor not in outputs \
        else None


def scalar(ctx: ModelContext, name: str) -> float | None:
    tensor = ctx.constants.get(name)
    if tensor is None or math.prod(tensor.dims) != 1:
        return None
    return float(np.asarray(read_array(tensor, ctx.base_dir)).ravel()[0])
