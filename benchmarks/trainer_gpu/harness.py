"""Runs TRL 1.16.0 AsyncGRPOTrainer's own training step on prepared rollout samples, and measures it.

Nothing of the loss is re-implemented: the samples go through TRL's rollout-queue dataset, its
`TokenBudgetBatcher` (the planner that packs rows up to `token_budget` and drops longer samples), its
`DataCollatorForRollout` (the prefix-trie packer), `compute_loss` (fused chunked log-prob head, tree attention,
clipped policy loss), the Hugging Face Trainer's backward, gradient clipping and AdamW step. Only the two ends are
stubs, because the benchmark GPU has neither: the rollout worker is a feed of prepared samples, and the weight
transfer to vLLM is a no-op (it runs between steps, outside the timed region anyway).

Timing: a TrainerCallback synchronizes the device at `on_step_begin` (after TRL has planned and collated the row)
and at `on_step_end` (after the optimizer step), so one step's seconds cover forward, backward, clipping and
AdamW, and its peak memory is everything the step needed on top of the resident weights and optimizer state.
"""

from __future__ import annotations

import gc
import itertools
import queue
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch.utils.checkpoint import checkpoint

# Qwen3-1.7B's published config (Qwen/Qwen3-1.7B config.json); weights are random, nothing is downloaded.
QWEN3_1_7B = dict(
    hidden_size=2048,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=6144,
    vocab_size=151936,
    tie_word_embeddings=True,
    max_position_embeddings=40960,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    bos_token_id=151643,
    eos_token_id=151645,
)
# Same architecture, sized for a CPU dry run.
TINY = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=128,
    vocab_size=2048,
    tie_word_embeddings=True,
    max_position_embeddings=40960,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    bos_token_id=1,
    eos_token_id=1,
)
MODELS = {"qwen3-1.7b": QWEN3_1_7B, "tiny": TINY}


