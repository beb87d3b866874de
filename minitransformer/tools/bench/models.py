"""The two training steps the benchmark times: ours, and the same model in PyTorch.

One step = forward, label-smoothed cross-entropy, backward, Adam update and ``loss.item()``,
float32, on a fixed batch. PyTorch's model is built to match ours: post-LN, tied
embeddings scaled by sqrt(d_model), the same sinusoidal table, the same Adam settings.
Each builder returns ``(step, threads)``: the step (a function returning the loss) and what
the report says about the implementation's threads and BLAS.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ... import backend, nn
from ...backend import host
from ...fast.numpy import compiled
from ...nn.inputs import check_ids
from ...nn.positional import sinusoid_table
from ...optim import Adam


def ours_step(cfg: Any, src: np.ndarray, tgt: np.ndarray, device: str) -> tuple[Callable, dict]:
    """One training step of minitransformer's Transformer on ``device``."""
    model = nn.Transformer(cfg, seed=0).to(device)
    model.train()
    opt = Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    # checked once on the host, where they are made, as the Trainer does (train/step.py):
    # the step then trusts them (checked=True), with no device-to-host read of its own
    src_ = check_ids("src", src, cfg.src_vocab, cfg.max_len, device)
    tgt_in = check_ids("tgt_in", tgt[:, :-1], cfg.tgt_vocab, cfg.max_len, device)
    tgt_out = check_ids("tgt_out", tgt[:, 1:], cfg.tgt_vocab, cfg.max_len, device)

    def step() -> float:
        logits = model(src_, tgt_in, checked=True)
        loss = model.loss(logits, tgt_out, checked=True)
        opt.zero_grad()
        loss.backward()
        value = loss.item()
        opt.step()
        backend.synchronize(device)
        return value

    return step, {**host.blas_info(), **compiled_info()}


def compiled_info() -> dict[str, str]:
    """What the report says of numba's kernels (``fast/numpy/compiled.py``): their
    version when they are on, else nothing."""
    if not compiled.enabled():
        return {}
    from importlib.metadata import version

    kernels = "LayerNorm, Adam, embedding, ReLU, cross-entropy, dropout"
    return {"compiled": f"numba {version('numba')} ({kernels})"}


def ours_graph_step(cfg: Any, src: np.ndarray, tgt: np.ndarray,
                    device: str) -> tuple[Callable, dict]:  # fmt: skip
    """Our step as ``ours_step`` times it, replayed from a CUDA graph (fast/gpu/cuda_graph.py;
    a GPU with the fast tier on): the ids are checked on the host and copied in, the loss
    read back as ``.item()`` reads it."""
    from ...fast.gpu.cuda_graph import GraphedSteps

    if not device.startswith("cuda"):
        raise ValueError("ours-graph needs --device cuda (CUDA graphs need a GPU)")
    model = nn.Transformer(cfg, seed=0).to(device)
    model.train()
    opt = Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def body(src_: Any, tgt_in: Any, tgt_out: Any) -> tuple[Any]:
        loss = model.loss(model(src_, tgt_in, checked=True), tgt_out, checked=True)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return (loss.data,)

    steps = GraphedSteps(body, opt)
    ids = (src, tgt[:, :-1], tgt[:, 1:])

    def step() -> float:
        (loss,) = steps(*ids)
        return float(loss)  # waits for the step, as .item() does

    for _ in range(steps.warmup + 1):  # the eager warm-up steps, then the capture
        step()
    if not steps.graphs:  # say why (CuPy's error), rather than time eager steps as a graph
        raise RuntimeError(f"the step could not be captured: {steps.failed}")
    return step, {**host.blas_info(), "graph": "fast.gpu.cuda_graph.GraphedSteps (whole step)"}


