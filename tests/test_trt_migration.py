"""TensorRT 10's --layerPrecisions read back into pins: trtexec's and Polygraphy's syntax, onnx-tensorrt's
names (unnamed nodes, split ops, duplicates), the round trip with the flags the tool writes, the errors,
and the migration of docs/tensorrt.md end to end."""

from __future__ import annotations

import json
import os
import re
import shlex

import onnx
import pytest
from onnx import TensorProto, helper

from onnx_precision.cli import main
from onnx_precision.context import ModelContext
from onnx_precision.errors import UsageError
from onnx_precision.plan import Precision, Reason, uniform_plan
from onnx_precision.suggested import RunArgs
from onnx_precision.trt import trt_flags, trt_flags_text
from onnx_precision.trt.flags import flags_by_release
from onnx_precision.trt.layer_precisions import (
    OUTPUT_TYPE,
    PRECISION,
    LayerFlags,
    layer_pins,
    parse_spec,
    read_spec_file,
)
from onnx_precision.trt.versions import V

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def mixed_model() -> onnx.ModelProto:
    """Split ops (ReduceL2: x*x, SUM, SQRT; ReduceLogSumExp: EXP, SUM, LOG), an unnamed Relu and two
    nodes called 'dup' (the loader renames the second 'dup_1'), as an exporter may write them."""
    graph = helper.make_graph([
        helper.make_node("ReduceL2", ["x"], ["a"], name="rl2", axes=[1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Mul", ["r", "r"], ["m"], name="dup"),
        helper.make_node("Add", ["m", "r"], ["d"], name="dup"),
        helper.make_node("ReduceLogSumExp", ["d"], ["y"], name="rlse", axes=[0]),
    ], "g", [_vi("x", [4, 3])], [_vi("y", [1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def mixed_context() -> ModelContext:
    return ModelContext.of(mixed_model())


def pinned(ctx: ModelContext, *texts: str, output_types: str = "") -> dict[str, list[str]]:
    specs = [spec for text in texts for spec in parse_spec(text)]
    specs += parse_spec(output_types, "--layer-output-types", output_types=True) if output_types else ()
    pins = layer_pins(ctx.model, specs, renamed=ctx.renamed)
    return {node: [r.detail for r in reasons] for node, reasons in pins.reasons.items()}


# --- the syntax -------------------------------------------------------------------------------------


def test_trtexec_syntax_names_patterns_quotes_and_colons():
    specs = parse_spec("head*:fp32,'odd:name':fp16,input:0:fp32,body:fp16")
    assert [(s.layer, s.precision, s.kind, s.is_pattern) for s in specs] == [
        ("head*", "fp32", PRECISION, True),
        ("odd:name", "fp16", PRECISION, False),  # quoted, quotes removed
        ("input:0", "fp32", PRECISION, False),   # the name is everything before the last ':'
        ("body", "fp16", PRECISION, False),
    ]
    assert specs[0].text == "head*:fp32" and specs[0].source == "--layer-precisions"


def test_polygraphy_syntax_is_one_entry_per_argument_with_tensorrt_type_names():
    assert [(s.layer, s.precision) for s in parse_spec("sca_conv:float32")] == [("sca_conv", "fp32")]
    assert [(s.layer, s.precision) for s in parse_spec("a:float16")] == [("a", "fp16")]
    # A Polygraphy argument is one entry: a name may hold commas (trtexec could never parse it).
    assert [s.layer for s in parse_spec("a,b:float32")] == ["a,b"]


def test_output_types_reduce_to_what_they_ask_of_float_outputs():
    specs = parse_spec("topk:fp32+int64,argmax:int32,mask:bool,half:fp16", "--layerOutputTypes",
                       output_types=True)
    # An FP32 output pins; integer and bool outputs say nothing of floats.
    assert [(s.layer, s.precision, s.kind) for s in specs] == [("topk", "fp32", OUTPUT_TYPE),
                                                               ("half", "fp16", OUTPUT_TYPE)]


@pytest.mark.parametrize("text, said", [
    ("conv:int8", "'conv:int8': a layer in int8 cannot be written"),
    ("conv:fp8", "a layer in fp8 cannot be written"),
    ("conv:fp33", "'fp33' is not a TensorRT type"),
    ("conv", "'conv': expected LAYER:PRECISION"),
    (":fp32", "no layer name before ':'"),
    ("a*b*:fp32", "a name holds at most one '*'"),
    ("'a:fp32", "a quoted name is written 'NAME':PRECISION"),
    (",", "no LAYER:PRECISION in it"),
])
def test_malformed_entries_are_one_line_errors(text, said):
    with pytest.raises(UsageError, match=re.escape(said)) as raised:
        parse_spec(text)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("pattern, name, matches", [
    # trtexec's own cases for matchStringWithOneWildcard (samples/common/sampleUtils.test.cpp)
    ("hello", "hello", True), ("hello", "hello2", False), ("*", "anything", True),
    ("hello*", "hello", True), ("hello*", "hello world", True), ("hello*", "world", False),
    ("*world", "hello world", True), ("*world", "hello", False),
    ("he*ld", "held", True), ("he*ld", "hello world", True), ("he*ld", "hello", False),
])
def test_wildcards_match_as_trtexec_matches_them(pattern, name, matches):
    assert parse_spec(f"{pattern}:fp32")[0].matches(name) is matches


# --- names ------------------------------------------------------------------------------------------


def test_exact_names_reach_named_unnamed_and_duplicate_nodes():
    ctx = mixed_context()
    assert ctx.renamed == (("", "node_of_r"), ("dup", "dup_1"))
    assert pinned(ctx, "rl2:fp32") == {"rl2": ["--layer-precisions rl2:fp32"]}
    # TensorRT calls an unnamed node's layer node_of_<first output>, as the loader names the node.
    assert pinned(ctx, "node_of_r:fp32") == {"node_of_r": ["--layer-precisions node_of_r:fp32"]}
    # The bare name is the first 'dup'; the second is dup_<k>.
    assert pinned(ctx, "dup:fp32") == {"dup": ["--layer-precisions dup:fp32"]}


def test_a_suffixed_name_reaches_the_node_whatever_k_it_got():
    ctx = mixed_context()
    # rlse's further layers are rlse_<k>, k from one counter over the whole network: any k names it.
    assert pinned(ctx, "rlse_17:fp32") == {"rlse": ["--layer-precisions rlse_17:fp32"]}
    # dup_<k> is a layer of either 'dup': both are pinned.
    assert set(pinned(ctx, "dup_9:fp32")) == {"dup", "dup_1"}


def test_patterns_reach_every_layer_they_match_and_the_reason_says_which():
    ctx = mixed_context()
    assert pinned(ctx, "rlse_*:fp32") == {"rlse": ["--layer-precisions rlse_*:fp32 (layers rlse_2, rlse_3)"]}
    assert set(pinned(ctx, "*:fp32")) == {"rl2", "node_of_r", "dup", "dup_1", "rlse"}
    assert pinned(ctx, "*:fp16") == {}


def test_an_exact_name_beats_a_pattern_and_a_later_entry_an_earlier_one():
    ctx = mixed_context()
    assert set(pinned(ctx, "*:fp32,node_of_r:fp16")) == {"rl2", "dup", "dup_1", "rlse"}
    assert pinned(ctx, "rl2:fp32,rl2:fp16") == {}
    # rl2's SQRT layer (rl2_<k>) is still reached by the pattern: the node is pinned
    assert pinned(ctx, "rl2*:fp32,rl2:fp16") == {"rl2": ["--layer-precisions rl2*:fp32 (layer rl2_0)"]}


def test_overlapping_patterns_the_most_specific_decides_and_a_note_says_trtexec_did_not():
    ctx = mixed_context()
    specs = parse_spec("*:fp16,rlse*:fp32")
    pins = layer_pins(ctx.model, specs, renamed=ctx.renamed)
    assert list(pins.reasons) == ["rlse"]
    assert pins.notes == ("3 layer(s) ('rlse', 'rlse_2', 'rlse_3') match 'rlse*:fp32' and '*:fp16': trtexec "
                          "took either (it looks patterns up in an unordered map); 'rlse*:fp32', the most "
                          "specific, decides here",)


def test_output_types_pin_too():
    ctx = mixed_context()
    assert pinned(ctx, "rl2:fp16", output_types="rl2:fp32") == {"rl2": ["--layer-output-types rl2:fp32"]}


def test_a_name_that_matches_nothing_names_the_nearest_layers():
    ctx = mixed_context()
    with pytest.raises(UsageError) as raised:
        pinned(ctx, "rl2:fp32,rlse_exp:fp32")
    assert str(raised.value) == ("--layer-precisions 'rlse_exp:fp32': no layer is called 'rlse_exp' in the "
                                 "model (nearest: rlse)")
    with pytest.raises(UsageError, match=re.escape("the pattern 'node_of_q*' matches no layer in the model "
                                                   "(nearest: node_of_r)")):
        pinned(ctx, "node_of_q*:fp32")
    with pytest.raises(UsageError, match="a layer in bf16 cannot be written"):
        pinned(ctx, "rl2:bf16")  # an FP16 run


# --- the round trip with the flags the tool writes ----------------------------------------------------


@pytest.mark.parametrize("fp32", [
    ["rl2", "node_of_r", "dup", "dup_1", "rlse"],
    ["dup_1"],                # the second 'dup' alone: written as the pattern dup_*
    ["rl2", "rlse"],          # split ops: name plus name_*
    ["node_of_r", "dup"],
])
def test_the_flags_written_for_a_plan_read_back_as_its_fp32_nodes(fp32, tmp_path):
    ctx = mixed_context()
    plan = uniform_plan(list(ctx.node_ops), Precision.FP16, Reason("default", "test")).with_fp32(fp32)
    flags = trt_flags(ctx.model, plan, version=V("10.11"), renamed=ctx.renamed)
    spec = next(a for a in flags.weakly_typed_args() if a.startswith("--layerPrecisions="))
    expected = flags_by_release(ctx.model, plan, renamed=ctx.renamed).pinned
    assert set(pinned(ctx, spec.partition("=")[2])) == set(expected) == set(fp32)
    # The whole flags file, every release's line and the Polygraphy lines read together: the same set.
    text = trt_flags_text(ctx.model, plan, RunArgs("model.onnx", "model.fp16.onnx"), renamed=ctx.renamed)
    runnable = [line for line in text.splitlines() if line.startswith(("trtexec --onnx=model.onnx ",
                                                                       "polygraphy convert model.onnx "))]
    # rl2's x*x layer has no name: no flag holds it, so no line that builds the original is offered
    assert bool(runnable) == ("rl2" not in fp32)
    path = tmp_path / "flags.txt"
    path.write_text(text.replace("# (not the plan measured) ", ""))
    pins = layer_pins(ctx.model, read_spec_file(str(path)), renamed=ctx.renamed)
    assert set(pins.reasons) == set(fp32)


def test_a_build_script_is_read_with_its_continuations_and_comments(tmp_path):
    script = tmp_path / "build.sh"
    script.write_text("#!/bin/sh\n# --layerPrecisions=commented:fp32\n"
                      "trtexec --onnx=m.onnx --fp16 --precisionConstraints=obey \\\n"
                      "    --layerPrecisions=rl2:fp32,'dup':fp16 --layerOutputTypes=rlse:fp32+fp32\n"
                      "polygraphy convert m.onnx --fp16 --layer-precisions node_of_r:float32 -o m.engine\n")
    specs = read_spec_file(str(script))
    assert [(s.layer, s.precision, s.source) for s in specs] == [
        ("rl2", "fp32", f"{script}: --layerPrecisions"), ("dup", "fp16", f"{script}: --layerPrecisions"),
        ("rlse", "fp32", f"{script}: --layerOutputTypes"),
        ("node_of_r", "fp32", f"{script}: --layer-precisions"),
    ]
    empty = tmp_path / "empty.sh"
    empty.write_text("trtexec --onnx=m.onnx --fp16\n")
    with pytest.raises(UsageError,
                       match="no --layerPrecisions, --layerOutputTypes or --layer-precisions in it"):
        read_spec_file(str(empty))
    with pytest.raises(UsageError, match="--layer-precisions-file .*missing.sh: no such file$"):
        tuple(LayerFlags(file=str(tmp_path / "missing.sh")).specs())


# --- the command line -----------------------------------------------------------------------------------


def _value_types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    return {v.name: v.type.tensor_type.elem_type for v in list(g.input) + list(g.output) + list(g.value_info)}


def _computes_in(model: onnx.ModelProto, node_name: str) -> int:
    """The type a node of the written model reads its float inputs in."""
    types = _value_types(model)
    node = next(n for n in model.graph.node if n.name == node_name)
    return {types[i] for i in node.input
            if i in types and types[i] in (TensorProto.FLOAT, TensorProto.FLOAT16)}.pop()


@pytest.fixture
def mixed_path(save):
    return save(mixed_model())


def test_convert_pins_the_layers_of_a_trtexec_spec_exactly(mixed_path, tmp_path, capsys):
    out, plan = str(tmp_path / "out.onnx"), str(tmp_path / "plan.json")
    assert main(["convert", mixed_path, "-o", out, "--mode", "all-fp16", "--save-plan", plan,
                 "--layerPrecisions=rlse*:fp32,node_of_r:fp32"]) == 0
    written = onnx.load(out)
    onnx.checker.check_model(written, full_check=True)
    assert _computes_in(written, "rlse") == _computes_in(written, "node_of_r") == TensorProto.FLOAT
    assert _computes_in(written, "rl2") == _computes_in(written, "dup") == TensorProto.FLOAT16
    saved = json.load(open(plan))["nodes"]
    assert [n for n, d in saved.items() if d["precision"] == "fp32"] == ["node_of_r", "rlse"]
    assert saved["rlse"]["reasons"][-1] == {
        "source": "user", "detail": "--layer-precisions rlse*:fp32 (layers rlse, rlse_2, rlse_3)"}
    assert "FP32 node_of_r (user: --layer-precisions node_of_r:fp32)" in capsys.readouterr().out


def test_polygraphy_spelling_and_a_file_pin_the_same(mixed_path, tmp_path):
    script = tmp_path / "build.sh"
    script.write_text("trtexec --onnx=m.onnx --fp16 --layerPrecisions=rlse_*:fp32\n")
    plans = []
    for i, args in enumerate((["--layer-precisions", "rlse:float32", "node_of_r:float32"],
                              ["--layer-precisions", "node_of_r:fp32", "--layer-precisions-file",
                               str(script)])):
        plan = str(tmp_path / f"plan{i}.json")
        assert main(["convert", mixed_path, "-o", str(tmp_path / f"out{i}.onnx"), "--mode", "all-fp16",
                     "--save-plan", plan, *args]) == 0
        plans.append({n for n, d in json.load(open(plan))["nodes"].items() if d["precision"] == "fp32"})
    assert plans[0] == plans[1] == {"rlse", "node_of_r"}


@pytest.mark.parametrize("args, said", [
    (["--layerPrecisions=rlse:fp32,rl_2:fp32"],
     "--layer-precisions 'rl_2:fp32': no layer is called 'rl_2' in the model (nearest: rl2, rlse)"),
    (["--layer-precisions", "rl2:int8"], "--layer-precisions 'rl2:int8': a layer in int8 cannot be written"),
])
def test_a_spec_mistake_is_one_line_exit_2_and_nothing_written(mixed_path, tmp_path, capsys, args, said):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    for mode in ("all-fp16", "auto"):
        assert main(["convert", mixed_path, "-o", str(out_dir / "out.onnx"), "--mode", mode, *args]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"onnx-precision: error: {said}")
        assert os.listdir(out_dir) == []


# --- docs/tensorrt.md's migration, end to end ---------------------------------------------------------


def _readme_commands() -> dict[str, list[list[str]]]:
    """The command lines of docs/tensorrt.md's migration section, by program (continuations joined)."""
    text = open(os.path.join(ROOT, "docs", "tensorrt.md"), encoding="utf-8").read()
    section = text.split("## Migrating from TensorRT 10 `--layerPrecisions` to TensorRT 11", 1)[1]
    section = section.split("\n## ")[0]
    commands: dict[str, list[list[str]]] = {}
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            args = shlex.split(line)
            commands.setdefault(args[0], []).append(args[1:])
    return commands


def test_the_readme_migration_runs_and_pins_the_tensorrt_10_layers(tmp_path, monkeypatch, capsys):
    commands = _readme_commands()
    trt10, trt11 = commands["trtexec"]
    spec = next(a for a in trt10 if a.startswith("--layerPrecisions="))
    (convert,) = commands["onnx-precision"]
    assert spec in convert  # the flag is copied as it is
    out = tmp_path / convert[convert.index("-o") + 1]
    assert trt11 == [f"--onnx={os.path.basename(out)}", "--stronglyTyped"]
    convert[convert.index("-o") + 1] = str(out)
    monkeypatch.chdir(ROOT)
    assert main(convert) == 0
    summary = capsys.readouterr().out
    assert "before (your plan, from --layer-precisions): pass" in summary
    written = onnx.load(str(out))
    pins = {"cumsum_h", "cumsum_w", "corner_br", "corner_tr", "corner_bl", "corner_tl", "box_sub_top",
            "box_sub_left", "box_add_corner"}
    report = json.load(open(str(out).replace(".onnx", ".report.json")))
    fp32 = {n for n, d in report["plan"]["nodes"].items() if d["precision"] == "fp32"}
    assert fp32 == pins
    assert report["plan"]["nodes"]["corner_tl"]["reasons"][-1]["detail"] == (
        "--layer-precisions corner_*:fp32 (layer corner_tl)")
    assert _computes_in(written, "box_add_corner") == TensorProto.FLOAT
    assert _computes_in(written, "box_mean") == TensorProto.FLOAT16
    # The page's excerpt of the summary is what the run prints, and so is its mistake.
    page = os.path.join(ROOT, "docs", "tensorrt.md")
    section = open(page, encoding="utf-8").read().split("## Migrating", 1)[1]
    shown = re.search(r"```text\n(.*?)```", section, re.S).group(1).splitlines()
    for line in shown:
        head = line.split("...")[0].replace("nafnet.fp16.onnx", str(out))
        assert any(printed.startswith(head) for printed in summary.splitlines()), line
    assert main(convert[:convert.index("--inputs")] + ["--layerPrecisions=cumsum_x:fp32"]) == 2
    error = capsys.readouterr().err.strip().removeprefix("onnx-precision: error: ")
    assert error in " ".join(section.split())
