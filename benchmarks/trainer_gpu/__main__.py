"""python -m benchmarks.trainer_gpu [--plan gpu|tiny] [--out DIR] [--only SECTION,...]

Sections: sweep (packed length, TRL defaults), variants (checkpointing every-N / off / offload), chunks (log-prob
head tiles), rollouts (chained vs forked at step limits 4-58), compile and compile-more (regional torch.compile),
activation (checkpointing inside the compiled region: selective, MLP or attention only, inductor's memory budget).

Measures TRL AsyncGRPO's loss step on mini-swe-agent-shaped rollouts (see harness.py, trajectories.py) and
prints, per packed length: seconds per step, tokens/s, model TFLOP/s, MFU against a dense bf16 matmul peak
measured in the same run, peak GiB; a memory fit (fixed GiB + GiB per 1k tokens) per setting; the largest
packed length that fits; and chained vs forked rollouts at agent step limits 4-58.

`--plan tiny` runs the same code on a 2-layer model on CPU (a dry run: numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict

import torch

from . import attention, harness
from .trajectories import chained_sample, forked_samples, rollout_sample, trajectory, trajectory_of_length

DEFAULT_VARIANT = {
    "gc": True,
    "every": 1,
    "offload": False,
    "vocab_chunk": 32768,
    "token_chunk": 4096,
    "compile": None,
    "region": None,  # checkpoint inside the compiled forward: "layer", "mlp" or "attn" (HF checkpointing off)
    "save": None,  # with a region: selective checkpointing, keeping attention and these matmuls (harness.MATMUL_ORDER)
    "budget": None,  # inductor's activation memory budget (fraction), with compile and no checkpointing
}
# Issue 19's settings: all compiled (inductor), all with Hugging Face's checkpointing off. `save` lists the matmul
# outputs a selective checkpoint keeps besides the attention kernel's output (see docs/GPU-BENCHMARK.md for the
# per-token arithmetic behind each choice).
# BENCH_ACTIVATION_ONLY=name,...: run only these settings of the activation section (a follow-up call measures one).
ONLY_ACTIVATION = [n for n in os.environ.get("BENCH_ACTIVATION_ONLY", "").split(",") if n]
ACTIVATION_VARIANTS = {  # in the order they run: the likeliest defaults first, so a cut-short call keeps them
    "sac-attn-qkv-gate": {"region": "layer", "save": ("q", "k", "v", "gate")},
    "sac-attn-gate": {"region": "layer", "save": ("gate",)},
    "budget-0.4": {"budget": 0.4},
    "sac-all-mm": {"region": "layer", "save": harness.MATMUL_ORDER},
    "compile-over-gc": {"region": "layer"},
    "sac-attn": {"region": "layer", "save": ()},
    "ckpt-mlp-only": {"region": "mlp"},
    "ckpt-attn-only": {"region": "attn"},
}


def plan(name: str) -> dict:
    if name == "tiny":
        return {
            "model": "tiny",
            "dtype": "float32",
            "sweep": [("chain", 4096, 1), ("chain", 6144, 1), ("chains", 8192, 2)],
            "variants": {"gc-off": {"gc": False}, "gc-every-2": {"every": 2}},
            "variant_lengths": [4096],
            "chunks": {"vocab-512": {"vocab_chunk": 512}},
            "chunk_length": 4096,
            "step_limits": [2, 4],
            "compiled": {"compile": [4096], "compile-gc-off": [4096]},
            "compile_backend": "eager",  # traces with dynamo; inductor needs a C compiler the CPU image lacks
            "compiled_more": [("compile-gc-every-2", 4096, 1, {"every": 2}), ("compile", 8192, 2, {})],
            "activation": {name: [4096, 6144] for name in ("sac-attn-qkv-gate", "ckpt-mlp-only", "budget-0.4")},
            "steps": (1, 1),
        }
    k = 1024
    return {
        "model": "qwen3-1.7b",
        "dtype": "bfloat16",
        # (kind, packed tokens, chains per row): one chain up to the longest rollout a 58-step limit produces
        # (~64k); beyond it, rows of several 32k rollouts, which is how TRL fills a large token_budget.
        "sweep": [
            ("chain", 8 * k, 1),
            ("chain", 16 * k, 1),
            ("chain", 32 * k, 1),
            ("chain", 64 * k, 1),
            ("chains", 128 * k, 4),
            ("chains", 256 * k, 8),
        ],
        "variants": {
            "gc-offload": {"offload": True},
            "gc-every-4": {"every": 4},
            "gc-every-2": {"every": 2},
            "gc-off": {"gc": False},
        },
        "variant_lengths": [8 * k, 16 * k, 32 * k],
        "chunks": {
            "vocab-16k": {"vocab_chunk": 16384},
            "vocab-64k": {"vocab_chunk": 65536},
            "tokens-8k": {"token_chunk": 8192},
        },
        "chunk_length": 16 * k,
        "step_limits": [4, 8, 12, 24, 58],
        # Regional torch.compile (inductor) of the decoder layers: with checkpointing, then without.
        "compiled": {"compile": [8 * k, 16 * k, 32 * k, 64 * k], "compile-gc-off": [8 * k, 16 * k]},
        "compile_backend": "inductor",
        # The compiled settings between the two above, and the compiled default on rows of several rollouts.
        "compiled_more": [
            ("compile-gc-every-2", 8 * k, 1, {"every": 2}),
            ("compile-gc-every-2", 16 * k, 1, {"every": 2}),
            ("compile-gc-every-2", 32 * k, 1, {"every": 2}),
            ("compile", 128 * k, 4, {}),
            ("compile", 256 * k, 8, {}),
            ("compile", 384 * k, 12, {}),
        ],
        # Issue 19: where activations are kept, all compiled. Two lengths give each setting's GiB per 1k tokens; the
        # candidates for the default get 32k too. The compiled default first, as this call's own baseline.
        "activation": {
            "compile": [8 * k, 16 * k],
            **{name: [8 * k, 16 * k] for name in ACTIVATION_VARIANTS},
            "sac-attn-gate": [8 * k, 16 * k, 32 * k],
            "sac-attn-qkv-gate": [8 * k, 16 * k, 32 * k],
            "ckpt-mlp-only": [8 * k, 16 * k, 32 * k, 64 * k],
        },
        "steps": (1, 2),  # warm-up, timed
    }


class Report:
    def __init__(self, out: str | None, peak_tflops: float | None, shape: dict):
        self.out, self.peak, self.shape = out, peak_tflops, shape
        self.rows: list[dict] = []
        self.meta: dict = {}

    def add(self, section: str, name: str, variant: dict, records, warmup: int, **extra) -> dict:
        row = {"section": section, "name": name, "variant": variant, **extra}
        if isinstance(records, str):
            row["status"] = records
        elif len(records) <= warmup:
            row["status"] = "no timed step"
        else:
            timed = records[warmup:]
            mid = sorted(timed, key=lambda r: r.seconds)[len(timed) // 2]
            flops = harness.model_flops(self.shape, mid)
            row.update(
                status="ok",
                steps=len(timed),
                seconds=statistics.median(r.seconds for r in timed),
                tokens=mid.forwarded_tokens,
                trained=mid.trained_tokens,
                samples=mid.samples,
                peak_gib=max(r.peak_gib for r in records),
                reserved_gib=max(r.reserved_gib for r in records),
                resident_gib=mid.resident_gib,
                optimizer_s=mid.optimizer_s,
                attention_keys=mid.attention_keys,
                model_tflop=flops / 1e12,
                records=[asdict(r) for r in records],
            )
            row["tokens_per_s"] = row["tokens"] / row["seconds"]
            row["tflops"] = flops / row["seconds"] / 1e12
            row["mfu"] = row["tflops"] / self.peak if self.peak else float("nan")
        self.rows.append(row)
        self._print(row)
        self.save()
        return row

    def _print(self, r: dict) -> None:
        if r["status"] != "ok":
            print(f"[{r['section']}] {r['name']:<28} {r['status']}", flush=True)
            return
        print(
            f"[{r['section']}] {r['name']:<28} tokens {r['tokens']:>7} trained {r['trained']:>6} samples "
            f"{r['samples']:>3}  {r['seconds']:7.3f} s  {r['tokens_per_s']:9.0f} tok/s  {r['tflops']:6.1f} TFLOP/s  "
            f"MFU {100 * r['mfu']:5.1f}%  peak {r['peak_gib']:6.2f} GiB (reserved {r['reserved_gib']:6.2f})",
            flush=True,
        )

    def save(self) -> None:
        if self.out:
            with open(os.path.join(self.out, "bench-trainer.json"), "w") as f:
                json.dump({"meta": self.meta, "rows": self.rows}, f, indent=1, default=str)


def fit(rows: list[dict]) -> tuple[float, float] | None:
    """Least-squares peak GiB = fixed + slope * tokens/1000 over the rows that ran."""
    pts = [(r["tokens"] / 1000, r["peak_gib"]) for r in rows if r["status"] == "ok"]
    if len({x for x, _ in pts}) < 2:
        return None
    mx, my = statistics.fmean(x for x, _ in pts), statistics.fmean(y for _, y in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return my - slope * mx, slope


_compiled_as: list = [None]


def apply(bench, variant: dict) -> None:
    variant = {**DEFAULT_VARIANT, **variant}
    region = variant["region"]
    harness.set_checkpointing(bench, variant["gc"] and not region, variant["every"], variant["offload"])
    harness.set_logprob_chunks(variant["vocab_chunk"], variant["token_chunk"])
    key = (variant["compile"], region, variant["save"], variant["budget"])
    if key != _compiled_as[0]:
        # Dynamo keeps compiled graphs across calls; another region or budget must trace afresh, while the lengths of
        # one setting reuse its graph (dynamic shapes).
        torch._dynamo.reset()
        _compiled_as[0] = key
    harness.set_memory_budget(variant["budget"])
    harness.set_compiled_checkpoint(bench, region, variant["save"])
    harness.set_layer_compile(bench, variant["compile"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.trainer_gpu", description=__doc__.split("\n\n")[1])
    p.add_argument("--plan", choices=["gpu", "tiny"], default="gpu" if torch.cuda.is_available() else "tiny")
    p.add_argument("--out", default=os.environ.get("OUT") or ".")
    p.add_argument(
        "--only",
        default="sweep,variants,chunks,rollouts,compile,compile-more,activation",
        help="comma-separated sections to run (default: all)",
    )
    a = p.parse_args(argv)
    cfg = plan(a.plan)
    sections = set(a.only.split(","))
    os.makedirs(a.out, exist_ok=True)
    t_start = time.time()
    cuda = torch.cuda.is_available()
    if a.plan == "gpu" and not cuda:
        print("bench: --plan gpu needs a CUDA device; use --plan tiny for a CPU dry run", file=sys.stderr)
        return 2

    import transformers
    import trl

    kernel = attention.install()
    errors = attention.check("cuda" if cuda else "cpu")
    print(f"attention: {kernel}; tree attention vs path-mask reference, relative error {errors}", flush=True)
    peak = harness.matmul_peak_tflops() if cuda else None
    if peak:
        print(f"dense bf16 matmul peak (8192^3, measured now): {peak:.0f} TFLOP/s", flush=True)
    bench = harness.build(cfg["model"], cfg["dtype"])
    shape, vocab = bench.shape, bench.shape["vocab_size"]
    report = Report(a.out, peak, shape)
    report.meta = {
        "device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
        "device_total_gib": torch.cuda.get_device_properties(0).total_memory / 2**30 if cuda else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "python": platform.python_version(),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "attention": kernel,
        "attention_check": errors,
        "matmul_peak_tflops": peak,
        "plan": a.plan,
        "model": cfg["model"],
        "dtype": cfg["dtype"],
        "shape": shape,
        "default_variant": DEFAULT_VARIANT,
        "setup_s": round(time.time() - t_start, 1),
    }
    warm, timed = cfg["steps"]

    def chain_rollouts(tokens):
        def make(i):  # turn sizes fixed by the seed, ids fresh per rollout so TRL's trie cannot fold them
            ids, mask = chained_sample(trajectory_of_length(seed=tokens, tokens=tokens, vocab=vocab, ids_seed=i))
            return [rollout_sample(ids, mask, group_id=i, seed=i, vocab=vocab)]

        return make

    def measure_length(section, name, variant, tokens, per_row, steps=timed, group=None):
        apply(bench, variant)
        chain = tokens // per_row
        recs = harness.run(bench, chain_rollouts(chain), token_budget=tokens, steps=warm + steps)
        return report.add(
            section,
            name,
            variant,
            recs,
            warm,
            packed_target=tokens,
            chains_per_row=per_row,
            group=group or name.split(" ")[0],
        )

    if "sweep" in sections:
        for kind, tokens, per_row in cfg["sweep"]:
            row = measure_length(
                "sweep",
                f"{kind} {tokens // 1024}k" + (f" ({per_row}x{tokens // per_row // 1024}k)" if per_row > 1 else ""),
                DEFAULT_VARIANT,
                tokens,
                per_row,
                steps=timed if per_row == 1 else 1,
                group="default",
            )
            if row["status"] == "OOM":
                break

    if "variants" in sections:
        for vname, change in cfg["variants"].items():
            for tokens in cfg["variant_lengths"]:
                row = measure_length("variants", f"{vname} {tokens // 1024}k", {**DEFAULT_VARIANT, **change}, tokens, 1)
                if row["status"] == "OOM":
                    break

    if "chunks" in sections:
        for cname, change in cfg["chunks"].items():
            measure_length(
                "chunks",
                f"{cname} {cfg['chunk_length'] // 1024}k",
                {**DEFAULT_VARIANT, **change},
                cfg["chunk_length"],
                1,
            )

    if "rollouts" in sections:
        from trl.experimental.async_grpo.packing import TreeRow

        apply(bench, DEFAULT_VARIANT)
        for steps in cfg["step_limits"]:

            def chained(i, steps=steps):
                ids, mask = chained_sample(trajectory(seed=steps, steps=steps, vocab=vocab, ids_seed=i))
                return [rollout_sample(ids, mask, group_id=i, seed=i, vocab=vocab)]

            def forked(i, steps=steps):
                t = trajectory(seed=steps, steps=steps, vocab=vocab, ids_seed=i)
                return [
                    rollout_sample(ids, mask, group_id=i, seed=i * 1000 + k, vocab=vocab)
                    for k, (ids, mask) in enumerate(forked_samples(t, vocab))
                ]

            one_chain = chained(0)[0]
            forks = forked(0)
            trie = TreeRow()
            for s in forks:
                trie.add({"input_ids": s.input_ids, "completion_mask": s.completion_mask, "group_id": 0})
            raw = sum(len(s.input_ids) for s in forks)
            # Budget = exactly one rollout, so every step trains one whole rollout in either form.
            for form, make, budget in (
                ("chained", chained, len(one_chain.input_ids)),
                ("forked", forked, len(trie.tokens)),
            ):
                n_timed = 1 if (form == "forked" and steps >= 24) else timed
                recs = harness.run(bench, make, token_budget=budget, steps=warm + n_timed)
                report.add(
                    "rollouts",
                    f"{form} step-limit {steps}",
                    DEFAULT_VARIANT,
                    recs,
                    warm,
                    step_limit=steps,
                    form=form,
                    raw_tokens=len(one_chain.input_ids) if form == "chained" else raw,
                    samples_per_rollout=1 if form == "chained" else len(forks),
                )

    if "compile" in sections:
        backend = cfg["compile_backend"]
        for tokens in cfg["compiled"]["compile-gc-off"]:  # same-machine baseline for the comparison
            measure_length("compile", f"eager {tokens // 1024}k", DEFAULT_VARIANT, tokens, 1)
        for cname, lengths in cfg["compiled"].items():
            variant = {**DEFAULT_VARIANT, "compile": backend, "gc": cname != "compile-gc-off"}
            for n, tokens in enumerate(lengths):
                t0 = time.time()
                # The first length pays the compilation: two warm-up steps there, so it stays out of the median.
                row = measure_length(
                    "compile", f"{cname} {tokens // 1024}k", variant, tokens, 1, steps=timed + (1 if n == 0 else 0)
                )
                row["wall_s"] = round(time.time() - t0, 1)
                if row["status"] == "OOM":
                    break
        apply(bench, DEFAULT_VARIANT)

    if "compile-more" in sections:
        backend = cfg["compile_backend"]
        for n, (cname, tokens, per_row, change) in enumerate(cfg["compiled_more"]):
            variant = {**DEFAULT_VARIANT, "compile": backend, **change}
            label = f"{cname} {tokens // 1024}k" + (f" ({per_row}x{tokens // per_row // 1024}k)" if per_row > 1 else "")
            row = measure_length(
                "compile",
                label,
                variant,
                tokens,
                per_row,
                steps=(timed + 1 if n == 0 else timed) if per_row == 1 else 1,
            )
            if row["status"] == "OOM":
                break
        apply(bench, DEFAULT_VARIANT)

    if "activation" in sections:
        backend = cfg["compile_backend"]
        if cuda:
            report.meta["copy_gbs"] = harness.copy_bandwidth_gbs()
            print(f"pinned host<->device copies: {report.meta['copy_gbs']}", flush=True)
        for cname, lengths in cfg["activation"].items():
            if ONLY_ACTIVATION and cname not in ONLY_ACTIVATION:
                continue
            variant = {**DEFAULT_VARIANT, "compile": backend, **ACTIVATION_VARIANTS.get(cname, {})}
            for n, tokens in enumerate(lengths):
                t0 = time.time()
                label = f"{cname} {tokens // 1024}k"
                try:
                    # The first length of a setting pays its compilation: one more warm-up step, out of the median.
                    row = measure_length("activation", label, variant, tokens, 1, steps=timed + (1 if n == 0 else 0))
                except Exception as exc:  # one setting that does not trace or run costs that setting, not the call
                    harness.free(bench)
                    row = report.add("activation", label, variant, f"error: {type(exc).__name__}: {exc}"[:300], warm)
                row["wall_s"] = round(time.time() - t0, 1)
                if row["status"] != "ok":
                    break
        apply(bench, DEFAULT_VARIANT)

    report.meta["total_s"] = round(time.time() - t_start, 1)
    report.save()
    print_summary(report)
    return 0


def print_summary(report: Report) -> None:
    rows = report.rows
    total = report.meta.get("device_total_gib")
    print("\n=== summary ===")
    print(
        f"device {report.meta['device']} ({total and round(total, 1)} GiB), matmul peak "
        f"{report.meta['matmul_peak_tflops'] and round(report.meta['matmul_peak_tflops'])} TFLOP/s, "
        f"torch {report.meta['torch']}, transformers {report.meta['transformers']}, trl {report.meta['trl']}"
    )
    print("| section | case | packed tokens | trained | s/step | tokens/s | TFLOP/s | MFU | peak GiB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["status"] != "ok":
            print(f"| {r['section']} | {r['name']} | {r.get('packed_target', '')} | | {r['status']} | | | | |")
            continue
        print(
            f"| {r['section']} | {r['name']} | {r['tokens']} | {r['trained']} | {r['seconds']:.3f} | "
            f"{r['tokens_per_s']:.0f} | {r['tflops']:.0f} | {100 * r['mfu']:.1f}% | {r['peak_gib']:.1f} |"
        )
    groups: dict[str, list] = {}
    for r in rows:
        if r.get("group"):
            groups.setdefault(r["group"], []).append(r)
    print("\nmemory fit (peak GiB = fixed + slope x packed tokens):")
    for key, rs in groups.items():
        f = fit(rs)
        if f is None:
            continue
        fixed, slope = f
        fits = int((total - fixed) / slope * 1000) if total else None
        largest = max((r["tokens"] for r in rs if r["status"] == "ok"), default=0)
        oom = min((r.get("packed_target") for r in rs if r["status"] == "OOM"), default=None)
        print(
            f"  {key:<14} fixed {fixed:6.2f} GiB  slope {slope:6.3f} GiB/1k tokens  largest measured {largest}"
            + (f"  OOM at {oom}" if oom else "")
            + (f"  fits up to ~{fits} tokens on this card" if fits else "")
        )
        report.meta.setdefault("fits", {})[key] = {
            "fixed_gib": fixed,
            "gib_per_1k": slope,
            "largest_measured": largest,
            "oom_at": oom,
            "fits_tokens": fits,
        }
    by_limit: dict[int, dict] = {}
    for r in rows:
        if r["section"] == "rollouts" and r["status"] == "ok":
            by_limit.setdefault(r["step_limit"], {})[r["form"]] = r
    if by_limit:
        print("\nchained vs forked, one rollout per step:")
        print(
            "| step limit | chained tokens | forked raw tokens | forked packed (TRL trie) | raw ratio | "
            "chained s | forked s | time ratio |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for limit, forms in sorted(by_limit.items()):
            c, f = forms.get("chained"), forms.get("forked")
            if not (c and f):
                continue
            print(
                f"| {limit} | {c['tokens']} | {f['raw_tokens']} | {f['tokens']} | {f['raw_tokens'] / c['tokens']:.1f} | "
                f"{c['seconds']:.3f} | {f['seconds']:.3f} | {f['seconds'] / c['seconds']:.2f} |"
            )
    report.save()


if __name__ == "__main__":
    sys.exit(main())
