"""The onnxconverter-common drop-in is a one-import change: the modules and names of
onnxconverter-common 1.16 (``float16``, ``auto_mixed_precision``, ``auto_mixed_precision_model_path``)
under ``onnx_precision``, each compared with onnxconverter-common itself on the same inputs, and a
``validate_fn`` that steers the search as it does there. The names not provided are docs/python.md's."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import types
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_precision import auto_mixed_precision, auto_mixed_precision_model_path, float16
from onnx_precision.convert import convert_model
from onnx_precision.judge import Tolerance, compare_outputs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MLP = os.path.join(ROOT, "models", "benign_mlp.onnx")
MLP_DATA = os.path.join(ROOT, "models", "benign_mlp.npz")
FLOAT, FLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16

# onnxconverter-common's names with no counterpart (the steps of its own conversion, its bisection
# state, the path variant's file helpers): docs/python.md's drop-in section names each.
NOT_PROVIDED = {
    "float16": {"initial_checking", "process_node_input_output", "process_graph_input",
                "process_graph_output", "process_node_in_block_list", "insert_cast32_before_node",
                "insert_cast16_after_node", "process_tensor_in_node", "process_value_info",
                "process_initializers", "get_next_level_graph"},
    "auto_mixed_precision": {"SegmentList", "NodeSegment"},
    "auto_mixed_precision_model_path": {"generate_temp_filename", "inference", "save_model"},
}


def occ(module: str) -> types.ModuleType:
    """onnxconverter-common's module (a test extra: skipped when missing)."""
    return pytest.importorskip(f"onnxconverter_common.{module}")


def quiet(call, *args, **kwargs):
    with contextlib.redirect_stdout(io.StringIO()):  # onnxconverter-common prints every attempt
        return call(*args, **kwargs)


def public_names(module: types.ModuleType) -> set[str]:
    """The names a module defines for its users: its functions, classes and constants (not the
    modules and functions it imports)."""
    return {name for name, value in vars(module).items() if not name.startswith("_")
            and not isinstance(value, types.ModuleType)
            and (not callable(value) or getattr(value, "__module__", module.__name__) == module.__name__)}


def _model(nodes, inits, inputs, outputs) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, FLOAT, s) for n, s in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def two_branches(c: float) -> onnx.ModelProto:
    """y1 = x - c ('keep'), y2 = x * 1.3 ('free'). At x = 1000, c = 992.2 rounds to 992 in FP16: y1
    is 8 for 7.8 (2.6% off: onnx-precision's default tolerance passes it); c = 998.8 rounds to 999:
    1 for 1.2 (17% off: it fails)."""
    inits = [numpy_helper.from_array(np.full((1, 4), c, np.float32), "c"),
             numpy_helper.from_array(np.full((1, 4), 1.3, np.float32), "b")]
    nodes = [helper.make_node("Sub", ["x", "c"], ["y1"], name="keep"),
             helper.make_node("Mul", ["x", "b"], ["y2"], name="free")]
    return _model(nodes, inits, [("x", [1, 4])], [("y1", [1, 4]), ("y2", [1, 4])])


FEED = {"x": np.full((1, 4), 1000.0, np.float32)}


def node_types(model: onnx.ModelProto) -> dict[str, int]:
    """Each computing node's output element type (FLOAT: it runs FP32), Casts left out."""
    graph = onnx.shape_inference.infer_shapes(model).graph
    types_ = {v.name: v.type.tensor_type.elem_type for v in [*graph.value_info, *graph.output, *graph.input]}
    return {n.name: types_[n.output[0]] for n in graph.node if n.op_type != "Cast"}


# --- the modules and names ------------------------------------------------------------------------

@pytest.mark.parametrize("module", sorted(NOT_PROVIDED))
def test_every_public_name_of_onnxconverter_common_is_here_or_named_in_the_readme(module):
    theirs = public_names(occ(module))
    ours = importlib.import_module(f"onnx_precision.{module}")
    missing = {name for name in theirs if not hasattr(ours, name)}
    assert missing == NOT_PROVIDED[module]
    page = open(os.path.join(ROOT, "docs", "python.md"), encoding="utf-8").read()
    section = page[page.index("## From onnxconverter-common"):]
    section = section[:section.index("\n## ")]
    assert [name for name in sorted(missing) if f"`{name}`" not in section] == []


