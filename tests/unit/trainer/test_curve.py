"""The learning curve (trainer/report/curve.py, trainer/report/curve_png.py): rows from a log history, resume continuity,
curve.csv's exact text, and a PNG that decodes, is deterministic and has the reward line where it belongs.

The Trainer side is simulated as transformers 5.17.0 runs it: `Trainer.log` appends `{**logs, "step": N}` to
`state.log_history`, THEN calls each callback's `on_log` with `logs` in order: the periodic evaluation (first)
adds `eval/*` to `logs`, the curve callback (last) reads it. trainer/report/curve_callback.py does exactly
`keep_in_history` + `Curve.log` + `Curve.write` in `on_log`, and `restart` + `write` in `on_train_begin`,
as the helpers below do.
"""

from __future__ import annotations

import copy
import struct
import subprocess
import zlib

from trainer.report import curve, curve_png
from trainer.report.curve import Curve

BASELINE = {"label": "baseline", "pass_at_1": 0.25, "ci_low": 0.1, "ci_high": 0.45, "tasks": 4}
EVAL_AT_2 = {"eval/pass@1": 0.5, "eval/pass@1_ci_low": 0.3, "eval/pass@1_ci_high": 0.7, "eval/unscorable_frac": 0.0}


def train_log(step: int, reward: float) -> dict:
    """What TRL logs for one optimizer step (trimmed): the harbor figures and TRL's own `kl`."""
    return {"loss": 0.01, "harbor/reward_mean": reward, "harbor/reward_std": 0.5, "kl": step / 1000}


def on_train_begin(c: Curve, history: list[dict], baseline: dict | None) -> None:
    c.restart(history, baseline)  # CurveCallback.on_train_begin: the resumed state is loaded by then
    c.write()


def on_log(history: list[dict], c: Curve, step: int, logs: dict, evals: dict | None = None) -> None:
    history.append({**logs, "step": step})  # Trainer.log
    if evals:
        logs.update(evals)  # PeriodicEval.on_log, first in the callback list
    curve.keep_in_history(history, step, logs)  # CurveCallback.on_log, last
    if c.log(step, logs):
        c.write()


def test_rows_from_a_log_history():
    history = [
        {**train_log(1, 0.25), "step": 1},
        # Step 2: an evaluation ran, and the mismatch keys are there (TRL's kl then is not the figure).
        {
            **train_log(2, 0.5),
            **EVAL_AT_2,
            "mismatch/kl_mean": 0.002,
            "mismatch/logprob_absdiff_max": 0.75,
            "step": 2,
        },
        # Step 3: a window with no scored group logs reward None; NaN is not a figure either.
        {"loss": 0.0, "harbor/reward_mean": None, "harbor/reward_std": float("nan"), "kl": 0.003, "step": 3},
        {"train_runtime": 12.5, "train_loss": 0.01, "step": 3},  # the Trainer's summary log: not a row
    ]
    c = Curve("/nowhere")
    c.restart(history, BASELINE)
    assert c.rows() == [
        {"step": 0, "reward_mean": None, "reward_std": None, "pass_at_1": 0.25, "pass_at_1_ci_low": 0.1,
         "pass_at_1_ci_high": 0.45, "mismatch_kl_mean": None, "mismatch_logprob_absdiff_max": None},
        {"step": 1, "reward_mean": 0.25, "reward_std": 0.5, "pass_at_1": None, "pass_at_1_ci_low": None,
         "pass_at_1_ci_high": None, "mismatch_kl_mean": 0.001, "mismatch_logprob_absdiff_max": None},
        {"step": 2, "reward_mean": 0.5, "reward_std": 0.5, "pass_at_1": 0.5, "pass_at_1_ci_low": 0.3,
         "pass_at_1_ci_high": 0.7, "mismatch_kl_mean": 0.002, "mismatch_logprob_absdiff_max": 0.75},
        {"step": 3, "reward_mean": None, "reward_std": None, "pass_at_1": None, "pass_at_1_ci_low": None,
         "pass_at_1_ci_high": None, "mismatch_kl_mean": 0.003, "mismatch_logprob_absdiff_max": None},
    ]  # fmt: skip
    # No baseline evaluation: no step 0.
    c.restart(history, None)
    assert [r["step"] for r in c.rows()] == [1, 2, 3]


def test_the_evaluation_a_callback_added_survives_into_the_checkpointed_history(tmp_path):
    history: list[dict] = []
    c = Curve(tmp_path)
    on_log(history, c, 1, train_log(1, 0.25))
    on_log(history, c, 2, train_log(2, 0.5), evals=EVAL_AT_2)
    assert history[1]["eval/pass@1"] == 0.5 and history[1]["eval/pass@1_ci_high"] == 0.7
    resumed = Curve(tmp_path)
    resumed.restart(copy.deepcopy(history), None)
    assert resumed.rows() == c.rows() and resumed.rows()[1]["pass_at_1"] == 0.5


