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


class _Axes:
    """Records what `gpt plot` draws, standing in for matplotlib (which the tests may lack)."""

    def __init__(self):
        self.lines = []

    def plot(self, xs, ys, **style):
        self.lines.append((list(xs), list(ys), style))

    def __getattr__(self, name):  # set_ylabel, legend, ...
        return lambda *args, **kwargs: None


class _Pyplot:
    def subplots(self, *args, **kwargs):
        self.loss, self.lr = _Axes(), _Axes()
        return type("Fig", (), {"tight_layout": lambda self: None})(), (self.loss, self.lr)


@pytest.fixture
def drawn(monkeypatch):
    plt = _Pyplot()
    monkeypatch.setattr(gpt.plotting, "pyplot", lambda: plt)
    monkeypatch.setattr(gpt.plotting, "save_figure", lambda fig, path, plt: Path(path))
    return plt


def test_runs_of_the_same_folder_name_are_told_apart_and_each_warning_names_its_own_run(tmp_path, capsys, drawn):
    shutil.copytree(RUN, tmp_path / "A" / "exp")
    (tmp_path / "B" / "exp").mkdir(parents=True)
    (tmp_path / "B" / "exp" / "metrics.jsonl").write_text('{"step": 1, "lr": 0.002, "mlm_loss": 4.6}\n')
    runs = [str(tmp_path / "A" / "exp"), str(tmp_path / "B" / "exp")]
    assert main(["plot", *runs, "--out", str(tmp_path / "c.png")]) == 0
    assert [style["label"] for _, _, style in drawn.loss.lines] == ["A/exp train", "A/exp val"]
    err = capsys.readouterr().err
    assert f"warning: {runs[1]} has no loss lines" in err and runs[0] not in err


def test_run_labels_add_parent_folders_only_while_names_clash(tmp_path):
    from gpt.commands.plot import run_labels

    assert run_labels(["runs/a/exp", "runs/b/exp", "x/y"]) == ["a/exp", "b/exp", "y"]
    assert run_labels(["p/q/exp", "r/q/exp", "exp2"]) == ["p/q/exp", "r/q/exp", "exp2"]
    twice = run_labels([str(tmp_path / "r"), str(tmp_path / "r") + "/"])
    assert twice == [f"{(tmp_path / 'r').as_posix()} (1)", f"{(tmp_path / 'r').as_posix()} (2)"]


def test_a_run_of_one_logged_step_shows_a_marker_in_the_learning_rate_panel_too(tmp_path, drawn):
    assert main(["plot", str(RUN), "--out", str(tmp_path / "c.png")]) == 0
    (train, *_), (lr,) = drawn.loss.lines, drawn.lr.lines
    assert len(lr[0]) == 1 and train[2]["marker"] == "." and lr[2]["marker"] == "."


@pytest.mark.parametrize("name", ["c.png.txt", "c.jpg"])
def test_an_out_file_of_no_figure_format_is_refused_before_writing(tmp_path, capsys, name):
    assert main(["plot", str(RUN), "--out", str(tmp_path / name)]) == 2
    assert "a figure is written as .png, .svg, .pdf" in capsys.readouterr().err
    assert not (tmp_path / name).exists()


@pytest.mark.parametrize("name", ["c.png", "c.SVG", "c.pdf", "c"])
def test_a_figure_is_written_in_the_format_its_suffix_names(tmp_path, name):
    """save_figure passes the suffix's format to savefig (it wrote PNG bytes into c.pdf before)."""
    seen = {}

    class Fig:
        def savefig(self, tmp, dpi, format, **kwargs):
            seen["format"] = format
            Path(tmp).write_bytes(b"figure")

    closed = []
    out = gpt.plotting.save_figure(Fig(), tmp_path / name, type("Plt", (), {"close": lambda self, f: closed.append(f)})())
    want = name.split(".")[-1].lower() if "." in name else "png"  # no suffix: PNG, as before
    assert seen["format"] == want and out.read_bytes() == b"figure" and closed
