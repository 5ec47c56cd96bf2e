"""convert -q's one line says what changes what its verdict means, as check -q's does (675504d): the target
where it is not generic, and synthetic data where no --inputs were given."""

from __future__ import annotations

from pathlib import Path

from onnx_precision.cli import main

MODELS = Path(__file__).resolve().parent.parent / "models"
MODEL, DATA = str(MODELS / "l2_normalize.onnx"), str(MODELS / "l2_normalize.npz")


def test_convert_q_says_synthetic_data_and_the_target_as_check_q_does(tmp_path, capsys):
    # before: "M -> O: passed; worst y: ..." with no word of the made-up data nor of webgpu
    out = str(tmp_path / "o.onnx")
    assert main(["convert", MODEL, "-o", out, "--target", "webgpu", "-q"]) == 0
    assert capsys.readouterr().out == (f"{MODEL} -> {out}: passed under webgpu on synthetic data (no "
                                       "--inputs); worst y: rel RMS err 0.0003429; FP16: 4/4 nodes (100.0%), "
                                       "100.0% of estimated FLOPs\n")
    assert main(["check", MODEL, out, "-q"]) == 0  # check's words for the same run
    assert capsys.readouterr().out.startswith(f"{out} against {MODEL}: passed under webgpu (recorded in the "
                                              f"candidate) on synthetic data (no --inputs); worst y: rel RMS "
                                              f"err 0.0003429; ")
    assert main(["convert", MODEL, "-o", out, "--inputs", DATA, "-q"]) == 0  # generic, given data: as before
    assert capsys.readouterr().out.startswith(f"{MODEL} -> {out}: passed; worst y: rel RMS err ")
