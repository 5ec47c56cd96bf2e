"""FP16 oracles: run a precision plan (or a written model) and see what FP16 does to it.

- :mod:`.rounding`: the Cast pairs every emulation is made of.
- :mod:`.switch`, :mod:`.switch_graph`: the switch graph, one session for every plan.
- :mod:`.written`: the emulation of a written FP16/mixed model.
- :mod:`.session`: :class:`EmulationSession` and the plain runs (FP32, emulated, native, reference).
- :mod:`.plans`: :class:`Emulator`, a baked session per plan until a search needs the switch graph.
- :mod:`.stats`: FP32 ranges per tensor and FP16 error per node.
- :mod:`.select`: oracles by name (:data:`ORACLES`), and verifying a written model.
- :mod:`.blame`: an onnxruntime failure told apart as the user's model, the user's data, or a bug.
- :mod:`.default_load`: the written model loaded as a user will, in a child process.
"""

from __future__ import annotations

from .blame import blame, is_ort_error
from .default_load import default_load_problem
from .plans import Emulator
from .rounding import round_fp16
from .select import NATIVE_PROVIDERS, ORACLES, require_oracle, run_candidate, verify_output, verify_written
from .session import (
                      EMULATE,
                      REFERENCE,
                      EmulationSession,
                      Feed,
                      OracleRun,
                      as_fp32,
                      make_session,
                      native_oracle,
                      ort_message,
                      run_emulated,
                      run_fp32,
                      run_native,
                      run_reference,
                      session_options,
)
from .stats import (
                      LayerwiseResult,
                      NodeError,
                      ReferenceResult,
                      TensorStats,
                      inspect_plan,
                      layerwise,
                      reference_stats,
                      tensor_stats,
)
from .switch import build_switch_model
from .switch_graph import SwitchGroup, SwitchModel
from .written import emulate_model

__all__ = [
    "blame",
    "is_ort_error",
    "default_load_problem",
    "ort_message",
    "round_fp16",
    "NATIVE_PROVIDERS",
    "ORACLES",
    "require_oracle",
    "run_candidate",
    "verify_output",
    "verify_written",
    "EMULATE",
    "REFERENCE",
    "EmulationSession",
    "Emulator",
    "Feed",
    "OracleRun",
    "as_fp32",
    "make_session",
    "native_oracle",
    "run_emulated",
    "run_fp32",
    "run_native",
    "run_reference",
    "session_options",
    "LayerwiseResult",
    "NodeError",
    "ReferenceResult",
    "TensorStats",
    "inspect_plan",
    "layerwise",
    "reference_stats",
    "tensor_stats",
    "build_switch_model",
    "SwitchGroup",
    "SwitchModel",
    "emulate_model",
]
