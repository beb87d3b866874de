"""The training loop: batches -> loss -> backward -> Adam with warm-up, plus evaluation,
checkpoints, a metrics log, a result card and plots.

    trainer = Trainer(TrainConfig(task="copy", out="runs/copy"))
    result = trainer.train()          # progress bar; Ctrl-C saves a checkpoint and stops
    Trainer.resume("runs/copy").train()

One step (the paper's §5):  logits = model(src, BOS+tgt);  loss = label-smoothed
cross-entropy against tgt+EOS, averaged over non-pad tokens;  loss.backward();  clip the
gradient norm;  Adam(β1 0.9, β2 0.98, ε 1e-9) with lr = factor·d_model^-0.5·min(step^-0.5,
step·warmup^-1.5).

What a run writes in ``out/``: ``metrics.jsonl`` (one JSON record per log/eval line),
``checkpoint.npz`` (the latest; atomic), ``best.npz`` is not kept — the last one is the one
you resume from — ``result.json`` (the result card) and ``plots/*.png``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import signal
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import backend, checkpoint
from . import functional as F
from .config import TransformerConfig
from .data.batching import BatchStream, make_batch
from .data.metrics import bleu, exact_match
from .data.tasks import Task, make_task
from .decode import greedy_decode
from .errors import ConfigError, TrainingError
from .nn import Transformer
from .optim import Adam, NoamSchedule, clip_grad_norm
from .tensor import no_grad

# Defaults per task, chosen (and measured, see the README) so each reaches its target on a
# 2-core CPU: steps, batch size, warm-up, peak learning rate, and task knobs.
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "copy": dict(preset="tiny", steps=3000, batch_size=64, warmup=400, peak_lr=2e-3),
    "reverse": dict(preset="tiny", steps=3000, batch_size=64, warmup=400, peak_lr=2e-3),
    "sort": dict(preset="tiny", steps=3000, batch_size=64, warmup=400, peak_lr=2e-3),
    "translate": dict(preset="tiny", steps=4000, batch_size=64, warmup=800, peak_lr=3e-3),
    "translate-en-es": dict(preset="small", steps=4500, batch_size=64, warmup=1000, peak_lr=2e-3),
}


@dataclass
class TrainConfig:
    """Everything a run needs; stored in its checkpoint so ``--resume`` needs nothing else.

    ``None`` means "the task's default" (TASK_DEFAULTS).
    """

    task: str = "copy"
    preset: str | None = None
    steps: int | None = None
    batch_size: int | None = None
    warmup: int | None = None
    peak_lr: float | None = None
    label_smoothing: float = 0.1
    dropout: float | None = None  # None: the preset's
    clip_norm: float | None = 1.0
    seed: int = 0
    device: str = "cpu"
    out: str = "runs/copy"
    log_every: int = 50
    eval_every: int = 500
    eval_samples: int = 200  # sentences decoded at each periodic evaluation
    checkpoint_every: int = 500
    final_eval_split: str = "test"
    final_eval_samples: int | None = 1000  # None: the whole split
    task_knobs: dict[str, Any] = field(default_factory=dict)
    model_overrides: dict[str, Any] = field(default_factory=dict)
    progress: bool = True  # a tqdm bar; without it, one plain line per log step on stderr
    plots: bool = True  # draw plots/*.png at the end (matplotlib; a few seconds)

    def resolved(self) -> TrainConfig:
        """A copy with every ``None`` replaced by the task's default."""
        if self.task not in TASK_DEFAULTS:
            raise ConfigError(
                f"unknown task {self.task!r}; choose one of {', '.join(TASK_DEFAULTS)}"
            )
        out = dataclasses.replace(self)
        for key, value in TASK_DEFAULTS[self.task].items():
            if getattr(out, key) is None:
                setattr(out, key, value)
        positive = ("steps", "batch_size", "warmup", "log_every", "eval_every",
                    "eval_samples", "checkpoint_every")  # fmt: skip
        for key in positive:
            value = getattr(out, key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{key} must be a positive integer, got {value!r}")
        if not isinstance(out.peak_lr, (int, float)) or not 0 < out.peak_lr < 1:
            raise ConfigError(f"peak_lr must be in (0, 1), got {out.peak_lr!r}")
        if not 0 <= out.label_smoothing < 1:
            raise ConfigError(f"label_smoothing must be in [0, 1), got {out.label_smoothing!r}")
        if out.dropout is not None and not 0 <= out.dropout < 1:
            raise ConfigError(f"dropout must be in [0, 1), got {out.dropout!r}")
        if out.clip_norm is not None and not out.clip_norm > 0:
            raise ConfigError(
                f"clip_norm must be positive (or None: no clipping), got {out.clip_norm!r}"
            )
        if out.final_eval_samples is not None and out.final_eval_samples <= 0:
            raise ConfigError(
                f"final_eval_samples must be positive or None, got {out.final_eval_samples!r}"
            )
        backend.normalize_device(out.device)  # DeviceError for a name that is no device
        return out


# Options a resumed run may change; every other one is part of what the checkpoint is.
RESUMABLE = frozenset(
    {"steps", "progress", "plots", "device", "out", "log_every", "eval_every", "eval_samples",
     "checkpoint_every", "final_eval_split", "final_eval_samples"}
)  # fmt: skip


class Trainer:
    """Builds task, model, optimizer and schedule from a TrainConfig; runs and resumes."""

    def __init__(self, config: TrainConfig, task: Task | None = None):
        self.cfg = config.resolved()
        cfg = self.cfg
        backend.manual_seed(cfg.seed)
        self.task = task or make_task(cfg.task, seed=cfg.seed, **cfg.task_knobs)
        overrides = dict(
            src_vocab=self.task.vocab_size,
            tgt_vocab=self.task.vocab_size,
            max_len=max(self.task.max_len + 2, 16),
            label_smoothing=cfg.label_smoothing,
        )
        if cfg.dropout is not None:
            overrides["dropout"] = cfg.dropout
        overrides.update(cfg.model_overrides)
        self.model_cfg = TransformerConfig.preset(cfg.preset, **overrides)
        self.model = Transformer(self.model_cfg, seed=cfg.seed).to(cfg.device)
        self.optimizer = Adam(self.model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
        factor = NoamSchedule.factor_for_peak(cfg.peak_lr, self.model_cfg.d_model, cfg.warmup)
        self.schedule = NoamSchedule(self.optimizer, self.model_cfg.d_model, cfg.warmup, factor)
        self.stream = BatchStream(
            self.task.splits["train"], cfg.batch_size, seed=cfg.seed, max_len=self.task.max_len
        )
        self.step = 0
        self.losses: list[float] = []  # one per step: the curve a resumed run must reproduce
        self.out = Path(cfg.out)
        self.elapsed = 0.0  # training seconds over all sessions of this run
        self.checkpoint_step: int | None = None  # step of the last checkpoint written
        self._stop_requested = False

    # ------------------------------------------------------------------ one step
    def train_step(self, batch) -> float:
        """Forward, backward, clip, update. Returns the loss (per non-pad target token).

        A NaN/Inf loss or gradient norm raises TrainingError *before* the update, so the
        weights (and every checkpoint on disk) stay as they were.
        """
        dev = self.cfg.device
        src = backend.asarray(batch.src, device=dev)
        tgt_in = backend.asarray(batch.tgt_in, device=dev)
        tgt_out = backend.asarray(batch.tgt_out, device=dev)
        self.model.train()
        logits = self.model(src, tgt_in)
        loss = F.cross_entropy(
            logits,
            tgt_out,
            label_smoothing=self.cfg.label_smoothing,
            ignore_index=self.model_cfg.pad_id,
        )
        self.optimizer.zero_grad()
        loss.backward()
        value = loss.item()
        norm = clip_grad_norm(self.optimizer.params, self.cfg.clip_norm or math.inf)
        if not (math.isfinite(value) and math.isfinite(norm)):
            self.optimizer.zero_grad()
            raise TrainingError(
                f"step {self.step + 1}: the loss is {value} and the gradient norm {norm}; "
                f"training stopped before updating the weights. {self._last_good()}"
            )
        self.optimizer.step()  # the n-th update uses lr_at(n) ...
        self.schedule.step()  # ... then the schedule sets the next step's lr
        return value

    def _last_good(self) -> str:
        """Where the run can go on from, for the message of a TrainingError."""
        fix = "lower --lr, raise --warmup or set --clip-norm"
        if self.checkpoint_step is None:
            return f"No checkpoint was saved yet; {fix} and start again."
        return (
            f"The last good checkpoint, {self.out / 'checkpoint.npz'} (step "
            f"{self.checkpoint_step}), is intact; {fix}, or resume with: "
            f"minitransformer train --resume {self.out}"
        )

    # ------------------------------------------------------------------ the loop
    def train(self) -> dict[str, Any]:
        """Train to ``cfg.steps``; evaluate, log and checkpoint along the way.

        Ctrl-C (SIGINT) finishes the current step, saves a checkpoint, prints the command
        that resumes, and returns ``{"interrupted": True, "step": ...}``; a second Ctrl-C
        stops at once (KeyboardInterrupt; the last checkpoint on disk stays intact).
        """
        from tqdm import tqdm  # the text bar: no widget warnings in notebooks

        cfg = self.cfg
        if self.out.exists() and not self.out.is_dir():
            raise ConfigError(f"out {str(self.out)!r} is a file; pass a directory for the run")
        self.out.mkdir(parents=True, exist_ok=True)
        log = open(self.out / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, self._on_sigint) if main_thread else None
        self._stop_requested = False
        bar = tqdm(
            total=cfg.steps, initial=self.step, disable=not cfg.progress, unit="step",
            desc=f"{cfg.task}", dynamic_ncols=True, file=sys.stderr,
        )  # fmt: skip
        tokens, t_window = 0, time.perf_counter()
        try:
            while self.step < cfg.steps:
                batch = next(self.stream)
                t0 = time.perf_counter()
                value = self.train_step(batch)
                self.elapsed += time.perf_counter() - t0
                self.step += 1
                self.losses.append(value)
                tokens += batch.n_tokens
                bar.update(1)
                if self.step % cfg.log_every == 0 or self.step == cfg.steps:
                    now = time.perf_counter()
                    record = dict(
                        step=self.step, split="train", loss=value, lr=self.optimizer.lr,
                        tokens_per_s=tokens / max(now - t_window, 1e-9), elapsed=self.elapsed,
                    )  # fmt: skip
                    tokens, t_window = 0, now
                    self._log(log, record)
                    bar.set_postfix(loss=f"{value:.3f}", lr=f"{self.optimizer.lr:.2e}",
                                    tok_s=f"{record['tokens_per_s']:.0f}")  # fmt: skip
                    self._say(
                        f"step {self.step}/{cfg.steps}  loss {value:.4f}  "
                        f"lr {self.optimizer.lr:.2e}  {record['tokens_per_s']:.0f} tok/s"
                    )
                if self.step % cfg.eval_every == 0 and self.step < cfg.steps:
                    metrics = self.evaluate("valid", cfg.eval_samples)
                    self._log(log, dict(step=self.step, split="valid", **metrics))
                    self._say(f"step {self.step} valid  " + _fmt(metrics))
                if self.step % cfg.checkpoint_every == 0:
                    self.save()
                if self._stop_requested:
                    self.save()
                    bar.close()
                    print(
                        f"\nInterrupted at step {self.step}; checkpoint saved. Resume with:\n"
                        f"  minitransformer train --resume {self.out}",
                        file=sys.stderr,
                        flush=True,
                    )
                    return {"interrupted": True, "step": self.step}
        finally:
            if main_thread:
                signal.signal(signal.SIGINT, previous)
            bar.close()
            log.close()
        self.save()
        return self.finish()

    def _say(self, line: str) -> None:
        """A plain progress line on stderr when there is no progress bar (logs, CI, pipes)."""
        if not self.cfg.progress:
            print(line, file=sys.stderr, flush=True)

    def finish(self) -> dict[str, Any]:
        """Final evaluation on the held-out split, the result card and the plots."""
        cfg = self.cfg
        metrics = self.evaluate(cfg.final_eval_split, cfg.final_eval_samples)
        with open(self.out / "metrics.jsonl", "a", encoding="utf-8") as log:
            self._log(log, dict(step=self.step, split=cfg.final_eval_split, **metrics))
        result = dict(
            task=cfg.task,
            seed=cfg.seed,
            steps=self.step,
            wall_time_s=round(self.elapsed, 1),
            tokens_per_s=round(self._mean_tokens_per_s(), 1),
            final_train_loss=round(sum(self.losses[-20:]) / max(len(self.losses[-20:]), 1), 4),
            eval_split=cfg.final_eval_split,
            metrics={k: round(v, 4) for k, v in metrics.items()},
            config=self.model_cfg.to_dict(),
            train_config=dataclasses.asdict(cfg),
            parameters=self.model.num_parameters(),
            hardware=_hardware(cfg.device),
        )
        (self.out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        if cfg.plots:
            self.plot()
        return result

    def _mean_tokens_per_s(self) -> float:
        path = self.out / "metrics.jsonl"
        rates = [r["tokens_per_s"] for r in _read_jsonl(path) if "tokens_per_s" in r]
        return sum(rates) / len(rates) if rates else 0.0

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, split: str = "valid", samples: int | None = None) -> dict[str, float]:
        """Loss and token accuracy (teacher forcing) and greedy exact-match / BLEU.

        Leaves the training run untouched: the dropout generator's state is restored
        afterwards, so a run with evaluations draws the same masks as one without.
        """
        pairs = self.task.splits[split][: samples or None]
        refs = self.task.references(split)[: len(pairs)]
        generator = backend.default_generator(self.cfg.device)
        rng_state = generator.state()
        was_training = self.model.training
        self.model.eval()
        total, correct, count, hyps = 0.0, 0, 0, []
        try:
            with no_grad():
                for start in range(0, len(pairs), 100):
                    batch = make_batch(pairs[start : start + 100])
                    src = backend.asarray(batch.src, device=self.cfg.device)
                    tgt_in = backend.asarray(batch.tgt_in, device=self.cfg.device)
                    logits = self.model(src, tgt_in)
                    target = backend.asarray(batch.tgt_out, device=self.cfg.device)
                    loss = F.cross_entropy(  # smoothed like the training loss, so they compare
                        logits,
                        target,
                        label_smoothing=self.cfg.label_smoothing,
                        ignore_index=self.model_cfg.pad_id,
                        reduction="sum",
                    )
                    total += loss.item()
                    pred = backend.to_numpy(logits.data).argmax(-1)
                    mask = batch.tgt_out != self.model_cfg.pad_id
                    correct += int(((pred == batch.tgt_out) & mask).sum())
                    count += int(mask.sum())
                    for ids in greedy_decode(self.model, src, max_len=self.task.max_len + 1):
                        hyps.append(self.task.detokenize(ids))
        finally:
            self.model.train(was_training)
            generator.set_state(rng_state)
        metrics = dict(
            loss=total / max(count, 1),
            token_acc=correct / max(count, 1),
            exact_match=exact_match(hyps, refs),
        )
        if self.task.name.startswith("translate"):
            metrics["bleu"] = bleu(hyps, refs)
        return metrics

    # ------------------------------------------------------------------ checkpoints
    def save(self, path: Path | None = None) -> Path:
        """Model, optimizer, schedule, data position, RNG and log state in one atomic file.

        Refuses (TrainingError) to overwrite a checkpoint with non-finite weights.
        """
        state = self.model.state_dict()
        bad = [k for k, v in state.items() if not _finite(v)]
        if bad:
            raise TrainingError(
                f"step {self.step}: weights {bad[:3]} hold NaN or Inf, so no checkpoint was "
                f"written. {self._last_good()}"
            )
        arrays = {f"model.{k}": backend.to_numpy(v) for k, v in state.items()}
        opt_arrays, opt_meta = self.optimizer.state_dict()
        arrays.update({f"optim.{k}": backend.to_numpy(v) for k, v in opt_arrays.items()})
        meta = dict(
            kind="minitransformer-train",
            step=self.step,
            elapsed=self.elapsed,
            losses=self.losses,
            model_config=self.model_cfg.to_dict(),
            train_config=dataclasses.asdict(self.cfg),
            tokenizer=self.task.vocab.to_dict(),
            optimizer=opt_meta,
            schedule=self.schedule.state_dict(),
            stream=self.stream.state_dict(),
            rng=backend.default_generator(self.cfg.device).state(),
        )
        written = checkpoint.save_checkpoint(path or self.out / "checkpoint.npz", arrays, meta)
        if path is None:
            self.checkpoint_step = self.step
        return written

    @classmethod
    def resume(cls, run: str | Path, **changes: Any) -> Trainer:
        """A Trainer that continues the run in directory ``run`` (or a checkpoint file).

        ``changes`` may set the options in RESUMABLE (``steps`` to train longer, ``device``
        to continue on another device, ...); the run goes on writing next to its checkpoint
        unless ``out`` is given. Changing anything else (task, model, seed, batch size,
        learning rate ...) raises CheckpointError naming each difference: that would be a
        different run.
        """
        path = checkpoint.checkpoint_file(run)
        arrays, meta = checkpoint.load_checkpoint(path)
        if meta.get("kind") != "minitransformer-train":
            raise checkpoint.CheckpointError(
                f"cannot resume from {path}: it is not a training checkpoint of this library "
                "(no kind 'minitransformer-train'); pass the run directory of "
                "`minitransformer train`"
            )
        try:
            stored = dict(meta["train_config"])
            known = {f.name for f in dataclasses.fields(TrainConfig)}
            unknown = sorted(set(stored) - known)
            if unknown:
                raise checkpoint.CheckpointError(
                    f"cannot resume from {path}: it has training options this version does "
                    f"not know ({', '.join(unknown)}); resume it with the version that wrote it"
                )
            bad = sorted(set(changes) - known)
            if bad:
                raise ConfigError(f"resume: unknown option(s) {bad}; valid: {sorted(known)}")
            changes = {k: v for k, v in changes.items() if k in RESUMABLE or v is not None}
            differ = [
                f"{k} (checkpoint {stored.get(k)!r}, given {v!r})"
                for k, v in changes.items()
                if k not in RESUMABLE and stored.get(k) != v
            ]  # task, model, data, seed, optimisation: what makes the run this run
            if differ:
                raise checkpoint.CheckpointError(
                    f"cannot resume {path} with other settings: {'; '.join(differ)}. Fix: "
                    "leave these options out to continue the run as it was, or start a new "
                    "run in another directory (--out)"
                )
            changes.setdefault("out", str(path.parent))
            cfg = TrainConfig(**{**stored, **changes})
            trainer = cls(cfg)
            checkpoint.check_config(meta["model_config"], trainer.model_cfg.to_dict(), path=path)
            dev = trainer.cfg.device
            model_state = checkpoint.section(arrays, "model")
            trainer.model.load_state_dict(
                {k: backend.asarray(v, device=dev) for k, v in model_state.items()}
            )
            opt_state = checkpoint.section(arrays, "optim")
            trainer.optimizer.load_state_dict(
                {k: backend.asarray(v, device=dev) for k, v in opt_state.items()}, meta["optimizer"]
            )
            trainer.schedule.load_state_dict(meta["schedule"])
            trainer.stream.load_state_dict(meta["stream"])
            backend.default_generator(dev).set_state(meta["rng"])
            trainer.step, trainer.losses = int(meta["step"]), list(meta["losses"])
            trainer.elapsed = float(meta["elapsed"])
        except KeyError as err:
            raise checkpoint.CheckpointError(
                f"cannot resume from {path}: the checkpoint lacks {err} (an incomplete or "
                "foreign training checkpoint); resume from a file written by Trainer.save"
            ) from None
        trainer.checkpoint_step = trainer.step if path == trainer.out / "checkpoint.npz" else None
        trainer.out.mkdir(parents=True, exist_ok=True)
        _truncate_log(trainer.out / "metrics.jsonl", trainer.step)
        return trainer

    # ------------------------------------------------------------------ helpers
    def plot(self) -> None:
        """Loss/accuracy curves and the learning-rate schedule, into ``out/plots``.

        A figure that cannot be drawn gives a warning, never a failed run.
        """
        try:
            from . import viz
        except ImportError:  # matplotlib is optional
            return
        plots = self.out / "plots"
        try:
            viz.plot_training_curves(self.out / "metrics.jsonl", path=plots / "curves.png")
            steps = list(range(1, self.cfg.steps + 1))
            viz.plot_lr_schedule(steps, [self.schedule.lr_at(s) for s in steps],
                                 path=plots / "lr_schedule.png")  # fmt: skip
            self.plot_attention(plots / "attention.png")
        except Exception as err:  # noqa: BLE001 - the run's result is already written
            warnings.warn(f"could not draw the plots in {plots}: {err}", stacklevel=2)

    def plot_attention(self, path: Path, split: str | None = None, index: int = 0):
        """Heatmaps of the last decoder layer's cross-attention (one panel per head) while
        the model decodes held-out example ``index``: which source token each output looks at."""
        from . import viz

        source, _ = self.task.splits[split or self.cfg.final_eval_split][index]
        src = backend.asarray(make_batch([(source, [])]).src, device=self.cfg.device)
        output = greedy_decode(self.model, src, max_len=self.task.max_len + 1)[0]
        tgt_in = backend.asarray([[self.model_cfg.bos_id, *output]], device=self.cfg.device)
        self.model.eval()
        self.model.attention_weights(True)
        try:
            with no_grad():
                self.model(src, tgt_in)
            weights = self.model.decoder.layers[-1].cross_attn.last_weights  # (1, H, T, S)
        finally:
            self.model.attention_weights(False)
        label = _token_labeller(self.task.vocab)
        return viz.plot_attention(
            backend.to_numpy(weights)[0],
            [label(i) for i in source],
            [label(i) for i in [*output, self.model_cfg.eos_id]],
            title=f"{self.cfg.task}: cross-attention of the last decoder layer, {split or 'test'}"
            f" example {index}",
            path=path,
        )

    def _on_sigint(self, signum, frame) -> None:  # noqa: ARG002
        if self._stop_requested:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self._stop_requested = True
        if not self.cfg.progress:
            print("\nCtrl-C: finishing this step, then saving a checkpoint (Ctrl-C again to "
                  "stop at once)", file=sys.stderr, flush=True)  # fmt: skip

    @staticmethod
    def _log(handle, record: dict[str, Any]) -> None:
        handle.write(json.dumps(record) + "\n")
        handle.flush()


def _finite(a: Any) -> bool:
    """True when array ``a`` holds no NaN or Inf (one device sync)."""
    xp = backend.namespace(a)
    return bool(xp.all(xp.isfinite(a)))


def _fmt(metrics: dict[str, float]) -> str:
    return "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())


def _token_labeller(tokenizer: Any):
    """id -> a short string for plot ticks (a word, or a BPE piece without its end mark)."""
    vocab = getattr(tokenizer, "vocab", tokenizer)  # a BPE keeps its pieces in a Vocab
    return lambda i: vocab.id_to_token(int(i)).replace("</w>", "")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics log; a line cut short by a crash is skipped."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _truncate_log(path: Path, step: int) -> None:
    """Drop log records written after the checkpoint we resume from (a crash left them)."""
    records = [r for r in _read_jsonl(path) if r.get("step", 0) <= step]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _hardware(device: str) -> dict[str, Any]:
    import os

    return dict(
        machine=platform.machine(),
        processor=_cpu_model() or platform.processor() or platform.machine(),
        cpu_count=os.cpu_count(),
        python=platform.python_version(),
        numpy=backend.np.__version__,
        device=backend.normalize_device(device),
    )


def _cpu_model() -> str | None:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else None."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
