"""Loading and naming: unnamed and duplicate nodes get TensorRT-compatible deterministic names."""

from __future__ import annotations

import onnx
import pytest
from conftest import parse

from onnx_precision.context import load_model
from onnx_precision.errors import ModelLoadError
from onnx_precision.graph import name_nodes, walk_nodes

TEXT = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] x) => (float[2] y) {
    a = Relu(x)
    b = Sigmoid(a)
    y = Add(a, b)
}
"""


def names(model):
    return [ref.name for ref in walk_nodes(model.graph)]


def test_unnamed_nodes_are_named_like_tensorrt_layers():
    model = parse(TEXT)
    renames = name_nodes(model)
    assert names(model) == ["node_of_a", "node_of_b", "node_of_y"]
    assert renames == [("", "node_of_a"), ("", "node_of_b"), ("", "node_of_y")]


def test_named_nodes_are_kept_and_duplicates_get_a_suffix():
    model = parse(TEXT)
    model.graph.node[0].name = "act"
    model.graph.node[1].name = "act"
    model.graph.node[2].name = "node_of_a"  # collides with what the first node would get if unnamed
    renames = name_nodes(model)
    assert names(model) == ["act", "act_1", "node_of_a"]
    assert renames == [("act", "act_1")]


def test_naming_is_idempotent():
    model = parse(TEXT)
    name_nodes(model)
    before = model.SerializeToString()
    assert name_nodes(model) == []
    assert model.SerializeToString() == before


def test_subgraph_nodes_are_named_and_walked():
    model = parse("""
    <ir_version: 8, opset_import: ["" : 17]>
    g (bool c, float[2] x) => (float[2] y) {
        y = If(c) <then_branch = t () => (float[2] o) { o = Relu(x) },
                   else_branch = e () => (float[2] o) { o = Neg(x) }>
    }
    """)
    name_nodes(model)
    refs = list(walk_nodes(model.graph))
    assert [r.name for r in refs] == ["node_of_y", "node_of_o", "node_of_o_1"]
    assert refs[1].graph_path == (("node_of_y", "then_branch"),)


def test_load_errors_are_one_line(tmp_path):
    with pytest.raises(ModelLoadError, match=r"missing.onnx: no such file"):
        load_model(str(tmp_path / "missing.onnx"))
    with pytest.raises(ModelLoadError, match=r": not a file"):
        load_model(str(tmp_path))
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\xfe definitely not a protobuf \x00\x01")
    with pytest.raises(ModelLoadError, match=r"junk.onnx: not an ONNX model"):
        load_model(str(junk))
    good = tmp_path / "good.onnx"
    onnx.save(parse(TEXT), str(good))
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(good.read_bytes()[:-7])
    with pytest.raises(ModelLoadError, match=r"truncated.onnx: not an ONNX model"):
        load_model(str(truncated))


def test_load_names_nodes(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(parse(TEXT), str(path))
    loaded = load_model(str(path))
    assert names(loaded.model) == ["node_of_a", "node_of_b", "node_of_y"]
    assert len(loaded.renamed) == 3
