"""Time reading TensorRT 10's per-layer flags back into pins on a long model (issue 30, item 13).

    python scripts/bench_layer_precisions.py                   # 20 000 nodes, 20 000 one-star patterns
    python scripts/bench_layer_precisions.py --nodes 5000 --patterns 5000

Builds a chain of ``--nodes`` Relu/Sigmoid nodes named ``block<i>/relu`` and ``block<i>/act`` (an
exporter's names), and a ``--layerPrecisions`` value of ``--patterns`` entries with one ``*`` each, a
mix of the forms a build script holds: ``block<i>/*`` (prefix), ``*<i>/act`` (suffix) and
``block<i>*act`` (both), every fourth one asking fp16, the rest fp32. Prints the seconds of
:func:`onnx_precision.trt.layer_precisions.layer_pins` (the layer names of every release included,
measured apart as ``names``) and how many nodes it pinned.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def chain(nodes: int):
    """x -> Relu -> Sigmoid -> Relu -> ... (``nodes`` nodes), named as an exporter names blocks."""
    from onnx import TensorProto, helper

    made = []
    previous = "x"
    for i in range(nodes):
        op, name = ("Relu", f"block{i // 2}/relu") if i % 2 == 0 else ("Sigmoid", f"block{i // 2}/act")
        made.append(helper.make_node(op, [previous], [f"t{i}"], name=name))
        previous = f"t{i}"
    graph = helper.make_graph(made, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def patterns(count: int, blocks: int) -> str:
    """``count`` one-star entries over ``blocks`` blocks: prefixes, suffixes and both, mixed."""
    forms = ("block{b}/*", "*k{b}/act", "block{b}*act")
    entries = []
    for i in range(count):
        block = (i * 7919) % blocks  # spread over the model, not only its first blocks
        precision = "fp16" if i % 4 == 3 else "fp32"
        entries.append(forms[i % 3].format(b=block) + ":" + precision)
    return ",".join(entries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--patterns", type=int, default=20_000)
    args = parser.parse_args()

    from onnx_precision.trt.layer_precisions import _ModelLayers, layer_pins, parse_spec

    model = chain(args.nodes)
    specs = parse_spec(patterns(args.patterns, args.nodes // 2))
    start = time.perf_counter()
    _ModelLayers(model, ())
    names = time.perf_counter() - start
    start = time.perf_counter()
    pins = layer_pins(model, specs)
    seconds = time.perf_counter() - start
    print(f"{args.nodes} nodes, {len(specs)} patterns: layer_pins {seconds:.2f} s (names {names:.2f} s), "
          f"{len(pins.reasons)} nodes pinned, {len(pins.notes)} notes")


if __name__ == "__main__":
    main()
