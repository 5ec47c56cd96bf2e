"""Is a written model one that onnx accepts? Checked before anything is moved into place.

The load-time checks of an input model are :mod:`onnx_precision.validation`'s; this is the check of
what the rewriter wrote, which tells the user's model at fault from the rewriter at fault.
"""

from __future__ import annotations

import onnx

from ..context import ModelContext
from ..errors import InternalError, ModelLoadError
from ..validation import CHECK_ERRORS, checkable_copy, checker_message


def check_written(staged: str | onnx.ModelProto, ctx: ModelContext) -> None:
    """The model written at ``staged`` (checked by path: it may be over 2 GB), or the rewritten model
    itself (its weights in files seen as inputs), passes onnx's full check. When it does not, the
    input gets the same check: failing it, the input is at fault (:class:`ModelLoadError`); passing
    it, the rewriter is (:class:`InternalError`)."""
    checked = staged if isinstance(staged, str) else checkable_copy(staged, ctx.base_dir)
    try:
        onnx.checker.check_model(checked, full_check=True)
    except CHECK_ERRORS as written:
        try:
            onnx.checker.check_model(checkable_copy(ctx.model, ctx.base_dir), full_check=True)
        except CHECK_ERRORS as e:
            raise ModelLoadError(f"{ctx.path}: onnx rejects the model (full check): "
                                 f"{checker_message(e)}") from e
        raise InternalError(f"the written model fails onnx's full check, while {ctx.path} passes it: "
                            f"{checker_message(written)}") from written