def test_the_import_users_write_is_the_only_change():
    """``from onnxconverter_common import auto_mixed_precision`` then the module's function: the
    same call, the same model, with ``onnx_precision`` in the import."""
    theirs_module, ours_module = occ("auto_mixed_precision"), auto_mixed_precision
    model, feed = onnx.load(MLP), dict(np.load(MLP_DATA))
    theirs = quiet(theirs_module.auto_convert_mixed_precision, model, feed, rtol=0.01, atol=0.001,
                   keep_io_types=True)
    ours = ours_module.auto_convert_mixed_precision(model, feed, rtol=0.01, atol=0.001, keep_io_types=True)
    assert node_types(ours) == node_types(theirs) == {n: FLOAT16 for n in node_types(theirs)}
    assert ours_module.auto_convert_mixed_precision is float16.auto_convert_mixed_precision
    assert float16.DEFAULT_OP_BLOCK_LIST == occ("float16").DEFAULT_OP_BLOCK_LIST
    assert (float16.FLOAT32, float16.FLOAT16) == (occ("float16").FLOAT32, occ("float16").FLOAT16)


# --- validate_fn steers the search ----------------------------------------------------------------

def test_a_validate_fn_that_needs_a_node_fp32_makes_the_search_pin_it_as_onnxconverter_common():
    """validate_fn requires y1 within 1%: only 'keep' in FP32 gives that. The default tolerance
    passes the all-FP16 model (2.6% off), so a validate_fn that only gated the result would refuse
    it; asked of each probe, it pins 'keep', as onnxconverter-common's bisection does."""
    model = two_branches(992.2)
    asked: list[list[np.dtype]] = []

    def validate(fp32, fp16):
        asked.append([a.dtype for a in fp16])
        return np.allclose(fp32[0], fp16[0], rtol=0.01, atol=0)

    theirs = quiet(occ("auto_mixed_precision").auto_convert_mixed_precision, model, FEED, validate,
                   keep_io_types=True)
    asked.clear()
    ours = float16.auto_convert_mixed_precision(model, FEED, validate, keep_io_types=True)
    assert node_types(ours) == node_types(theirs) == {"keep": FLOAT, "free": FLOAT16}
    # asked of every probe, in the types the model outputs (float32: keep_io_types)
    assert len(asked) > 2 and all(dtypes == [np.float32, np.float32] for dtypes in asked)
    assert convert_model(model, FEED).plan.fp32_nodes == ()  # the default tolerance: the pin is validate_fn's
    with pytest.raises(ValueError, match=r"validation failed: even with every float node in FP32 the "
                                         r"emulated outputs are out of tolerance \(output 'y1' validate_fn"):
        float16.auto_convert_mixed_precision(model, FEED, lambda fp32, fp16: fp16[1].dtype == "float32")


def test_validate_fn_alone_judges_as_in_onnxconverter_common():
    """Without rtol, validate_fn alone decides: accepting everything leaves 'keep' FP16 where it is
    17% off (which the default tolerance would refuse), as onnxconverter-common does."""
    model = two_branches(998.8)
    theirs = quiet(occ("auto_mixed_precision").auto_convert_mixed_precision, model, FEED,
                   lambda fp32, fp16: True, keep_io_types=True)
    ours = float16.auto_convert_mixed_precision(model, FEED, lambda fp32, fp16: True, keep_io_types=True)
    assert node_types(ours) == node_types(theirs) == {"keep": FLOAT16, "free": FLOAT16}


def test_the_tolerance_names_its_accept_in_reports_and_json_cannot_bring_it_back():
    def my_check(reference, candidate):
        return ""

    tol = Tolerance(accept=my_check)
    assert tol.describe().endswith("; and my_check accepts the outputs")
    assert tol.to_json()["accept"] == "my_check" and "accept" not in Tolerance().to_json()
    assert Tolerance.from_json(tol.to_json()) == Tolerance() and tol.cli_args() == []
    with pytest.raises(ValueError, match="accept: expected a function of"):
        Tolerance(accept="my_check")
    same = {"y": np.ones(4, np.float32), "z": np.zeros(2, np.float32)}
    rejected = compare_outputs(same, same, Tolerance(accept=lambda ref, cand: "my words"), "emulate")
    assert not rejected.passed and rejected.failure() == "output 'y' my words"
    assert all(not m.passed and m.failures == ("my words",) and m.room == np.inf for m in rejected.outputs)
    assert compare_outputs(same, same, tol, "emulate").passed


# --- the float16 helpers, against onnxconverter-common's --------------------------------------------

VALUES = np.array([0.0, 5e-8, -5e-8, 1e-7, 3.0, -2.5, 2e4, -7e4, np.inf, -np.inf, np.nan], np.float32)