def benchmark_tokenizer():
    """A 3-token tokenizer: TRL needs pad/eos ids; the samples arrive as ids and are never tokenized."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({"<pad>": 0, "<eos>": 1, "<unk>": 2}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def save_random_model(shape: dict, dtype: torch.dtype, path: str, device: str) -> None:
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(**shape, architectures=["Qwen3ForCausalLM"])
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(path)
    del model
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


class SampleFeed:
    """Stands in for the rollout worker's queue: hands out prepared samples, each stamped with the current policy
    version so none is dropped as stale. `rollouts` yields lists of samples; each list is one rollout."""

    def __init__(self):
        self.version = 0
        self._samples: Iterator = iter(())

    def load(self, rollouts: Iterator[list]) -> None:
        self._samples = itertools.chain.from_iterable(rollouts)

    def get(self, timeout=None):
        sample = next(self._samples)
        sample.model_version = self.version
        sample.enqueued_at = time.time()
        return sample

    def qsize(self) -> int:
        return 1

    def put_nowait(self, item) -> None:
        raise RuntimeError("the benchmark feed is read-only")


class FeedWorker:
    """`RolloutWorkerProtocol` over a `SampleFeed`."""

    def __init__(self, feed: SampleFeed):
        self.rollout_buffer = feed
        self.metrics_queue = queue.Queue()

    def start(self):
        pass

    def stop(self):
        pass

    def update_model_version(self, model_version: int):
        self.rollout_buffer.version = model_version

    def check_health(self, stale_after_s: float):
        pass


class NoWeightTransfer:
    """`WeightTransferProtocol` that sends nothing: there is no vLLM next to the benchmark GPU."""

    def init_weight_transfer(self):
        pass

    def pause(self):
        pass

    def send_weights(self, iterator):
        for _ in iterator:
            pass

    def resume(self):
        pass

    def destroy(self):
        pass


@dataclass
class StepRecord:
    seconds: float
    peak_gib: float
    reserved_gib: float
    resident_gib: float
    forwarded_tokens: int
    trained_tokens: int
    samples: int
    attention_keys: int  # sum over forwarded tokens of the keys each attends to (its root-to-token path)
    optimizer_s: float


@dataclass
class Probe:
    """Measures each optimizer step; built into a TrainerCallback by `callback()`."""

    cuda: bool
    trainer: object = None
    records: list[StepRecord] = field(default_factory=list)
    _t0: float = 0.0
    _resident: float = 0.0
    _keys: int = 0

    def forward_hook(self, module, args, kwargs):
        positions = kwargs.get("position_ids")
        if positions is not None:
            self._keys += int(positions.sum().item()) + positions.numel()

    def begin(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._resident = torch.cuda.memory_allocated() / 2**30
        self._keys = 0
        self._t0 = time.perf_counter()

    def end(self):
        if self.cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - self._t0
        t = self.trainer
        self.records.append(
            StepRecord(
                seconds=seconds,
                peak_gib=torch.cuda.max_memory_allocated() / 2**30 if self.cuda else float("nan"),
                reserved_gib=torch.cuda.max_memory_reserved() / 2**30 if self.cuda else float("nan"),
                resident_gib=self._resident,
                forwarded_tokens=int(t._step_forward_tokens),
                trained_tokens=int(t._step_trained_tokens),
                samples=round(t._step_samples),
                attention_keys=self._keys,
                optimizer_s=t._step_optimizer_s,
            )
        )

    def callback(self):
        from transformers import TrainerCallback

        probe = self

        class _ProbeCallback(TrainerCallback):
            def on_step_begin(self, args, state, control, **kwargs):
                probe.begin()

            def on_step_end(self, args, state, control, **kwargs):
                probe.end()

        return _ProbeCallback()


@dataclass
class Bench:
    trainer: object
    feed: SampleFeed
    probe: Probe
    shape: dict
    cuda: bool


def build(
    shape_name: str = "qwen3-1.7b",
    dtype: str = "bfloat16",
    gradient_checkpointing: bool = True,
    workdir: str | None = None,
    extra_callbacks: tuple = (),
) -> Bench:
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    from datasets import Dataset

    cuda = torch.cuda.is_available()
    if not cuda:
        # TRL asks torch.cuda for the device name to look up a peak for its own MFU metric; without a driver that
        # raises. The benchmark measures its own peak, so on CPU the lookup just answers "unknown".
        from trl.experimental.async_grpo import async_grpo_trainer

        async_grpo_trainer.get_peak_flops_per_device = lambda accelerator, dtype: None
    shape = MODELS[shape_name]
    workdir = workdir or tempfile.mkdtemp(prefix="bench-trainer-", dir="/dev/shm" if cuda else None)
    save_random_model(shape, getattr(torch, dtype), f"{workdir}/model", "cuda" if cuda else "cpu")
    feed = SampleFeed()
    probe = Probe(cuda=cuda)
    config = AsyncGRPOConfig(
        output_dir=f"{workdir}/out",
        max_steps=1,
        token_budget=8192,
        per_device_train_batch_size=1,
        gradient_accumulation_steps=1,
        save_strategy="no",
        logging_steps=1,
        report_to=[],
        disable_tqdm=True,
        dtype=dtype,
        bf16=cuda and dtype == "bfloat16",
        use_cpu=not cuda,
        gradient_checkpointing=gradient_checkpointing,
        max_staleness=10**9,
        vllm_server_base_url="http://127.0.0.1:9",  # never contacted: token_budget is set, weights go nowhere
        seed=0,
    )
    trainer = AsyncGRPOTrainer(
        model=f"{workdir}/model",
        args=config,
        train_dataset=Dataset.from_dict({"prompt": [[{"role": "user", "content": "benchmark"}]]}),
        processing_class=benchmark_tokenizer(),
        rollout_worker=FeedWorker(feed),
        weight_transfer=NoWeightTransfer(),
        callbacks=[probe.callback(), *extra_callbacks],
    )
    probe.trainer = trainer
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # one dict of every metric per step; the benchmark prints its own
    trainer.model.register_forward_pre_hook(probe.forward_hook, with_kwargs=True)
    return Bench(trainer=trainer, feed=feed, probe=probe, shape=shape, cuda=cuda)


def set_checkpointing(bench: Bench, enabled: bool, every_n_layers: int = 1, offload: bool = False) -> None:
    """The trainer-side knobs: TrainingArguments' `gradient_checkpointing` and `gradient_checkpointing_kwargs`
    (transformers 5.17 reads `every_n_layers` and `offload` from it). `train()` applies them; undo first."""
    args = bench.trainer.args
    bench.trainer.model.gradient_checkpointing_disable()
    args.gradient_checkpointing = enabled
    kwargs = {}
    if every_n_layers != 1:
        kwargs["every_n_layers"] = every_n_layers
    if offload:
        kwargs["offload"] = True
    args.gradient_checkpointing_kwargs = kwargs or None


def set_logprob_chunks(vocab_chunk: int, token_chunk: int) -> None:
    """TRL's fused log-prob head tiles the LM head by these module constants (read at call time)."""
    import trl.kernels.chunked_logprob as kernel
    import trl.trainer.utils as utils

    utils._CHUNKED_LOGPROB_CHUNK_SIZE = vocab_chunk
    kernel.TOKEN_CHUNK_SIZE = token_chunk


