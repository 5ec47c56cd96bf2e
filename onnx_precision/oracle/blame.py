"""Whose fault is an onnxruntime failure: the user's model, the user's data, or onnx-precision's?

The oracle's sessions run graphs derived from the user's model (the switch graph, emulations).
When onnxruntime rejects one, or fails while running it, :func:`blame` asks onnxruntime about the
user's model itself, as it is: if it fails to load, or fails on the same sample, the problem is
the user's and becomes one line (exit 2) saying what onnxruntime said, and for a model that only
fails on the synthetic feed, which input to give a shape. If the model itself loads and runs, the
derived graph is at fault: an :class:`~onnx_precision.errors.InternalError`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..context import ModelContext
from ..data import Samples
from ..errors import CustomOpError, DataError, InternalError, ModelLoadError, PrecisionError
from ..graph import is_onnx_domain
from .sessions import make_session, ort_message, run_session


def is_ort_error(e: BaseException) -> bool:
    """Whether ``e`` is one of onnxruntime's own exceptions (a refused model, a failed run)."""
    return type(e).__module__.startswith("onnxruntime")


@contextmanager
def blame(ctx: ModelContext, samples: Samples | None = None) -> Iterator[None]:
    """Turn an onnxruntime error raised inside the block into the user's error or an internal one."""
    try:
        yield
    except Exception as e:
        if not is_ort_error(e):
            raise
        raise diagnose(ctx, samples, e) from e


def diagnose(ctx: ModelContext, samples: Samples | None, error: BaseException) -> Exception:
    """The error to raise for ``error``, raised by a session derived from ``ctx``'s model, after
    loading the model itself and running it on each of ``samples``' feeds."""
    try:
        session = make_session(ctx.model, ctx.base_dir, custom_op_libraries=ctx.custom_op_libraries)
    except PrecisionError as e:
        return e
    except Exception as e:
        if not is_ort_error(e):
            raise
        return load_error(ctx, e)
    feeds = samples.feeds if samples is not None else ()
    for i, feed in enumerate(feeds):
        try:
            run_session(session, ctx.model, [feed])
        except Exception as e:
            if not is_ort_error(e) or samples is None:
                raise
            return run_error(ctx, samples, i, e)
    return InternalError(f"onnxruntime rejects a graph derived from {ctx.path}, although the model itself "
                         f"loads and runs: {ort_message(error)}")


def load_error(ctx: ModelContext, e: BaseException) -> ModelLoadError:
    """One line for a model onnxruntime cannot load; a custom-domain op it has no kernel for gets
    what to do about it."""
    message = ort_message(e)
    functions = {(f.domain, f.name) for f in ctx.model.functions}
    custom = [ref.node for ref in ctx.nodes if not is_onnx_domain(ref.node.domain)
              and (ref.node.domain, ref.node.op_type) not in functions]
    named = [n for n in custom if f"{n.domain}:{n.op_type}" in message]
    if named or (custom and "is not a registered function/op" in message):
        node = (named or custom)[0]
        text = f"node '{node.name}' ({node.domain}:{node.op_type})"
        return CustomOpError(
            f"{ctx.path}: {text} is a custom op that onnxruntime has no kernel for, so the model cannot "
            f"be run; register its kernels with --ort-custom-op-library PATH, or convert with --mode static "
            f"or all-fp16 (custom ops stay FP32)", text)
    return ModelLoadError(f"{ctx.path}: onnxruntime cannot load the model: {message}")


def run_error(ctx: ModelContext, samples: Samples, index: int, e: BaseException) -> DataError:
    """One line for a model that loads but fails on sample ``index``: on a synthetic feed whose
    batch dimension was set to 1, it names the input to give a shape."""
    message = ort_message(e)
    if samples.synthetic and samples.guessed_shapes:
        name, dims = samples.guessed_shapes[0]
        return DataError(
            f"{ctx.path}: onnxruntime cannot run the model on the synthetic feed, where input '{name}' "
            f"({dims}) got 1 for its batch dimension ({message}); give its real shape with "
            f"--input-shape {name}:{dims}, the symbolic dimension replaced by its size (or real data with "
            f"--inputs)")
    if samples.synthetic:
        return DataError(f"{ctx.path}: onnxruntime cannot run the model on the synthetic feed ({message}); "
                         f"give real data with --inputs, or --input-range and --input-shape")
    where = f" (feed {index})" if len(samples.feeds) > 1 else ""
    return DataError(f"{samples.source}{where}: onnxruntime cannot run the model on this sample: {message}")
