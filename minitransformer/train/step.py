"""One training step of ``Trainer`` (trainer.py): the batch's ids checked on the host, then
the device work (forward, loss, backward, clip, the guarded Adam update), the losses read
back at log lines. The device part goes through one hook, ``run_step``, which the step's
CUDA graphs replace on a GPU (graph_mode.py: the mode is chosen once, at the first step or
the start of ``train()``; ``Trainer.capture_steps`` asks for the graphs explicitly).

A base class of ``Trainer``, apart so that each file holds one concept: this one is the step,
trainer.py the loop around it (logging, checkpoints, signals, evaluation).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import backend
from ..data.batching import Batch
from ..errors import TrainingError
from ..function import implementation
from ..nn.inputs import check_ids
from ..optim import step_ok
from ..runtime import checkpoint, runs
from . import graph_mode


class TrainingStep:
    """The step's methods; the attributes they use are made by ``Trainer.__init__``."""

    cfg: Any
    model: Any
    model_cfg: Any
    optimizer: Any
    schedule: Any
    world: Any
    grad_hook: Any
    generator: Any
    reporter: Any
    _graph_mode: tuple[str, str | None] | None
    _graph_lines: set[str]
    loss_scale: float
    step: int
    losses: list[float]
    out: Any
    checkpoint_step: int | None
    _pending: list
    _healthy: Any

    def train_step(self, batch: Batch) -> Any:
        """Check the ids, then forward, loss, backward, clip, step (``device_step``); returns
        the loss (per non-pad target token) as a 0-d array on the device. Nothing in it
        waits for the device (no host read):

        - the batch's token ids are checked on the host, where they are made, then uploaded
          (``device_step`` trusts them);
        - the loss and the gradient norm stay on the device until ``read_back()`` (at each
          log line and before each checkpoint) turns them into numbers;
        - the NaN/Inf guard is decided on the device: the update is applied only while
          every step so far had a finite loss and gradient norm (``Optimizer.step(apply_if=
          ...)``), so a bad step never changes the weights, and ``read_back()`` raises
          TrainingError naming it.

        The device part runs through ``self.run_step``, the one hook: on a GPU it is
        replayed from CUDA graphs (graph_mode.py, decided here at the first step unless
        ``train()`` did). The trainer's own generator is the default while it steps.
        """
        if self._graph_mode is None:
            graph_mode.choose(self)
        backend.random.set_default_generator(self.generator)  # not a later Trainer's
        if not self.model.training:
            self.model.train()
        cfg = self.model_cfg
        ids = (
            check_ids("src", batch.src, cfg.src_vocab, cfg.max_len, None),
            check_ids("tgt_in", batch.tgt_in, cfg.tgt_vocab, cfg.max_len, None),
            check_ids("tgt_out", batch.tgt_out, cfg.tgt_vocab, cfg.max_len, None),
        )  # on the host, where the batch was made: free
        loss, norm = self.run_step(*ids)  # forward, loss, backward, clip, step: device_step
        self.schedule.step()  # the n-th update used lr_at(n); the schedule sets the next
        self._pending.append((loss, norm))
        return loss

    def run_step(self, *ids: np.ndarray) -> tuple[Any, Any]:
        """The device part of a step on checked host ids: uploaded, then ``device_step``
        with the flag "every step so far was finite" kept in ``self._healthy``; (loss,
        norm). On a GPU, the step's CUDA graphs replace it (graph_mode.py)."""
        arrays = (backend.asarray(a, device=self.cfg.device) for a in ids)
        loss, norm, self._healthy = self.device_step(self._healthy, *arrays)
        return loss, norm

    def device_step(self, healthy: Any, src: Any, tgt_in: Any,
                    tgt_out: Any) -> tuple[Any, Any, Any]:  # fmt: skip
        """Forward, loss, backward, clip and the guarded update on checked ids already on
        the device: (loss, gradient norm, healthy). ``healthy`` is True while every step so
        far had a finite loss and norm (a 0-d bool on the device; None before the first):
        the update is applied only where it, and this step, are (sticky: after a bad step no
        update is ever applied)."""
        inputs = (tgt_in,) if self.model_cfg.decoder_only else (src, tgt_in)  # an LM: no src
        logits = self.model(*inputs, checked=True)  # forward
        loss = self.model.loss(logits, tgt_out, checked=True)  # loss
        if self.loss_scale != 1.0:
            loss = loss * self.loss_scale
        self.optimizer.zero_grad()
        loss.backward()  # backward
        grads = self.optimizer.gather_grads()
        if self.grad_hook is not None:
            self.grad_hook(grads, loss.data)
        if self.cfg.clip_norm:  # clip
            norm = self.optimizer.clip_grad_norm(self.cfg.clip_norm)
        else:
            norm = self.optimizer.grad_norm()
        ok = implementation(step_ok, norm)  # the math, or its fused twin on a GPU (fast/)
        healthy = ok(loss.data, norm, healthy)  # finite now and at every step so far
        self.optimizer.step(apply_if=healthy)  # step
        return loss.data, norm, healthy

    def read_back(self) -> list[float]:
        """Bring the losses of the steps since the last read-back to the host (one sync) and
        append them to ``self.losses``; raise TrainingError at the first step whose loss or
        gradient norm was NaN/Inf (no update was applied from that step on)."""
        pending, self._pending = self._pending, []
        if not pending:
            return []
        xp = backend.namespace(pending[0][0])
        pairs = backend.to_numpy(xp.stack([xp.stack([xp.reshape(a, ()) for a in pair])
                                           for pair in pending]))  # fmt: skip
        if self.world is not None:  # each rank holds its share n_r/n of the mean loss
            pairs = pairs.astype("float64")
            pairs[:, 0], self._agreed_stop = self.world.agree(pairs[:, 0], self._stop_requested)
        first = self.step - len(pending) + 1  # the step number of pending[0]
        values = []
        for k, (value, norm) in enumerate(pairs.tolist()):
            if not (math.isfinite(value) and math.isfinite(norm)):
                self.losses.extend(values)
                raise TrainingError(
                    f"step {first + k}: the loss is {value} and the gradient norm {norm}; "
                    f"no update was applied from that step on. {self._last_good()}"
                )
            values.append(float(value))
        self.losses.extend(values)
        return values

    def _last_good(self) -> str:
        """Where the run can go on from, for the message of a TrainingError."""
        fix = "lower --lr, raise --warmup or set --clip-norm"
        if self.checkpoint_step is None:
            return f"No checkpoint was saved yet; {fix} and start again."
        return (
            f"The last good checkpoint, {self.out / checkpoint.CHECKPOINT_NAME} (step "
            f"{self.checkpoint_step}), is intact; {fix}, or resume with: "
            f"{runs.resume_command(self.out, self.world and self.world.size)}"
        )