def test_every_figure_a_callback_added_survives_into_the_checkpointed_history(tmp_path):
    """Not only the curve's: the served-weights check (trainer/transfer/weights.py) adds its canary gap in `on_log`, and the
    learning gate reads it from trainer_state.json. Before, only the curve's keys were copied and the gate's check of
    the gap read an empty history. A key the Trainer's own log already holds keeps the Trainer's value."""
    history: list[dict] = []
    c = Curve(tmp_path)
    served = {"weights/served_gap_nats": 1.5e-7, "weights/engine_stale": 0, "harbor/reward_mean": 0.99}
    on_log(history, c, 1, train_log(1, 0.25), evals=served)
    assert history == [{**train_log(1, 0.25), "step": 1, "weights/served_gap_nats": 1.5e-7, "weights/engine_stale": 0}]


def test_a_resumed_run_continues_the_curve_with_no_gap_and_no_duplicate_step(tmp_path):
    # Run 1: steps 1..5 logged, the last checkpoint saved at step 3, then killed.
    history: list[dict] = []
    first = Curve(tmp_path, last_step=6)
    on_train_begin(first, history, BASELINE)
    for step in range(1, 6):
        on_log(history, first, step, train_log(step, 0.1 * step), evals=EVAL_AT_2 if step == 2 else None)
        if step == 3:
            checkpoint = copy.deepcopy(history)  # trainer_state.json of checkpoint-3
    assert [r["step"] for r in curve.read_csv(tmp_path / "curve.csv")] == [0, 1, 2, 3, 4, 5]
    # Run 2 resumes from checkpoint-3: steps 4 and 5 are trained again (other rewards), then step 6.
    history = checkpoint
    second = Curve(tmp_path, last_step=6)
    on_train_begin(second, history, BASELINE)
    assert [r["step"] for r in curve.read_csv(tmp_path / "curve.csv")] == [0, 1, 2, 3]
    for step in range(4, 7):
        on_log(history, second, step, train_log(step, 0.9))
    rows = curve.read_csv(tmp_path / "curve.csv")
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4, 5, 6]
    assert [r["reward_mean"] for r in rows] == [None, 0.1, 0.2, 0.30000000000000004, 0.9, 0.9, 0.9]
    assert [r["pass_at_1"] for r in rows] == [0.25, None, 0.5, None, None, None, None]


def test_the_end_of_training_summary_does_not_overwrite_the_last_steps_row(tmp_path):
    """TRL's log() adds the figures of groups that finished after the last step (never trained on) to the Trainer's
    end-of-training summary, which is logged at the last step: the row keeps that step's own training reward."""
    c, history = Curve(tmp_path, last_step=2), []
    on_train_begin(c, history, None)
    on_log(history, c, 1, train_log(1, 0.25))
    on_log(history, c, 2, train_log(2, 0.75))
    summary = {"train_runtime": 81.5, "train_loss": 0.02, "harbor/reward_mean": 0.99, "harbor/reward_std": 0.05}
    on_log(history, c, 2, summary)
    assert [(r["step"], r["reward_mean"], r["reward_std"]) for r in c.rows()] == [(1, 0.25, 0.5), (2, 0.75, 0.5)]
    # A resume rebuilds the rows from log_history, where the Trainer appended the summary too: the same rows.
    rebuilt = Curve(tmp_path, last_step=2)
    rebuilt.restart(history, None)
    assert rebuilt.rows() == c.rows()


def test_curve_csv_exact_text(tmp_path):
    history: list[dict] = []
    c = Curve(tmp_path)
    on_train_begin(c, history, BASELINE)
    on_log(history, c, 1, train_log(1, 0.125))
    mismatch = {"mismatch/kl_mean": 0.5, "mismatch/logprob_absdiff_max": 2.0}
    on_log(history, c, 2, {**train_log(2, 1.25), **mismatch}, EVAL_AT_2)
    assert (tmp_path / "curve.csv").read_text() == (
        "step,reward_mean,reward_std,pass_at_1,pass_at_1_ci_low,pass_at_1_ci_high,mismatch_kl_mean,"
        "mismatch_logprob_absdiff_max\n"
        "0,,,0.25,0.1,0.45,,\n"
        "1,0.125,0.5,,,,0.001,\n"
        "2,1.25,0.5,0.5,0.3,0.7,0.5,2.0\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.csv", "curve.png"]  # no temp file left


