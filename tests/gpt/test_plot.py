"""`gpt plot`: loss and learning-rate curves of runs, as a PNG or, without matplotlib, a table."""
import shutil
from pathlib import Path

import pytest

import gpt.plotting
from gpt.cli import main
from gpt.commands.plot import read_curves

RUN = Path(__file__).parent / "fixtures" / "run_before_redesign"


def test_curves_against_steps_tokens_and_time():
    steps, tokens, time = (read_curves(RUN, x) for x in ("steps", "tokens", "time"))
    assert [s for s, _ in steps["val"]] == [0, 3]
    assert [t for t, _ in tokens["val"]] == [0, 3 * 4 * 16]  # batch 4 x block 16 per step
    assert time["val"][0][0] == 0.0 and time["val"][1][0] >= 0.0
    assert steps["train"][0][1] == pytest.approx(3.3951, abs=1e-4) and steps["lr"][0] == (3, 0.00018)


def test_several_runs_on_one_figure(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    shutil.copytree(RUN, tmp_path / "b")
    assert main(["plot", str(RUN), str(tmp_path / "b"), "--x", "tokens", "--out", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_a_message_and_a_table(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gpt.plotting, "pyplot", lambda: None)
    assert main(["plot", str(RUN), "--out", str(tmp_path / "c.png")]) == 0
    out = capsys.readouterr().out
    assert "matplotlib is not installed" in out and "run_before_redesign" in out and "3.3907" in out
    assert not (tmp_path / "c.png").exists()


def test_a_folder_without_metrics_is_named(tmp_path, capsys):
    assert main(["plot", str(tmp_path)]) == 2
    assert "has no metrics.jsonl" in capsys.readouterr().err


def test_the_text_tables_first_row_has_no_train_loss_before_the_first_step(tmp_path, capsys, monkeypatch):
    from gpt.commands.plot import text_table

    curves = {"r": {"val": [(0, 5.0), (100, 3.0)], "train": [(10, 4.5), (100, 3.1)], "lr": [(10, 1e-3), (100, 5e-4)]}}
    rows = text_table(curves, "steps", rows=2).splitlines()[1:]
    assert rows[0].split()[1:] == ["0", "-", "5.0000", "-"]  # step 0: no step has been trained yet
    assert rows[1].split()[1:] == ["100", "3.1000", "3.0000", "5.00e-04"]  # the step just ended, not the nearest


def test_a_run_without_loss_lines_is_warned_of(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gpt.plotting, "pyplot", lambda: None)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "lr": 0.002, "mlm_loss": 4.6}\n')  # a translate run's
    assert main(["plot", str(tmp_path)]) == 0
    assert f"warning: {tmp_path} has no loss lines" in capsys.readouterr().err
    assert main(["plot", str(RUN)]) == 0 and "warning" not in capsys.readouterr().err
