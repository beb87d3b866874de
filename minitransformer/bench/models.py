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

from .. import backend, host, nn
from ..nn.positional import sinusoid_table
from ..optim import Adam


def ours_step(cfg: Any, src: np.ndarray, tgt: np.ndarray, device: str) -> tuple[Callable, dict]:
    """One training step of minitransformer's Transformer on ``device``."""
    model = nn.Transformer(cfg, seed=0).to(device)
    model.train()
    opt = Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    src_ = backend.asarray(src, device=device)
    tgt_in = backend.asarray(tgt[:, :-1], device=device)
    tgt_out = backend.asarray(tgt[:, 1:], device=device)

    def step() -> float:
        logits = model(src_, tgt_in)
        loss = model.loss(logits, tgt_out)
        opt.zero_grad()
        loss.backward()
        value = loss.item()
        opt.step()
        backend.synchronize(device)
        return value

    return step, host.blas_info()


def torch_step(cfg: Any, src: np.ndarray, tgt: np.ndarray, device: str) -> tuple[Callable, dict]:
    """One training step of the same model in PyTorch (eager) on ``device``."""
    import torch

    dev = torch.device("cuda" if device.startswith("cuda") else "cpu")
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

        def forward(self, src, tgt_in):
            T = tgt_in.shape[1]
            src_pad, tgt_pad = src == cfg.pad_id, tgt_in == cfg.pad_id
            causal = torch.triu(
                torch.ones(T, T, dtype=torch.bool, device=src.device), diagonal=1
            )  # True = may NOT attend (torch's convention)
            memory = self.encoder(self.embed_at(src), src_key_padding_mask=src_pad)
            x = self.decoder(
                self.embed_at(tgt_in),
                memory,
                tgt_mask=causal,
                tgt_key_padding_mask=tgt_pad,
                memory_key_padding_mask=src_pad,
            )
            return x @ self.embed.weight.T

    model = Model().to(dev)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    src_ = torch.tensor(src, device=dev)
    tgt_in = torch.tensor(tgt[:, :-1], device=dev)
    tgt_out = torch.tensor(tgt[:, 1:], device=dev)
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
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

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
