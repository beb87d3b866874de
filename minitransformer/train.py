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
import time
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
    "copy": dict(preset="tiny", steps=1200, batch_size=64, warmup=200, peak_lr=3e-3),
    "reverse": dict(preset="tiny", steps=1500, batch_size=64, warmup=200, peak_lr=3e-3),
    "sort": dict(preset="tiny", steps=1500, batch_size=64, warmup=200, peak_lr=3e-3),
    "translate": dict(preset="tiny", steps=4000, batch_size=64, warmup=800, peak_lr=3e-3),
    "translate-en-es": dict(preset="small", steps=6000, batch_size=64, warmup=1000, peak_lr=2e-3),
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
    progress: bool = True

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
        for key in ("steps", "batch_size", "warmup", "log_every", "eval_every"):
            if getattr(out, key) <= 0:
                raise ConfigError(f"{key} must be positive, got {getattr(out, key)}")
        if not 0 < out.peak_lr < 1:
            raise ConfigError(f"peak_lr must be in (0, 1), got {out.peak_lr}")
        return out


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
        self._stop_requested = False

    # ------------------------------------------------------------------ one step
    def train_step(self, batch) -> float:
        """Forward, backward, clip, update. Returns the loss (per non-pad target token)."""
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
            raise TrainingError(
                f"step {self.step + 1}: the loss is {value} and the gradient norm {norm}; "
                f"training stopped before updating the weights. The last good checkpoint "
                f"({self.out / 'checkpoint.npz'}) is intact: lower --lr or raise --warmup, "
                "then resume."
            )
        self.optimizer.step()  # the n-th update uses lr_at(n) ...
        self.schedule.step()  # ... then the schedule sets the next step's lr
        return value

    # ------------------------------------------------------------------ the loop
    def train(self) -> dict[str, Any]:
        """Train to ``cfg.steps``; evaluate, log and checkpoint along the way."""
        from tqdm.auto import tqdm

        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        log = open(self.out / "metrics.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        previous = signal.signal(signal.SIGINT, self._on_sigint)
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
                if self.step % cfg.eval_every == 0 and self.step < cfg.steps:
                    metrics = self.evaluate("valid", cfg.eval_samples)
                    self._log(log, dict(step=self.step, split="valid", **metrics))
                if self.step % cfg.checkpoint_every == 0:
                    self.save()
                if self._stop_requested:
                    self.save()
                    bar.close()
                    print(
                        f"\nInterrupted at step {self.step}; checkpoint saved. Resume with:\n"
                        f"  minitransformer train --resume {self.out}",
                        file=sys.stderr,
                    )
                    return {"interrupted": True, "step": self.step}
        finally:
            signal.signal(signal.SIGINT, previous)
            bar.close()
            log.close()
        self.save()
        return self.finish()

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
        self.plot()
        return result

    def _mean_tokens_per_s(self) -> float:
        path = self.out / "metrics.jsonl"
        rates = [r["tokens_per_s"] for r in _read_jsonl(path) if "tokens_per_s" in r]
        return sum(rates) / len(rates) if rates else 0.0

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, split: str = "valid", samples: int | None = None) -> dict[str, float]:
        """Loss and token accuracy (teacher forcing) and greedy exact-match / BLEU."""
        pairs = self.task.splits[split][: samples or None]
        refs = self.task.references(split)[: len(pairs)]
        self.model.eval()
        total, correct, count, hyps = 0.0, 0, 0, []
        with no_grad():
            for start in range(0, len(pairs), 100):
                batch = make_batch(pairs[start : start + 100])
                src = backend.asarray(batch.src, device=self.cfg.device)
                logits = self.model(src, backend.asarray(batch.tgt_in, device=self.cfg.device))
                target = backend.asarray(batch.tgt_out, device=self.cfg.device)
                loss = F.cross_entropy(
                    logits, target, ignore_index=self.model_cfg.pad_id, reduction="sum"
                )
                total += loss.item()
                pred = backend.to_numpy(logits.data).argmax(-1)
                mask = batch.tgt_out != self.model_cfg.pad_id
                correct += int(((pred == batch.tgt_out) & mask).sum())
                count += int(mask.sum())
                for ids in greedy_decode(self.model, src, max_len=self.task.max_len + 1):
                    hyps.append(self.task.detokenize(ids))
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
        """Model, optimizer, schedule, data position, RNG and log state in one atomic file."""
        arrays = {f"model.{k}": backend.to_numpy(v) for k, v in self.model.state_dict().items()}
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
        return checkpoint.save_checkpoint(path or self.out / "checkpoint.npz", arrays, meta)

    @classmethod
    def resume(cls, run: str | Path, **changes: Any) -> Trainer:
        """A Trainer that continues the run in directory ``run`` (or a checkpoint file)."""
        path = Path(run)
        path = path / "checkpoint.npz" if path.is_dir() else path
        arrays, meta = checkpoint.load_checkpoint(path)
        if meta.get("kind") != "minitransformer-train":
            raise checkpoint.CheckpointError(f"{path}: not a training checkpoint of this library")
        cfg = TrainConfig(**{**meta["train_config"], **changes})
        trainer = cls(cfg)
        checkpoint.check_config(meta["model_config"], trainer.model_cfg.to_dict())
        model_state = {k[6:]: v for k, v in arrays.items() if k.startswith("model.")}
        trainer.model.load_state_dict(
            {k: backend.asarray(v, device=cfg.device) for k, v in model_state.items()}
        )
        opt_state = {
            k[6:]: backend.asarray(v, device=cfg.device)
            for k, v in arrays.items()
            if k.startswith("optim.")
        }
        trainer.optimizer.load_state_dict(opt_state, meta["optimizer"])
        trainer.schedule.load_state_dict(meta["schedule"])
        trainer.stream.load_state_dict(meta["stream"])
        backend.default_generator(cfg.device).set_state(meta["rng"])
        trainer.step, trainer.losses = meta["step"], list(meta["losses"])
        trainer.elapsed = meta["elapsed"]
        _truncate_log(trainer.out / "metrics.jsonl", trainer.step)
        return trainer

    # ------------------------------------------------------------------ helpers
    def plot(self) -> None:
        """Loss/accuracy curves and the learning-rate schedule, into ``out/plots``."""
        try:
            from . import viz
        except ImportError:  # matplotlib is optional
            return
        plots = self.out / "plots"
        viz.plot_training_curves(self.out / "metrics.jsonl", path=plots / "curves.png")
        steps = list(range(1, self.cfg.steps + 1))
        viz.plot_lr_schedule(steps, [self.schedule.lr_at(s) for s in steps],
                             path=plots / "lr_schedule.png")  # fmt: skip

    def _on_sigint(self, signum, frame) -> None:  # noqa: ARG002
        if self._stop_requested:  # a second Ctrl-C: stop now
            raise KeyboardInterrupt
        self._stop_requested = True

    @staticmethod
    def _log(handle, record: dict[str, Any]) -> None:
        handle.write(json.dumps(record) + "\n")
        handle.flush()


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _truncate_log(path: Path, step: int) -> None:
    """Drop log records written after the checkpoint we resume from (a crash left them)."""
    records = [r for r in _read_jsonl(path) if r.get("step", 0) <= step]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _hardware(device: str) -> dict[str, Any]:
    import os

    info = dict(
        machine=platform.machine(),
        processor=platform.processor() or platform.machine(),
        cpu_count=os.cpu_count(),
        python=platform.python_version(),
        device=backend.normalize_device(device),
    )
    return info
