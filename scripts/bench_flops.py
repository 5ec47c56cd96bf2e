"""Issue 33 item 1: the estimated FLOPs per op kind, next to a hand formula.

    python scripts/bench_flops.py [--no-real] [--real-dir DIR]

For each model, each op kind: its nodes, the FLOPs :func:`onnx_precision.flops.estimate_flops` gives them
at the first sample's shapes ("static"; and with the sample's feed, where an If branches on an input:
"fed"), the hand figure and how it is made, and the nodes whose cost is unknown. Then the seconds each
estimate took.

* the inline models shaped like the real ones (:mod:`models.compute`): Silero VAD's front end (a Conv in
  an If reading outer-scope weights), a captcha reader's CNN + bidirectional LSTM, GRU and RNN, and the
  LSTM dynamically quantized; the hand formulas written out;
* the examples in ``models/``: each contraction's 2*M*N*K (Conv: 2 x output x C/group x kernel) from the
  shapes onnx's reference evaluator observes on the example's feed, so that the static shapes the
  estimate reads are checked against a run;
* Silero VAD itself (``silero_vad.onnx`` of the ``silero-vad`` wheel, fetched with ``pip download
  --no-deps`` into ``--real-dir`` the first time; ``--no-real`` skips it), 512 samples at 16 kHz: its
  16 kHz STFT Conv, encoder Convs, decoder Conv and LSTM by hand from its weights' shapes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zipfile
from collections.abc import Mapping, Sequence

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bench_precisions import fetch_wheel  # noqa: E402

import models  # noqa: E402
from models import compute  # noqa: E402
from onnx_precision.flops import estimate_flops, unknown_cost  # noqa: E402
from onnx_precision.graph import walk_nodes  # noqa: E402

SILERO = ("silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx")
Hand = Mapping[str, tuple[str, float]]  # op kind -> (the formula, its value)


def _lstm(steps: int, batch: int, directions: int, gates: int, hidden: int, inputs: int) -> float:
    return steps * batch * directions * gates * hidden * (2 * (inputs + hidden) + 3)


def _crnn_hand(kind: str) -> dict[str, tuple[str, float]]:
    gates = compute.GATES.get(kind, 4)
    return {"Conv": ("2 x (32 x 8 x 64) x 1 x 3 x 3", 2 * 32 * 8 * 64 * 9),
            kind: (f"64 steps x 2 dir x {gates} gates x 64 x (2 x (32 + 64) + 3)",
                   _lstm(64, 1, 2, gates, 64, 32)),
            "MatMul": ("2 x 64 x 37 x 128", 2 * 64 * 37 * 128)}


INLINE: tuple[tuple[compute.Example, Hand], ...] = (
    (compute.stft_in_if(), {
        "Conv": ("2 x 32 x 258 x 256 + 2 x 64 x 130 x 128 (both branches; fed sr 16000: the first)",
                 2 * 32 * 258 * 256 + 2 * 64 * 130 * 128),
        "Pad": ("(4096 + 128) + (4096 + 64)", 4224 + 4160)}),
    (compute.crnn("LSTM"), _crnn_hand("LSTM")),
    (compute.crnn("GRU"), _crnn_hand("GRU")),
    (compute.crnn("RNN"), _crnn_hand("RNN")),
    (compute.quantized_lstm(), _crnn_hand("DynamicQuantizeLSTM")),
)


def _by_kind(model: onnx.ModelProto, flops: Mapping[str, float]) -> dict[str, tuple[int, float, int]]:
    """Op kind -> its nodes, their FLOPs, and how many of them count 1 (a node no run computes: in a branch
    the sample does not take, or folded from constants; or one of unknown cost)."""
    ops = {ref.name: ref.node.op_type for ref in walk_nodes(model.graph)}
    kinds: dict[str, tuple[int, float, int]] = {}
    for name, value in flops.items():
        count, total, nominal = kinds.get(ops[name], (0, 0.0, 0))
        kinds[ops[name]] = (count + 1, total + value, nominal + (value == 1.0))
    return kinds


def _estimate(model: onnx.ModelProto, feed: Mapping[str, np.ndarray]) -> tuple[dict, dict, float]:
    shapes = {name: np.shape(value) for name, value in feed.items()}
    static = estimate_flops(model, shapes)
    started = time.perf_counter()
    fed = estimate_flops(model, shapes, feed)
    return static, fed, time.perf_counter() - started


def _observed_hand(model: onnx.ModelProto, feed: Mapping[str, np.ndarray]) -> dict[str, tuple[str, float]]:
    """Each contraction kind's 2*M*N*K from the shapes the reference evaluator observes (main graph)."""
    from onnx.reference import ReferenceEvaluator

    seen = ReferenceEvaluator(model).run(None, dict(feed), intermediate=True)
    assert isinstance(seen, dict)  # intermediate=True: every value by name
    shapes = {name: np.shape(value) for name, value in seen.items()}
    shapes.update({init.name: tuple(init.dims) for init in model.graph.initializer})
    hand: dict[str, tuple[str, float]] = {}
    for node in model.graph.node:
        out, first = shapes.get(node.output[0]), shapes.get(node.input[0]) if node.input else None
        weight = shapes.get(node.input[1]) if len(node.input) > 1 else None
        if out is None or first is None or weight is None:
            continue
        if node.op_type == "MatMul":
            value = 2.0 * np.prod(out) * first[-1]
        elif node.op_type == "Gemm":
            transposed = any(a.name == "transA" and a.i for a in node.attribute)
            value = 2.0 * np.prod(out) * first[0 if transposed else 1]
        elif node.op_type == "Conv":
            value = 2.0 * np.prod(out) * np.prod(weight[1:])
        else:
            continue
        text, total = hand.get(node.op_type, ("2*M*N*K from the observed shapes", 0.0))
        hand[node.op_type] = (text, total + float(value))
    return hand