def set_layer_compile(bench: Bench, backend: str | None) -> None:
    """Regional torch.compile: each decoder layer, not the whole model. One graph serves all 28 layers, compiles in
    seconds rather than minutes, and keeps TRL's fused log-prob head (Triton) and the tree-attention path gather
    outside dynamo. `dynamic=True` because every packed row has another length. None undoes it."""
    for layer in bench.trainer.model.model.layers:
        if backend:
            layer.compile(dynamic=True, backend=backend)
        else:
            layer._compiled_call_impl = None


# --- where activations are kept: checkpointing inside the compiled region (issue 19) ------------------------------
#
# `set_checkpointing` above is the Hugging Face form: the checkpoint wraps the whole layer OUTSIDE the compiled
# region, so inductor sees one layer's forward and its recompute as two separate runs. Here the checkpoint is called
# inside the layer's (or its MLP's / attention's) own `forward`, so the regional compile traces it: dynamo turns it
# into its activation-checkpoint operator and inductor partitions forward and backward knowing what is recomputed.
# Selective activation checkpointing (PyTorch's `create_selective_checkpoint_contexts`) then picks, op by op, which
# outputs are kept: the attention kernel's always (it is the costly op to redo at long contexts), and the matrix
# products named in `save` by their order in a Qwen3 decoder layer.
MATMUL_ORDER = ("q", "k", "v", "o", "gate", "up", "down")  # aten.mm calls of one Qwen3 decoder layer, in order
REGIONS = {"layer": None, "mlp": "mlp", "attn": "self_attn"}


def _attention_ops() -> set:
    aten = torch.ops.aten
    names = (
        "_flash_attention_forward",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    )
    return {getattr(aten, n).default for n in names if hasattr(aten, n)}


def selective_context(save: tuple[str, ...]):
    """A checkpoint `context_fn` keeping the attention output and the named matmul outputs; the rest recomputed."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    keep = {MATMUL_ORDER.index(name) + 1 for name in save}
    attention, mm = _attention_ops(), torch.ops.aten.mm.default

    def context_fn():
        counts = {False: 0, True: 0}  # matmuls seen in the forward and in the recompute, counted apart

        def policy(ctx, op, *args, **kwargs):
            if op in attention:
                return CheckpointPolicy.MUST_SAVE
            if op == mm:
                counts[ctx.is_recompute] += 1
                if counts[ctx.is_recompute] in keep:
                    return CheckpointPolicy.MUST_SAVE
            return CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    return context_fn


class _CheckpointedForward:
    """Mixed in before a module's own class: its forward runs under a non-reentrant checkpoint."""

    _checkpoint_context = None

    def forward(self, *args, **kwargs):
        if self._checkpoint_context is None:  # dynamo 2.11 refuses noop_context_fn passed explicitly
            return checkpoint(super().forward, *args, use_reentrant=False, **kwargs)
        return checkpoint(super().forward, *args, use_reentrant=False, context_fn=self._checkpoint_context, **kwargs)


_CHECKPOINTED_CLASSES: dict[type, type] = {}


