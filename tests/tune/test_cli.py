"""``stripeml tune`` on the command line: the table, the database commands, errors."""

from __future__ import annotations

from stripeml.cli import main


def test_tune_a_tile_program_then_show_export_import(cache, tmp_path, capsys):
    args = ["tune", "matmul", "--input", "A=32x64", "--input", "B=64x64", "--budget", "10"]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "whole program:" in out.out and "kernels 1/1" in out.err
    assert main(["tune", "--show"]) == 0
    assert "1 entry" in capsys.readouterr().out
    exported = tmp_path / "db.json"
    assert main(["tune", "--export", str(exported)]) == 0
    assert main(["tune", "--import", str(exported)]) == 0
    assert "imported" in capsys.readouterr().out


def test_bad_use_is_an_error_message_not_a_traceback(cache, tmp_path, capsys):
    assert main(["tune", "missing.onnx"]) == 2
    assert main(["tune", "matmul", "--budget", "0"]) == 2
    assert main(["tune"]) == 2
    assert main(["tune", "--show", "matmul"]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    assert main(["tune", "--import", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "not a tuning database export" in err
