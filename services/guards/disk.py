"""How much free space a run needs on the bucket: the model cache plus the checkpoints it keeps.

A flat figure is wrong both ways (a 200-step run of the default model that keeps every checkpoint saves
8 full checkpoints of ~12 GB each, measured). What a run really writes:

    checkpoint  = weights + AdamW's two moments, all at the training dtype = 3 x weight bytes
                  (transformers 5.17 saves model.safetensors + optimizer.pt; the moments take the
                  parameters' dtype)
    checkpoints = (SAVE_TOTAL_LIMIT + 1) x checkpoint: the Trainer writes the new one before it
                  deletes the oldest
    model cache = the weights once, unless HF_HOME already holds them

The weight bytes come from the files themselves: a local model folder, the model in HF_HOME's cache,
or the Hub's file listing (huggingface_hub). When none answers (offline, a private model without a
token), the size is unknown and only the MIN_FREE_DISK_GB floor applies, and the line says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# The moments live in optimizer.pt next to the weights: 3 copies of the weights in all.
CHECKPOINT_COPIES = 3
HEADROOM = 1.10  # trainer_state, rng, tokenizer, scheduler, dashboards; filesystems round up


@dataclass(frozen=True)
class ModelSize:
    weight_bytes: int  # at the stored dtype
    stored_dtype_bytes: int
    source: str  # how it was found, for the message
    cached: bool  # already in HF_HOME or a local folder: no download to make room for


def _weights_in(folder: Path) -> int:
    total = 0
    for path in folder.rglob("*"):
        if path.name.endswith(WEIGHT_SUFFIXES) and not path.name.startswith("optimizer"):
            try:
                total += path.stat().st_size  # follows the HF cache's symlinks into blobs/
            except OSError:
                continue
    return total


def _stored_dtype_bytes(folder: Path) -> int:
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return 2
    return DTYPE_BYTES.get(str(config.get("torch_dtype") or config.get("dtype") or ""), 2)


def _cached_snapshot(model: str, hf_home: str) -> Path | None:
    snapshots = Path(hf_home) / "hub" / f"models--{model.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*"), key=lambda p: p.stat().st_mtime) if snapshots.is_dir() else []
    return found[-1] if found else None


def _from_hub(model: str, timeout_s: float) -> int | None:
    try:
        from huggingface_hub import HfApi
    except ImportError:
        return None
    try:
        info = HfApi().model_info(model, files_metadata=True, timeout=timeout_s)
    except Exception:  # noqa: BLE001 -- offline, gated, unknown id: all mean "size unknown here"
        return None
    sizes = [f.size or 0 for f in info.siblings or [] if f.rfilename.endswith(WEIGHT_SUFFIXES)]
    # A repo that ships both .safetensors and .bin holds the weights twice; the Trainer loads one.
    safetensors = [
        f.size or 0 for f in info.siblings or [] if f.rfilename.endswith(".safetensors") and f.size is not None
    ]
    return sum(safetensors) or sum(sizes) or None


def model_size(model: str, hf_home: str, hub_timeout_s: float = 10.0) -> ModelSize | None:
    local = Path(model)
    if local.is_absolute() and local.is_dir():
        total = _weights_in(local)
        return ModelSize(total, _stored_dtype_bytes(local), f"files in {model}", True) if total else None
    snapshot = _cached_snapshot(model, hf_home) if hf_home else None
    if snapshot is not None and (total := _weights_in(snapshot)):
        return ModelSize(total, _stored_dtype_bytes(snapshot), f"{model} in {hf_home}", True)
    total = _from_hub(model, hub_timeout_s)
    if total:
        return ModelSize(total, 2, f"{model} on the Hugging Face Hub", False)
    return None


def needed_bytes(size: ModelSize, train_dtype: str, save_total_limit: int) -> tuple[int, str]:
    """(bytes the run needs free, the arithmetic as a phrase for the message)."""
    weights_at_train = size.weight_bytes * DTYPE_BYTES.get(train_dtype, 2) / size.stored_dtype_bytes
    checkpoint = CHECKPOINT_COPIES * weights_at_train
    cache = 0 if size.cached else size.weight_bytes
    need = int(HEADROOM * ((save_total_limit + 1) * checkpoint + cache))
    phrase = (
        f"(SAVE_TOTAL_LIMIT={save_total_limit} + 1 being written) x {checkpoint / 1e9:.1f} GB per checkpoint "
        f"(weights + AdamW moments at {train_dtype}; weights {size.weight_bytes / 1e9:.1f} GB from {size.source})"
        + (f" + {cache / 1e9:.1f} GB model cache" if cache else "")
        + f" + {int(round((HEADROOM - 1) * 100))}% headroom"
    )
    return need, phrase
