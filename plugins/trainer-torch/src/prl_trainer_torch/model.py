"""Model building: process group, dtype, activation checkpointing, FSDP2, the policy head.

``PolicyModel`` wraps a transformers causal LM and returns per-token log-probabilities
(and entropies) of given targets instead of logits, computed chunk by chunk from the final
hidden states (see :mod:`prl_trainer_torch.logprobs`). SFT and RL both call it, so the
model is built, sharded and checkpointed the same way for both.

Packed rows need no attention mask: with ``attention_mask=None`` transformers derives the
document boundaries from ``position_ids`` (a position that is not the previous one plus
one starts a new document) and builds a block-diagonal causal mask for sdpa/eager, or a
block-sparse mask for flex_attention, so no token attends across documents. A hybrid model's
linear-attention layers (Qwen3.5's Gated DeltaNet) carry state along the row instead of
attending, so ``PolicyModel`` installs :mod:`prl_trainer_torch.hybrid` on them and hands them
the documents' cumulative lengths, which reset that state at each document.

With world size > 1 every decoder layer and then the wrapper are ``fully_shard``-ed
(FSDP2); gradients are reduced in float32. The mesh is ``model.dp_replicate x
model.dp_shard``: one flat sharded mesh by default, and with ``dp_replicate > 1`` HSDP
(each replica shards the model over its ``dp_shard`` ranks, and gradients are all-reduced
across replicas). Every rank still reads its own slice of the data. With ``model.ep > 1``
the MoE experts are split over groups of ``ep`` ranks instead
(:mod:`prl_trainer_torch.expert_parallel`) and FSDP shards everything else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import nn

from prl.config.errors import ConfigError
from prl_trainer_torch.attention import NAME as VARLEN
from prl_trainer_torch.attention import document_bounds, resolve_attn
from prl_trainer_torch.expert_parallel import shard_experts
from prl_trainer_torch.hybrid import install as install_hybrid
from prl_trainer_torch.logprobs import DEFAULT_CHUNK, compile_chunks
from prl_trainer_torch.moe import idle_expert_params
from prl_trainer_torch.replay import policy_head


@dataclass
class Dist:
    """Where this process sits: rank, world size and its device."""

    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed() -> Dist:
    """Join the torchrun process group when there is one (NCCL on GPU, gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
        if "OMP_NUM_THREADS" not in os.environ:
            # Ranks on one host share its cores; oversubscribed OpenMP threads spin-wait.
            local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    if world > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        torch.distributed.init_process_group(backend=backend, device_id=device if device.type == "cuda" else None)
    return Dist(rank, world, local_rank, device)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """``auto`` is bfloat16 on GPU and float32 on CPU."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


class PolicyModel(nn.Module):
    """A causal LM whose forward returns target log-probabilities, never full logits."""

    def __init__(self, hf: nn.Module, chunk_size: int = DEFAULT_CHUNK) -> None:
        super().__init__()
        self.hf = hf
        self.chunk_size = chunk_size
        # Linear-attention layers reset their state per document only when given the
        # documents' bounds (prl_trainer_torch.hybrid), so a hybrid model always gets them.
        self.hybrid = install_hybrid(hf)
        # An MoE model's routing counts (prl_trainer_torch.moe.RoutingStats), set by the run:
        # recorded during training forward passes only.
        self.routing = None
        # model.routing_replay: routes with the sampler's recorded experts
        # (prl_trainer_torch.routing_replay.RouteReplay), set by the RL run.
        self.route_replay = None

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        targets: torch.Tensor,
        temperature: torch.Tensor | float = 1.0,
        entropy: bool = False,
        replay: tuple[torch.Tensor, ...] | None = None,
        bounds: tuple[torch.Tensor, int] | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """(logp, entropy) of ``targets``; with ``replay = (ids, valid)`` (the sampling masks,
        [B, T, K], aligned with ``targets``; a third entry may name the positions that have
        one) also the kept-set logprobs and the mask mismatch flags of
        :func:`prl_trainer_torch.replay.replay_logprobs`, with logp renormalised over the
        kept set where the target is in it. ``bounds`` (the documents' cumulative
        lengths and the longest, as :func:`document_bounds` gives them) saves computing them
        from ``position_ids`` on the GPU."""
        kwargs = {}
        if self.hybrid or getattr(self.hf.config, "_attn_implementation", None) == VARLEN:
            cu, longest = bounds if bounds is not None else document_bounds(position_ids)
            kwargs = {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}
        record = self.routing is not None and self.training
        if record:
            self.routing.recording = True
        try:
            out = self.hf.get_decoder()(input_ids=input_ids, position_ids=position_ids, use_cache=False, **kwargs)
        finally:
            if record:
                self.routing.recording = False
        weight = self.hf.get_output_embeddings().weight
        return policy_head(out.last_hidden_state, weight, targets, temperature, self.chunk_size, entropy, replay)


def load_hf_model(name: str, dtype: torch.dtype, attn: str, config=None) -> nn.Module:
    """A local HF model directory (or id), or a random init from ``config`` when given.
    ``attn`` may be ``auto`` (see :func:`prl_trainer_torch.attention.resolve_attn`)."""
    from transformers import AutoModelForCausalLM

    attn = resolve_attn(attn, torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    try:
        if config is not None:
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)
        else:
            model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, attn_implementation=attn)
    except ValueError as exc:
        # A typo in the attention setting is the user's to fix: one line, exit 2.
        if "attn_implementation" not in str(exc):
            raise
        raise ConfigError(f"model.attn_implementation: '{attn}' is not supported by transformers here") from None
    model.config.use_cache = False
    return model


def decoder_layers(hf: nn.Module) -> list[nn.Module]:
    layers = getattr(hf.get_decoder(), "layers", None)
    if layers is None:
        raise ValueError(f"model {type(hf).__name__} has no decoder .layers to shard or checkpoint")
    return list(layers)


def compile_default(device: torch.device) -> bool:
    """Compile decoder layers and the log-prob chunk kernels on GPU unless
    PRL_TRAINER_COMPILE=0 (kernel fusion cuts the thousands of small elementwise launches
    of an eager transformer step, and the passes over chunk x vocabulary logits).
    PRL_TRAINER_COMPILE=1 compiles on CPU too (slow to start; for checking compile
    behaviour, such as recompiles, without a GPU)."""
    flag = os.environ.get("PRL_TRAINER_COMPILE")
    if flag in ("0", "1"):
        return flag == "1"
    return device.type == "cuda"


def parallelize(
    hf: nn.Module,
    dist: Dist,
    activation_checkpointing: bool,
    chunk_size: int = DEFAULT_CHUNK,
    compile: bool | None = None,
    dp: tuple[int, int] | None = None,
    ac_freq: int = 1,
) -> PolicyModel:
    """Move to the device, turn on activation checkpointing (every ``ac_freq``-th decoder
    layer), compile each decoder layer, shard with FSDP2 when world > 1 over
    ``dp = (replicas, shards)`` (default: one replica)."""
    hf.to(dist.device)
    if activation_checkpointing:
        # Non-reentrant checkpointing composes with FSDP2's per-layer unshard hooks.
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        for i, layer in enumerate(decoder_layers(hf)):
            # transformers checks this flag per layer on every call
            layer.gradient_checkpointing = i % ac_freq == 0
    if compile if compile is not None else compile_default(dist.device):
        _no_size_guarded_fusions()
        for layer in decoder_layers(hf):
            # Dynamic from the first compile: a row's length, its document count and its
            # longest document change every row. Compiled static, each recompiles the
            # first time it changes, which can be many steps in (a later row with a new
            # document count); traced symbolic, one compile serves every row.
            layer.compile(dynamic=True)
        compile_chunks()
    policy = PolicyModel(hf, chunk_size)
    if dist.world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        replicas, shards = dp or (1, dist.world)
        if replicas == 1:
            mesh = init_device_mesh(dist.device.type, (dist.world,))
        else:
            # 2-D mesh: fully_shard replicates over the first dimension, shards over the second.
            mesh = init_device_mesh(dist.device.type, (replicas, shards), mesh_dim_names=("replicate", "shard"))
        mp = MixedPrecisionPolicy(reduce_dtype=torch.float32)
        # model.ep: expert weights are split over the EP group instead, out of FSDP's hands
        ignored = shard_experts(hf, mesh, dist.world, replicas) or None
        for layer in decoder_layers(hf):
            fully_shard(layer, mesh=mesh, mp_policy=mp, ignored_params=ignored)
        fully_shard(policy, mesh=mesh, mp_policy=mp, ignored_params=ignored)
    return policy


def _no_size_guarded_fusions() -> None:
    """Inductor's mixed-order reduction fusion (the RMSNorm backward on GPU) is taken only
    for rows of at least 5 Mi elements, and the check becomes a guard on the row length:
    on an H200 a later, shorter row (under 5,120 tokens at hidden size 1024) recompiled the
    layers (about 6 s at step 5 of a 10-step SFT). Non-strict mode decides without that size
    check, so one dynamic graph serves short rows too. Not measured on a GPU since."""
    import torch._inductor.config as inductor

    triton = getattr(inductor, "triton", None)
    if hasattr(triton, "mix_order_reduction_non_strict_mode"):
        triton.mix_order_reduction_non_strict_mode = True


def count_params(hf: nn.Module) -> tuple[int, int]:
    """(all parameters, parameters one token's matmuls use) of the unsharded model: the
    second leaves out the input embedding and, in an MoE model, the experts a token is not
    routed to."""
    total = sum(p.numel() for p in hf.parameters())
    emb = hf.get_input_embeddings().weight.numel()
    out = hf.get_output_embeddings()
    tied = out is not None and out.weight is hf.get_input_embeddings().weight
    # A tied output matrix still costs its matmul, so only an untied input table is free.
    return total, (total if tied else total - emb) - idle_expert_params(hf)


def apply_runtime_knobs(mcfg) -> None:
    """``model.matmul_precision`` for this process (float32 matmuls on TF32/bf16 cores)."""
    torch.set_float32_matmul_precision(mcfg.matmul_precision)


class GarbageCollector:
    """``[model.gc]``: automatic collection off, one ``gc.collect()`` every ``interval``
    steps. A collection pauses the process it runs in; collecting at the same step on every
    rank keeps one rank's pause from stalling the others at the next collective."""

    def __init__(self, gc_config) -> None:
        import gc

        self.interval = gc_config.interval if gc_config is not None else None
        if self.interval is not None:
            gc.disable()
            gc.collect()

    def step(self, step: int) -> float:
        """Collect when ``step`` is a multiple of the interval; seconds spent (0 otherwise)."""
        import gc
        import time

        if self.interval is None or step % self.interval:
            return 0.0
        start = time.perf_counter()
        gc.collect()
        return time.perf_counter() - start

    def close(self) -> None:
        import gc

        if self.interval is not None:
            gc.enable()