def _silero(real_dir: str) -> tuple[compute.Example, Hand] | str:
    try:
        wheel = fetch_wheel(SILERO[0], os.path.join(real_dir, "wheels"))
        with zipfile.ZipFile(wheel) as archive:
            model = onnx.load_from_string(archive.read(SILERO[1]))
    except (OSError, KeyError) as e:
        return f"silero_vad: {e}"
    audio = np.random.default_rng(0).uniform(-0.5, 0.5, (1, 512)).astype(np.float32)
    feed: dict[str, np.ndarray] = {"input": audio, "state": np.zeros((2, 1, 128), np.float32),
                                   "sr": np.array(16000, np.int64)}
    # 16 kHz: 512 samples + 64 of context reflected, 3 frames of 258 bins (a 256-sample window, hop 128);
    # encoder: 129 -> 128 (3 frames), -> 64 (stride 2: 2 frames), -> 64 (1), -> 128 (1), kernel 3; decoder:
    # 1 step of a 128-wide LSTM, then a 128 -> 1 Conv
    convs = (2 * 3 * 258 * 256 + 2 * 3 * 128 * 129 * 3 + 2 * 2 * 64 * 128 * 3 + 2 * 64 * 64 * 3
             + 2 * 128 * 64 * 3 + 2 * 128)
    hand = {"Conv": ("2x3x258x256 + 2x3x128x129x3 + 2x2x64x128x3 + 2x64x64x3 + 2x128x64x3 + 2x128 (16 kHz)",
                     convs),
            "LSTM": ("1 step x 4 gates x 128 x (2 x (128 + 128) + 3)", _lstm(1, 1, 1, 4, 128, 128))}
    return models.Example("silero_vad", model, (feed,), ""), hand


def _report(example: compute.Example, hand: Hand) -> None:
    static, fed, seconds = _estimate(example.model, example.feeds[0])
    by_static, by_fed = _by_kind(example.model, static), _by_kind(example.model, fed)
    print(f"\n{example.name}: {sum(static.values()):,.0f} FLOPs static, {sum(fed.values()):,.0f} fed "
          f"({seconds:.2f} s); of unknown cost: {len(unknown_cost(static))} node(s) static, "
          f"{len(unknown_cost(fed))} fed")
    print(f"  {'op':<20} {'nodes':>5} {'static':>13} {'fed':>13} {'by hand':>13}  formula")
    for op in sorted(by_static, key=lambda op: -by_static[op][1]):
        count, value, _ = by_static[op]
        if value <= count and op not in hand:  # shapes' and indices' arithmetic, a node or two of 1 FLOP
            continue
        fed_count, fed_value, nominal = by_fed[op]
        text, figure = hand.get(op, ("", None))
        # the hand formula counts what runs; a node no run computes counts 1 in the estimate
        same = figure is not None and figure in (value, fed_value - nominal)
        mark = "" if figure is None else (f"  ok (+{nominal} node(s) at 1)" if same and nominal else
                                          "  ok" if same else "  DIFFERS")
        shown = "-" if figure is None else f"{figure:,.0f}"
        print(f"  {op:<20} {count:>5} {value:>13,.0f} {fed_value:>13,.0f} {shown:>13}  {text}{mark}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-real", action="store_true", help="skip Silero VAD (no download)")
    parser.add_argument("--real-dir", default="/tmp/onnx-precision-real", help="where wheels are kept")
    args = parser.parse_args(argv)
    for example, hand in INLINE:
        _report(example, hand)
    for name in models.BUILDERS:
        example = models.build(name)
        _report(example, _observed_hand(example.model, example.feeds[0]))
    if not args.no_real:
        silero = _silero(args.real_dir)
        if isinstance(silero, str):
            print(f"\nnot measured: {silero}")
        else:
            _report(*silero)
    return 0


if __name__ == "__main__":
    sys.exit(main())
