"""FP16 oracles: run a precision plan (or a written model) and see what FP16 does to it.

- :mod:`.runners`: :class:`PlanRunner`, what the search probes through; the native and reference runners.
- :mod:`.emulator`: :class:`Emulator`, the emulation's runner: a baked session per plan until a
  search needs the switch graph.
- :mod:`.emulation_session`: :class:`EmulationSession`, one session of the switch graph or of a baked plan.
- :mod:`.rounding`: the Cast pairs every emulation is made of.
- :mod:`.switch_builder` (the builder of emulation graphs), :mod:`.switch_graph` (the switch graph as a
  value), :mod:`.baked`, :mod:`.twin`: the graphs those sessions run.
- :mod:`.written`: the emulation of a written FP16/mixed model.
- :mod:`.inspection`: FP32 ranges per tensor (:mod:`.ranges`) and FP16 error per node
  (:mod:`.layerwise_error`), an emulating runner's capability.
- :mod:`.whole_runs`: whole-model runs (FP32, emulated, native, reference), where :mod:`.runners` runs
  plans for the search.
- :mod:`.verify`: oracles by name (:data:`ORACLES`), and verifying a written model.
- :mod:`.sessions`, :mod:`.weights`: onnxruntime sessions as the oracle builds them.
- :mod:`.blame`: an onnxruntime failure told apart as the user's model, the user's data, or a bug.
- :mod:`.default_load`: the written model loaded as a user will, in a child process.
"""

from __future__ import annotations

from .blame import blame, is_ort_error
from .default_load import DefaultLoad, default_load_problem
from .emulation_session import EMULATE, EmulationSession, as_fp32
from .emulator import Emulator
from .inspection import Inspection, Inspector, NodeStats, inspect_plan, layerwise, reference_stats
from .layerwise_error import LayerwiseResult, NodeError
from .ranges import ReferenceResult, TensorStats, first_nonfinite_output, tensor_stats
from .rounding import round_fp16
from .runners import PlanRunner, WrittenPlanRunner, native_runner, plan_runner, reference_runner
from .sessions import Feed, make_session, ort_message, session_options
from .switch_builder import EmulationSource, build_switch_model
from .switch_graph import SwitchGroup, SwitchModel
from .verify import ORACLES, require_oracle, run_candidate, validate_written, verify_output, verify_written
from .whole_runs import (
                      NATIVE_PROVIDERS,
                      REFERENCE,
                      OracleRun,
                      native_oracle,
                      run_emulated,
                      run_fp32,
                      run_native,
                      run_reference,
)
from .written import emulate_model

__all__ = [
    "blame", "is_ort_error", "DefaultLoad", "default_load_problem", "EMULATE", "EmulationSession", "as_fp32",
    "Emulator",
    "Inspection", "Inspector", "LayerwiseResult", "NodeError", "NodeStats", "ReferenceResult", "TensorStats",
    "first_nonfinite_output", "inspect_plan", "layerwise", "reference_stats", "tensor_stats", "round_fp16",
    "PlanRunner", "WrittenPlanRunner", "native_runner", "plan_runner", "reference_runner",
    "NATIVE_PROVIDERS", "REFERENCE", "OracleRun", "native_oracle", "run_emulated", "run_fp32", "run_native",
    "run_reference", "Feed", "make_session", "ort_message", "session_options", "EmulationSource",
    "build_switch_model",
    "SwitchGroup", "SwitchModel", "ORACLES", "require_oracle", "run_candidate", "validate_written",
    "verify_output", "verify_written", "emulate_model",
]