def torch_step(cfg: Any, src: np.ndarray, tgt: np.ndarray, device: str) -> tuple[Callable, dict]:
    """One training step of the same model in PyTorch (eager) on ``device``."""
    import torch

    model, loss_fn, (src_, tgt_in, tgt_out), threads = _torch_model(cfg, src, tgt, device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    sync = torch.cuda.synchronize if src_.is_cuda else (lambda: None)

    def step() -> float:
        logits = model(src_, tgt_in)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        value = loss.item()
        opt.step()
        sync()
        return value

    return step, threads


def torch_graph_step(
    cfg: Any, src: np.ndarray, tgt: np.ndarray, device: str
) -> tuple[Callable, dict]:
    """The same PyTorch step captured once as a CUDA graph and replayed: the floor of what
    launch overhead allows (``--compare torch-graph``; on a GPU only).

    As PyTorch's documentation shows for whole-network capture: a static batch, a few
    warm-up steps on a side stream, the gradients set to None before capture (so backward
    allocates them from the graph's pool), then forward, loss, backward and the Adam step
    (``capturable=True``: its step count stays on the device) recorded in one graph. Each
    timed step is ``graph.replay()`` plus reading the loss, as the eager step reads it. The
    decoder is told its mask is causal (``tgt_is_causal=True``): PyTorch otherwise compares
    the mask with a causal one on the host, a sync that capture forbids.
    """
    import torch

    if not device.startswith("cuda"):
        raise ValueError("--compare torch-graph needs --device cuda (CUDA graphs need a GPU)")
    model, loss_fn, (src_, tgt_in, tgt_out), threads = _torch_model(cfg, src, tgt, device)
    opt = torch.optim.Adam(
        model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, capturable=True
    )

    def forward_backward() -> Any:
        logits = model(src_, tgt_in, causal=True)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the graph (allocations, autotuning)
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            forward_backward()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = forward_backward()

    def step() -> float:
        graph.replay()
        value = static_loss.item()
        torch.cuda.synchronize()
        return value

    return step, {**threads, "graph": "torch.cuda.CUDAGraph (whole step)"}


def _torch_model(cfg: Any, src: np.ndarray, tgt: np.ndarray, device: str) -> tuple:
    """PyTorch's copy of our model on ``device``, its loss, the batch as tensors and what
    the report says about its threads. On a GPU, TF32 is switched off so that both sides
    compute in plain FP32 (CuPy's default): a process-wide setting, made here because the
    benchmark worker that calls this owns its process."""
    import torch

    dev = torch.device("cuda" if device.startswith("cuda") else "cpu")
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    D = cfg.d_model

    def enc_layer():
        return torch.nn.TransformerEncoderLayer(
            D, cfg.h, cfg.d_ff, cfg.dropout, batch_first=True, norm_first=False
        )

    def dec_layer():
        return torch.nn.TransformerDecoderLayer(
            D, cfg.h, cfg.d_ff, cfg.dropout, batch_first=True, norm_first=False
        )

    class Model(torch.nn.Module):  # post-LN, tied embeddings, as ours
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(cfg.src_vocab, D)
            torch.nn.init.normal_(self.embed.weight, std=D**-0.5)
            table = torch.tensor(sinusoid_table(cfg.max_len, D), dtype=torch.float32)
            self.register_buffer("pe", table)
            self.drop = torch.nn.Dropout(cfg.dropout)
            self.encoder = torch.nn.TransformerEncoder(
                enc_layer(), cfg.N, enable_nested_tensor=False
            )
            self.decoder = torch.nn.TransformerDecoder(dec_layer(), cfg.N)

        def embed_at(self, ids):
            x = self.embed(ids) * math.sqrt(D)
            return self.drop(x + self.pe[: ids.shape[1]])

        def forward(self, src, tgt_in, causal=None):
            T = tgt_in.shape[1]
            src_pad, tgt_pad = src == cfg.pad_id, tgt_in == cfg.pad_id
            future = torch.triu(
                torch.ones(T, T, dtype=torch.bool, device=src.device), diagonal=1
            )  # True = may NOT attend (torch's convention)
            memory = self.encoder(self.embed_at(src), src_key_padding_mask=src_pad)
            x = self.decoder(
                self.embed_at(tgt_in),
                memory,
                tgt_mask=future,
                tgt_key_padding_mask=tgt_pad,
                memory_key_padding_mask=src_pad,
                tgt_is_causal=causal,  # None (eager): PyTorch checks the mask; True: it is
            )
            return x @ self.embed.weight.T

    model = Model().to(dev)
    model.train()
    batch = (
        torch.tensor(src, device=dev),
        torch.tensor(tgt[:, :-1], device=dev),
        torch.tensor(tgt[:, 1:], device=dev),
    )
    loss_fn = torch.nn.CrossEntropyLoss(
        label_smoothing=cfg.label_smoothing, ignore_index=cfg.pad_id
    )
    par = torch.__config__.parallel_info().splitlines()
    blas = [x.strip() for x in par if "Math Kernel" in x or "backend" in x]
    threads = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "blas": "; ".join(
            b.replace(" for Intel(R) 64 architecture applications", "") for b in blas
        ),  # fmt: skip
    }
    if dev.type == "cuda":
        threads["tf32"] = False
    return model, loss_fn, batch, threads