@pytest.mark.parametrize("values", [VALUES, VALUES[3:6], np.array([1.0, 2.0], np.float64)])
def test_convert_np_to_float16_clamps_and_warns_as_onnxconverter_common(values):
    theirs_module = occ("float16")
    results, messages = [], []
    for convert in (theirs_module.convert_np_to_float16, float16.convert_np_to_float16):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results.append(convert(values.copy()))
        messages.append([str(w.message) for w in caught])
    assert results[1].dtype == np.float16
    assert results[1].view(np.uint16).tolist() == results[0].view(np.uint16).tolist()
    assert messages[1] == messages[0]


def test_convert_tensor_float_to_float16_writes_the_same_tensor():
    theirs_module = occ("float16")
    raw = numpy_helper.from_array(np.array([[1.5, 3e-8], [7e4, -0.1]], np.float32), "raw")
    listed = helper.make_tensor("listed", FLOAT, [3], [0.5, -2e5, 1e-9])
    integers = numpy_helper.from_array(np.array([1, 2], np.int64), "integers")
    for tensor in (raw, listed, integers):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = theirs_module.convert_tensor_float_to_float16(copy(tensor))
            ours = float16.convert_tensor_float_to_float16(copy(tensor))
        assert ours.SerializeToString() == theirs.SerializeToString()
        assert (float16.make_value_info_from_tensor(ours).SerializeToString()
                == theirs_module.make_value_info_from_tensor(theirs).SerializeToString())
    with pytest.raises(ValueError, match="Expected input type is an ONNX TensorProto but got <class 'str'>"):
        float16.convert_tensor_float_to_float16("W")
    external = copy(raw)
    onnx.external_data_helper.set_external_data(external, "w.bin")
    external.data_location = TensorProto.EXTERNAL
    with pytest.raises(ValueError, match="tensor 'raw': its data is in an external file"):
        float16.convert_tensor_float_to_float16(external)


def copy(tensor: onnx.TensorProto) -> onnx.TensorProto:
    return onnx.TensorProto.FromString(tensor.SerializeToString())


def chain() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((4, 4)) / 4).astype(np.float32), "W")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             helper.make_node("Relu", ["mm"], ["relu"], name="relu"),
             helper.make_node("Max", ["relu", "x"], ["max"], name="max"),
             helper.make_node("Sigmoid", ["max"], ["y"], name="sig")]
    return _model(nodes, inits, [("x", [1, 4])], [("y", [1, 4])])


def test_convert_float_to_float16_model_path_and_check_if_fp16_ready_as_onnxconverter_common(tmp_path):
    theirs_module = occ("float16")
    path = str(tmp_path / "chain.onnx")
    onnx.save(chain(), path)
    theirs = theirs_module.convert_float_to_float16_model_path(path, keep_io_types=True)
    ours = float16.convert_float_to_float16_model_path(path, keep_io_types=True)
    assert node_types(ours) == node_types(theirs) == {"mm": FLOAT16, "relu": FLOAT16, "max": FLOAT,
                                                      "sig": FLOAT16}
    for model in (chain(), theirs, ours):
        assert float16.check_if_fp16_ready(model.graph) == theirs_module.check_if_fp16_ready(model.graph)
    assert float16.check_if_fp16_ready(ours.graph) and not float16.check_if_fp16_ready(chain().graph)
    with pytest.raises(ValueError, match="model_path: expected the path of an .onnx file; got ModelProto"):
        float16.convert_float_to_float16_model_path(chain())


def test_the_graph_helpers_edit_as_onnxconverter_common():
    theirs_module = occ("float16")
    made = []
    for module in (theirs_module, float16):
        graph = chain().graph
        module.add_cast_node(graph, ["y"], ["y16"], "to16", FLOAT16)
        module.add_new_value_info(graph, graph.output[0], "y16", FLOAT16)
        made.append(graph)
        assert [n.name for n in module.find_donwstream_node_by_input_name(graph, "x")] == ["mm", "max"]
        assert [n.name for n in module.find_upstream_node_by_output_name(graph, "relu")] == ["relu"]
        assert module.find_upstream_node_by_output_name(graph, "x") == []
    assert made[1].SerializeToString() == made[0].SerializeToString()


def test_sort_topology_gives_onnxconverter_common_order():
    theirs_module = occ("float16")
    sorted_graphs = []
    for module in (theirs_module, float16):
        graph = chain().graph
        nodes = list(graph.node)
        del graph.node[:]
        graph.node.extend([nodes[3], nodes[1], nodes[0], nodes[2]])
        module.sort_topology(graph)
        sorted_graphs.append([n.name for n in graph.node])
    assert sorted_graphs[1] == sorted_graphs[0] == ["mm", "relu", "max", "sig"]


