"""Resume from the newest checkpoint that is complete and loads (stack/resume.py): a broken newer one is named
in one line and passed over; a run whose every checkpoint is broken is refused in one line, never trained again
from step 0 under its old name. The safetensors files are written here byte for byte by the format's spec (an
8-byte little-endian header length, a JSON header, the data): the host venv has no safetensors or torch."""

import json
import struct

import pytest

from stack.env import EnvError
from stack.readers import trainer as config
from stack.resume import pick, problem


def weights(path, *, cut: int = 0):
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    data = struct.pack("<Q", len(header)) + header + b"\0" * 16
    path.write_bytes(data[: len(data) - cut])


def save(run_dir, step, *, state: str | None = None, with_weights: bool = True):
    """A checkpoint as the Trainer leaves it: weights, then trainer_state.json last."""
    d = run_dir / f"checkpoint-{step}"
    d.mkdir(parents=True)
    if with_weights:
        weights(d / "model.safetensors")
    (d / "trainer_state.json").write_text(json.dumps({"global_step": step}) if state is None else state)
    return d


def test_the_newest_complete_checkpoint_is_chosen(tmp_path):
    save(tmp_path, 2), save(tmp_path, 10)
    got = pick(tmp_path)
    assert (got.path.name, got.passed_over) == ("checkpoint-10", [])


def test_a_corrupt_newest_checkpoint_is_named_and_passed_over(tmp_path):
    save(tmp_path, 10)
    save(tmp_path, 20, state='{"global_step": 2', with_weights=False)
    got = pick(tmp_path)
    assert got.path.name == "checkpoint-10"
    assert got.passed_over == [
        f"checkpoint checkpoint-20 of {tmp_path.name} is passed over: its trainer_state.json does not parse "
        "(JSONDecodeError: Expecting ',' delimiter: line 1 column 18 (char 17)); resuming from checkpoint-10 "
        "(remove checkpoint-20 to silence this)"
    ]


@pytest.mark.parametrize(
    ("breakage", "why"),
    [
        ("no-state", "it has no trainer_state.json (its save did not finish)"),
        ("no-step", "its trainer_state.json states no global_step"),
        ("no-weights", "it holds no model weights (model.safetensors)"),
        ("cut-weights", "model.safetensors is cut off (78 bytes of 86)"),
        ("missing-shard", "model-00002-of-00002.safetensors, listed in model.safetensors.index.json, is missing"),
    ],
)
def test_each_kind_of_broken_checkpoint(tmp_path, breakage, why):
    d = save(tmp_path, 5)
    if breakage == "no-state":
        (d / "trainer_state.json").unlink()
    elif breakage == "no-step":
        (d / "trainer_state.json").write_text("{}")
    elif breakage == "no-weights":
        (d / "model.safetensors").unlink()
    elif breakage == "cut-weights":
        weights(d / "model.safetensors", cut=8)
    else:
        (d / "model.safetensors").rename(d / "model-00001-of-00002.safetensors")
        (d / "model.safetensors.index.json").write_text(
            json.dumps(
                {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
            )
        )
    assert problem(d) == why


def test_every_checkpoint_broken_is_refused_not_restarted_from_step_0(tmp_path):
    run = tmp_path / "my-run"
    save(run, 10, with_weights=False)
    save(run, 20, state="{", with_weights=False)
    with pytest.raises(EnvError) as err:
        pick(run)
    assert str(err.value) == (
        "RUN_NAME=my-run cannot resume: its newest checkpoint checkpoint-20 is broken, its trainer_state.json does "
        "not parse (JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)) "
        f"(and 1 older, none of which loads either), and starting it from step 0 would lose its position: restore a "
        f"checkpoint into {run}, or start a fresh run (leave RUN_NAME empty)"
    )


def test_a_run_without_checkpoints_starts_at_step_0(tmp_path):
    assert pick(tmp_path / "new").path is None


def test_settings_resume_from_uses_the_same_choice(tmp_path):
    s = config.from_env({"RUN_NAME": "my-run", "BUCKET_DIR": str(tmp_path)})
    save(s.run_dir, 10)
    save(s.run_dir, 12, with_weights=False)
    assert s.resume_from().name == "checkpoint-10"