def _checkpointed(module: torch.nn.Module, context_fn) -> None:
    cls = type(module)
    if issubclass(cls, _CheckpointedForward):
        cls = cls.__mro__[2]
    sub = _CHECKPOINTED_CLASSES.setdefault(cls, type(f"Checkpointed{cls.__name__}", (_CheckpointedForward, cls), {}))
    module.__class__ = sub
    module._checkpoint_context = context_fn


def _plain(module: torch.nn.Module) -> None:
    if isinstance(module, _CheckpointedForward):
        module.__class__ = type(module).__mro__[2]
        module.__dict__.pop("_checkpoint_context", None)


def set_compiled_checkpoint(bench: Bench, region: str | None, save: tuple[str, ...] | None = None) -> None:
    """Checkpoint `region` ("layer", "mlp", "attn") of every decoder layer inside its compiled forward; `save` makes it
    selective (None: plain checkpoint, everything recomputed). None undoes it. Turn the HF checkpointing off first."""
    context = selective_context(save) if save is not None else None
    for layer in bench.trainer.model.model.layers:
        for module in (layer, layer.mlp, layer.self_attn):
            _plain(module)
        if region:
            _checkpointed(getattr(layer, REGIONS[region]) if REGIONS[region] else layer, context)


def set_memory_budget(budget: float | None) -> None:
    """Inductor's memory-budget partitioner (`torch._functorch.config.activation_memory_budget`): the compiler itself
    chooses what to recompute so the saved activations stay under this fraction of what it would save otherwise,
    at the least estimated recompute time. 1.0 (None) is the default partitioner."""
    import torch._functorch.config as functorch_config

    functorch_config.activation_memory_budget = 1.0 if budget is None else budget


def copy_bandwidth_gbs(gib: int = 1) -> dict:
    """Pinned host <-> device copy rates (GB/s) of this machine: the ceiling for offloading activations."""
    host = torch.empty(gib * 2**30, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty_like(host, device="cuda")
    rates = {}
    for name, dst, src in (("h2d", dev, host), ("d2h", host, dev)):
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(3):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        rates[name] = 3 * host.numel() / (time.perf_counter() - t0) / 1e9
    del host, dev
    torch.cuda.empty_cache()
    return rates


def free(bench: Bench) -> None:
    bench.trainer.model.zero_grad(set_to_none=True)
    gc.collect()
    if bench.cuda:
        torch.cuda.empty_cache()


def run(bench: Bench, rollouts: Callable[[int], list], token_budget: int, steps: int) -> list[StepRecord] | str:
    """`steps` optimizer steps over rows TRL packs from `rollouts(i)` (i = 0, 1, ...) under `token_budget`.

    Returns the step records, or "OOM" when the step ran out of device memory.
    """
    bench.feed.load(rollouts(i) for i in itertools.count())
    bench.trainer.args.token_budget = token_budget
    bench.trainer.args.max_steps = steps
    bench.probe.records = []
    try:
        bench.trainer.train()
    except torch.OutOfMemoryError:
        free(bench)
        return "OOM"
    records = bench.probe.records
    free(bench)
    return records


def matmul_peak_tflops(n: int = 8192, repeats: int = 10) -> float:
    """Dense bf16 matrix-product rate of this card, measured now (random data, after warm-up)."""
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for _ in range(3):
        a @ b
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        a @ b
    stop.record()
    torch.cuda.synchronize()
    return 2 * n**3 * repeats / (start.elapsed_time(stop) / 1e3) / 1e12


def model_flops(shape: dict, r: StepRecord) -> float:
    """Model FLOPs of one training step (forward + backward = 3 x forward; recomputation not counted).

    Exact for TRL's packed row: linear layers over every forwarded token, attention over each token's own path
    (causal, tree-aware), and the LM head only at the trained positions, which is all TRL's fused head computes.
    """
    h, layers = shape["hidden_size"], shape["num_hidden_layers"]
    heads, kv, hd, inter = (
        shape[k] for k in ("num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size")
    )
    per_layer = h * (heads * hd + 2 * kv * hd) + heads * hd * h + 3 * h * inter
    forward = (
        2 * r.forwarded_tokens * per_layer * layers
        + 4 * heads * hd * layers * r.attention_keys
        + 2 * r.trained_tokens * shape["vocab_size"] * h
    )
    return 3.0 * forward