def test_the_table_the_learning_test_prints(tmp_path, capsys):
    history: list[dict] = []
    c = Curve(tmp_path)
    on_train_begin(c, history, BASELINE)
    on_log(history, c, 1, train_log(1, 0.125))
    on_log(history, c, 2, {**train_log(2, 0.5), "mismatch/logprob_absdiff_max": 0.75}, EVAL_AT_2)
    expected = (
        "  step | reward mean ± std | pass@1 [CI]           | mismatch kl / max|Δlogp|\n"
        "     0 |                 - | 0.250 [0.100, 0.450]  | -\n"
        "     1 |     0.125 ± 0.500 | -                     | 0.001 / -\n"
        "     2 |     0.500 ± 0.500 | 0.500 [0.300, 0.700]  | 0.002 / 0.75\n"
    )
    assert curve.table(c.rows()) + "\n" == expected
    assert curve.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out == expected
    assert curve.main([str(tmp_path / "missing")]) == 1
    assert "no " in capsys.readouterr().err


def decode(png: bytes) -> tuple[dict, list[tuple[int, int, int]], list[bytes]]:
    """(IHDR fields, palette, pixel rows of palette indices), checking the signature, every CRC and filters."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        tag, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(tag + data), tag
        chunks.append((tag, data))
        pos += 12 + length
    assert [t for t, _ in chunks] == [b"IHDR", b"PLTE", b"IDAT", b"IEND"]
    w, h, depth, colour, comp, filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, colour, comp, filt, interlace) == (8, 3, 0, 0, 0)
    plte = chunks[1][1]
    palette = [tuple(plte[i : i + 3]) for i in range(0, len(plte), 3)]
    raw = zlib.decompress(chunks[2][1])
    assert len(raw) == h * (w + 1)
    rows = [raw[y * (w + 1) : (y + 1) * (w + 1)] for y in range(h)]
    assert {r[0] for r in rows} == {0}  # filter type None on every row
    return {"width": w, "height": h}, palette, [r[1:] for r in rows]


def colour(png: bytes, x: int, y: int) -> tuple[int, int, int]:
    _, palette, rows = decode(png)
    return palette[rows[y][x]]


WHITE, REWARD, PASS, BASELINE_GREEN = (255, 255, 255), (31, 119, 180), (255, 127, 14), (44, 160, 44)


def rows_of(*pairs) -> list[dict]:
    return [{"step": s, **dict.fromkeys(curve.COLUMNS), "reward_mean": r} for s, r in pairs]


def test_png_is_valid_and_deterministic(tmp_path):
    rows = rows_of((1, 0.2), (2, 0.4), (3, 0.5))
    rows[1].update(pass_at_1=0.5, pass_at_1_ci_low=0.25, pass_at_1_ci_high=0.75)
    png = curve_png.render(rows, 4)
    header, palette, pixels = decode(png)
    assert header == {"width": 640, "height": 360} and len(pixels) == 360 and len(palette) == 6
    assert png == curve_png.render(copy.deepcopy(rows), 4)
    rows[2]["reward_mean"] = 0.6
    assert png != curve_png.render(rows, 4)
    (tmp_path / "c.png").write_bytes(png)
    described = subprocess.run(["file", str(tmp_path / "c.png")], capture_output=True, text=True, check=True).stdout
    assert "PNG image data, 640 x 360, 8-bit colormap, non-interlaced" in described


def test_the_reward_line_evaluations_and_baseline_are_where_expected():
    rows = rows_of((1, 0.5), (3, 0.5), (4, 1.0))
    rows.insert(0, {"step": 0, **dict.fromkeys(curve.COLUMNS), "pass_at_1": 0.25})
    rows[2].update(pass_at_1=0.75, pass_at_1_ci_low=0.5, pass_at_1_ci_high=1.0)  # step 3
    png = curve_png.render(rows, 4)
    # Plot area x 44..624 for steps 0..4 (145 px a step), y 330..14 for 0..1 (316 px).
    assert (curve_png.x_of(2, 4), curve_png.y_of(0.5)) == (334, 172)
    assert colour(png, 334, 172) == REWARD  # between steps 1 and 3, on the flat 0.5 segment
    assert colour(png, 334, 150) == WHITE and colour(png, 334, 200) == WHITE
    # Halfway up the rise from (479, 172) to (624, 14): y 93, x 551.5, inside the 2x2 pen either way it rounds.
    assert colour(png, 552, 93) == REWARD
    assert colour(png, 44 + 435, curve_png.y_of(0.75)) == PASS  # step 3's pass@1 square
    assert colour(png, 479, curve_png.y_of(0.6)) == PASS  # its CI bar, inside 0.5..1.0
    assert colour(png, 479, curve_png.y_of(0.4)) == WHITE  # below the CI
    assert colour(png, 44 + 2, curve_png.y_of(0.25)) == BASELINE_GREEN  # the baseline at step 0
    assert colour(png, 44, 200) == (0, 0, 0)  # the y axis


def test_x_ticks_stay_about_ten():
    assert [curve_png.tick_every(n) for n in (1, 10, 11, 20, 21, 50, 51, 1000)] == [1, 1, 2, 2, 5, 5, 10, 100]