def cast_pair() -> onnx.ModelProto:
    """Relu, Cast to FP16, Cast to FP32, Sigmoid: the pair rounds through FP16 for nothing."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Cast", ["r"], ["r16"], name="to16", to=FLOAT16),
             helper.make_node("Cast", ["r16"], ["r32"], name="to32", to=FLOAT),
             helper.make_node("Sigmoid", ["r32"], ["y"], name="sig")]
    return _model(nodes, [], [("x", [1, 4])], [("y", [1, 4])])


def test_remove_unnecessary_cast_node_removes_the_pair_as_onnxconverter_common():
    theirs_module = occ("float16")
    results = []
    for module in (theirs_module, float16):
        model = cast_pair()
        module.remove_unnecessary_cast_node(model.graph)
        results.append(model)
    assert [n.name for n in results[1].graph.node] == ["relu", "sig"]
    assert results[1].SerializeToString() == results[0].SerializeToString()
    onnx.checker.check_model(results[1], full_check=True)


def test_remove_identity_node_from_model_and_keeps_every_reader_valid():
    theirs_module = occ("float16")

    def with_identity(second_reader: bool) -> onnx.ModelProto:
        nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
                 helper.make_node("Identity", ["r"], ["i"], name="id"),
                 helper.make_node("Sigmoid", ["i"], ["y"], name="sig")]
        outputs = [("y", [1, 4])]
        if second_reader:  # a second reader of r: onnxconverter-common leaves it reading nothing
            nodes.append(helper.make_node("Neg", ["r"], ["z"], name="neg"))
            outputs.append(("z", [1, 4]))
        return _model(nodes, [], [("x", [1, 4])], outputs)

    theirs = theirs_module.remove_identity_node_from_model(with_identity(False))
    ours = float16.remove_identity_node_from_model(with_identity(False))
    assert ours.SerializeToString() == theirs.SerializeToString()
    ours = float16.remove_identity_node_from_model(with_identity(True))
    assert [(n.name, list(n.input)) for n in ours.graph.node] == [("relu", ["x"]), ("sig", ["i"]),
                                                                   ("neg", ["i"])]
    onnx.checker.check_model(ours, full_check=True)


# --- auto_mixed_precision's helpers, auto_mixed_precision_model_path -------------------------------

def test_the_onnxruntime_helpers_give_what_onnxconverter_common_gives():
    theirs_module = occ("auto_mixed_precision")
    feed = {"x": np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4)}
    model = chain()
    before = model.SerializeToString()
    for names in (None, ["relu", "mm"]):
        ours = auto_mixed_precision.get_tensor_values_using_ort(model, feed, names)
        theirs = theirs_module.get_tensor_values_using_ort(model, feed, names)
        assert [a.tolist() for a in ours] == [a.tolist() for a in theirs]
    assert model.SerializeToString() == before
    theirs = quiet(theirs_module.add_missing_dtypes_using_ort, chain(), feed, outputs_per_iter=2)
    ours = auto_mixed_precision.add_missing_dtypes_using_ort(chain(), feed, outputs_per_iter=2)
    assert ours.SerializeToString() == theirs.SerializeToString()


def test_auto_convert_mixed_precision_model_path_writes_what_onnxconverter_common_writes(tmp_path):
    theirs_module = occ("auto_mixed_precision_model_path")
    feed = dict(np.load(MLP_DATA))
    for name, module in (("theirs", theirs_module), ("ours", auto_mixed_precision_model_path)):
        quiet(module.auto_convert_mixed_precision_model_path, MLP, feed, str(tmp_path / name / "mlp16.onnx"),
              ["CPUExecutionProvider"], rtol=0.01, atol=0.001)
    theirs, ours = (onnx.load(str(tmp_path / name / "mlp16.onnx")) for name in ("theirs", "ours"))
    assert node_types(ours) == node_types(theirs) == {n: FLOAT16 for n in node_types(theirs)}
    assert sorted(os.listdir(tmp_path / "ours")) == ["mlp16.onnx", "mlp16.onnx.data"]
    with pytest.raises(ValueError, match="validation failed for fp32 model"):
        auto_mixed_precision_model_path.auto_convert_mixed_precision_model_path(
            MLP, feed, str(tmp_path / "no" / "m.onnx"), None, customized_validate_func=lambda a, b: False)
    assert not os.path.exists(tmp_path / "no")
    with pytest.raises(TypeError, match="only accepts model Path"):
        auto_mixed_precision_model_path.auto_convert_mixed_precision_model_path(
            onnx.load(MLP), feed, "m.onnx", None)
    with pytest.warns(UserWarning, match=re.escape("location: the weights are written to 'm.onnx.data'")):
        auto_mixed_precision_model_path.auto_convert_mixed_precision_model_path(
            MLP, feed, str(tmp_path / "loc" / "m.onnx"), None, location="fp16_tensor.data")
