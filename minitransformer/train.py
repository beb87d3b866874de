"""The training loop: batches -> loss -> backward -> Adam with warm-up, plus evaluation,
checkpoints, a metrics log, a result card and plots.

    trainer = Trainer(TrainConfig(task="copy", out="runs/copy"))
    result = trainer.train()          # progress bar; Ctrl-C / SIGTERM save a checkpoint, stop
    Trainer.resume("runs/copy").train()

One step (the paper's §5):  logits = model(src, BOS+tgt);  loss = label-smoothed
cross-entropy against tgt+EOS, averaged over non-pad tokens;  loss.backward();  clip the
gradient norm;  Adam(β1 0.9, β2 0.98, ε 1e-9) with lr = factor·d_model^-0.5·min(step^-0.5,
step·warmup^-1.5).

What a run writes in ``out/``: ``metrics.jsonl`` (one JSON record per log/eval line),
``checkpoint.npz`` (the latest; atomic), ``best.npz`` is not kept — the last one is the one
you resume from — ``result.json`` (the result card) and ``plots/*.png``. A run directory
has one run and one writer: ``train()`` refuses a directory that holds another run (unless
``overwrite=True``) and locks it against a second process (see runs.py).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import signal
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import backend, checkpoint, runs
from . import functional as F
from .checks import is_int, is_real
from .config import PRESETS, TransformerConfig
from .data.batching import BatchStream, make_batch
from .data.metrics import bleu, exact_match
from .data.tasks import Task, make_task
from .decode import greedy_decode
from .errors import ConfigError, TrainingError
from .nn import Transformer
from .optim import Adam, NoamSchedule
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
        _check_train_fields(out)
        backend.normalize_device(out.device)  # DeviceError for a name that is no device
        return out

    def __post_init__(self) -> None:
        """Every field given is checked here, at construction (not after training)."""
        if not isinstance(self.task, str) or self.task not in TASK_DEFAULTS:
            raise ConfigError(
                f"TrainConfig: unknown task {self.task!r}; choose one of {', '.join(TASK_DEFAULTS)}"
            )
        _check_train_fields(self)


SPLITS = ("train", "valid", "test")


def _check_train_fields(cfg: TrainConfig) -> None:
    """ConfigError naming the first bad field of ``cfg`` (``None``s are the task's defaults)."""

    def bad(name: str, expected: str) -> ConfigError:
        value = getattr(cfg, name)
        return ConfigError(f"TrainConfig: {name} must be {expected}, got {value!r}")

    positive = ("steps", "batch_size", "warmup", "log_every", "eval_every",
                "eval_samples", "checkpoint_every", "final_eval_samples")  # fmt: skip
    for key in positive:
        value = getattr(cfg, key)
        if value is not None and (not is_int(value) or value <= 0):
            raise bad(key, "a positive integer" + (" or None" if key.startswith("final") else ""))
    if cfg.peak_lr is not None and not (is_real(cfg.peak_lr) and 0 < cfg.peak_lr < 1):
        raise bad("peak_lr", "in (0, 1) (a number, e.g. 1e-3)")
    if not (is_real(cfg.label_smoothing) and 0 <= cfg.label_smoothing < 1):
        raise bad("label_smoothing", "a number in [0, 1) (the paper: 0.1)")
    if cfg.dropout is not None and not (is_real(cfg.dropout) and 0 <= cfg.dropout < 1):
        raise bad("dropout", "a number in [0, 1) or None (the preset's)")
    if cfg.clip_norm is not None and not (is_real(cfg.clip_norm) and 0 < cfg.clip_norm < math.inf):
        raise bad("clip_norm", "positive and finite (or None: no clipping)")
    if not is_int(cfg.seed) or cfg.seed < 0:
        raise bad("seed", "a non-negative integer")
    if cfg.preset is not None and cfg.preset not in PRESETS:
        raise bad("preset", f"None or one of {', '.join(PRESETS)}")
    if cfg.final_eval_split not in SPLITS:
        raise bad("final_eval_split", f"one of {', '.join(SPLITS)}")
    for key in ("task_knobs", "model_overrides"):
        if not isinstance(getattr(cfg, key), dict):
            raise bad(key, "a dict {name: value}")
    unknown = sorted(
        set(cfg.model_overrides) - {f.name for f in dataclasses.fields(TransformerConfig)}
    )
    if unknown:
        raise bad("model_overrides", f"a dict of TransformerConfig fields; unknown: {unknown}")
    for key in ("progress", "plots"):
        if not isinstance(getattr(cfg, key), bool):
            raise bad(key, "True or False")
    if not isinstance(cfg.device, str) or not isinstance(cfg.out, str):
        raise bad("device" if not isinstance(cfg.device, str) else "out", "a string")


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
        self.resumed_from: Path | None = None  # the checkpoint file resume() loaded
        self._owns_out = False  # out/ holds this trainer's own run (written or resumed)
        self._stop_requested: str | None = None  # "SIGINT" / "SIGTERM" once one arrived
        self._bar: Any = None  # the tqdm bar, or None for plain lines
        self._noted: set[str] = set()
        self._pending: list[tuple[Any, Any]] = []  # (loss, grad norm) on the device, per step
        self._healthy: Any = None  # device flag: every step so far was finite
        self.grad_hook: Any = None  # hook(flat gradient buffers, loss) after backward
        self.loss_scale = 1.0  # the loss is multiplied by this before backward
        # Data parallelism (distributed.World.attach sets it): batches are sharded, losses
        # and the stop flag agreed at log lines, and only the writer (rank 0) writes files.
        self.world: Any = None
        self._agreed_stop: str | None = None  # the stop every rank agreed on (world only)

    # ------------------------------------------------------------------ one step
    def train_step(self, batch) -> Any:
        """Forward, backward, clip, update; returns the loss (per non-pad target token) as a
        0-d array on the device. Nothing in it waits for the device (no host read):

        - the batch's token ids are checked on the host, where they are made, before upload;
        - the loss and the gradient norm stay on the device until ``read_back()`` (at each
          log line and before each checkpoint) turns them into numbers;
        - the NaN/Inf guard is decided on the device: the update is applied only while
          every step so far had a finite loss and gradient norm (``Optimizer.step(apply_if=
          ...)``), so a bad step never changes the weights, and ``read_back()`` raises
          TrainingError naming it.
        """
        if not self.model.training:
            self.model.train()
        logits = self.model(batch.src, batch.tgt_in)  # host ids: checked, then uploaded
        loss = F.cross_entropy(
            logits,
            batch.tgt_out,
            label_smoothing=self.cfg.label_smoothing,
            ignore_index=self.model_cfg.pad_id,
        )
        if self.loss_scale != 1.0:
            loss = loss * self.loss_scale
        self.optimizer.zero_grad()
        loss.backward()
        grads = self.optimizer.gather_grads()
        if self.grad_hook is not None:
            self.grad_hook(grads, loss.data)
        if self.cfg.clip_norm:
            norm = self.optimizer.clip_grad_norm(self.cfg.clip_norm)
        else:
            norm = self.optimizer.grad_norm()
        xp = backend.namespace(norm)
        healthy = xp.isfinite(loss.data) & xp.isfinite(norm)
        if self._healthy is not None:
            healthy = healthy & self._healthy
        self._healthy = healthy  # sticky: after a bad step no update is ever applied
        self.optimizer.step(apply_if=healthy)  # the n-th update uses lr_at(n) ...
        self.schedule.step()  # ... then the schedule sets the next step's lr
        self._pending.append((loss.data, norm))
        return loss.data

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
            f"The last good checkpoint, {self.out / 'checkpoint.npz'} (step "
            f"{self.checkpoint_step}), is intact; {fix}, or resume with: "
            f"{runs.resume_command(self.out)}"
        )

    # ------------------------------------------------------------------ the loop
    def train(self, *, overwrite: bool = False) -> dict[str, Any]:
        """Train to ``cfg.steps``; log, checkpoint and evaluate along the way (in that order:
        a finished step is saved before an evaluation can fail).

        The run directory is locked for the whole call (a second process is refused, naming
        this one's PID). A directory that holds another run is refused unless this trainer
        resumed it or ``overwrite`` is set (the old run's files are then removed first).

        Ctrl-C (SIGINT) or SIGTERM (``kill``, ``timeout``, schedulers) finishes the current
        step, saves a checkpoint, prints the command that resumes, and returns
        ``{"interrupted": True, "step": ..., "signal": "SIGINT" | "SIGTERM"}``; a second one
        stops at once (KeyboardInterrupt, or SystemExit(143) for SIGTERM; the last
        checkpoint on disk stays intact).
        """
        owned = self._owns_out or (
            self.resumed_from is not None
            and self.out.resolve() == self.resumed_from.parent.resolve()
        )
        if not self._writer:  # another rank of a data-parallel job: rank 0 writes
            return self._train_locked()
        lock = runs.open_run(self.out, owned=owned, overwrite=overwrite)
        try:
            if self.resumed_from is not None and not self._owns_out and owned:
                runs.truncate_metrics(self.out / "metrics.jsonl", self.step)
            self._owns_out = True
            return self._train_locked()
        finally:
            lock.release()

    def _train_locked(self) -> dict[str, Any]:
        cfg = self.cfg
        log_path = self.out / "metrics.jsonl" if self._writer else os.devnull
        log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115
        main_thread = threading.current_thread() is threading.main_thread()
        stops = (signal.SIGINT, signal.SIGTERM)
        previous = {s: signal.signal(s, self._on_signal) for s in stops} if main_thread else {}
        self._stop_requested = self._agreed_stop = None
        self._bar = bar = self._progress_bar()
        if self.task.name.startswith("translate"):
            self._check_bleu()
        tokens, t_window = 0, time.perf_counter()
        try:
            while self.step < cfg.steps:
                batch = next(self.stream)
                t0 = time.perf_counter()
                if self.world is not None:  # this rank's rows, and its share of the loss
                    shard, self.loss_scale = self.world.shard(batch)
                    self.train_step(shard)
                else:
                    self.train_step(batch)
                self.step += 1
                log_now = self.step % cfg.log_every == 0 or self.step == cfg.steps
                value = self.read_back()[-1] if log_now else None  # the one wait per log line
                self.elapsed += time.perf_counter() - t0
                tokens += batch.n_tokens
                if bar is not None:
                    bar.update(1)
                if log_now:
                    now = time.perf_counter()
                    record = dict(
                        step=self.step, split="train", loss=value, lr=self.optimizer.lr,
                        tokens_per_s=tokens / max(now - t_window, 1e-9), elapsed=self.elapsed,
                    )  # fmt: skip
                    tokens, t_window = 0, now
                    self._log(log, record)
                    if bar is not None:
                        bar.set_postfix(loss=f"{value:.3f}", lr=f"{self.optimizer.lr:.2e}",
                                        tok_s=f"{record['tokens_per_s']:.0f}")  # fmt: skip
                    self._say(
                        f"step {self.step}/{cfg.steps}  loss {value:.4f}  "
                        f"lr {self.optimizer.lr:.2e}  {record['tokens_per_s']:.0f} tok/s"
                    )
                if self.step % cfg.checkpoint_every == 0 or self._stopping():
                    self.save()  # before any evaluation: a failing one cannot lose this step
                if self._stopping():
                    stopped = self._stopping()
                    if bar is not None:
                        bar.close()
                    if self._writer:
                        again = runs.resume_command(self.out)
                        if self.world is not None:
                            again = f"mpiexec -n {self.world.size} {again} --data-parallel"
                        print(
                            f"\nInterrupted ({stopped}) at step {self.step}; checkpoint saved. "
                            f"Resume with:\n  {again}",
                            file=sys.stderr,
                            flush=True,
                        )
                    return {"interrupted": True, "step": self.step, "signal": stopped}
                if self.step % cfg.eval_every == 0 and self.step < cfg.steps and self._writer:
                    metrics = self.evaluate("valid", cfg.eval_samples)
                    self._log(log, dict(step=self.step, split="valid", **metrics))
                    self._say(f"step {self.step} valid  " + _fmt(metrics))
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
            if bar is not None:
                bar.close()
            self._bar = None
            log.close()
        self.save()
        return self.finish()

    @property
    def _writer(self) -> bool:
        """True when this process writes the run's files and prints (not a rank > 0)."""
        return self.world is None or self.world.is_writer

    def _stopping(self) -> str | None:
        """The stop to act on now: this process's signal, or (data parallel) the one every
        rank agreed on at the last log line."""
        return self._stop_requested if self.world is None else self._agreed_stop

    def _progress_bar(self) -> Any:
        """A tqdm bar when asked for and stderr is a terminal; else None (plain lines, one
        per log interval: what a log file, a pipe or CI wants)."""
        if not (self.cfg.progress and _isatty(sys.stderr) and self._writer):
            return None
        try:
            from tqdm import tqdm  # the text bar: no widget warnings in notebooks
        except ImportError:
            self._note("tqdm", "tqdm is not installed, so progress comes as plain lines "
                       "(pip install tqdm for a progress bar)")  # fmt: skip
            return None
        return tqdm(
            total=self.cfg.steps, initial=self.step, unit="step", desc=f"{self.cfg.task}",
            dynamic_ncols=True, file=sys.stderr,
        )  # fmt: skip

    def _check_bleu(self) -> None:
        """Say at the start, once, when BLEU cannot be computed (sacrebleu missing)."""
        try:
            import sacrebleu  # noqa: F401
        except ImportError:
            self._note("sacrebleu", "sacrebleu is not installed, so BLEU is left out of the "
                       "evaluations (pip install sacrebleu)")  # fmt: skip

    def _note(self, key: str, text: str) -> None:
        """A one-line note on stderr, once per trainer and key."""
        if key not in self._noted and self._writer:
            self._noted.add(key)
            print(f"minitransformer: note: {text}", file=sys.stderr, flush=True)

    def _say(self, line: str) -> None:
        """A plain progress line on stderr when there is no progress bar (logs, CI, pipes)."""
        if self._bar is None and self._writer:
            print(line, file=sys.stderr, flush=True)

    def finish(self) -> dict[str, Any]:
        """Final evaluation on the held-out split, the result card and the plots (rank 0
        of a data-parallel job; the other ranks wait for its result)."""
        if not self._writer:
            return self.world.bcast(None)
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
        if self.world is not None:
            result["data_parallel_ranks"] = self.world.size
        (self.out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        if cfg.plots:
            self.plot()
        if self.world is not None:
            self.world.bcast(result)
        return result

    def _mean_tokens_per_s(self) -> float:
        records, _ = runs.read_metrics(self.out / "metrics.jsonl")
        rates = [r["tokens_per_s"] for r in records if isinstance(r.get("tokens_per_s"), float)]
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
            try:
                metrics["bleu"] = bleu(hyps, refs)
            except ImportError:  # an optional package: the run goes on without BLEU
                self._check_bleu()
        return metrics

    # ------------------------------------------------------------------ checkpoints
    def save(self, path: Path | None = None) -> Path:
        """Model, optimizer, schedule, data position, RNG and log state in one atomic file.

        Refuses (TrainingError) to overwrite a checkpoint with non-finite weights, or when a
        step since the last read-back was non-finite (``read_back`` raises).
        """
        self.read_back()
        state = self.model.state_dict()
        bad = [k for k, v in state.items() if not _finite(v)]
        if bad:
            raise TrainingError(
                f"step {self.step}: weights {bad[:3]} hold NaN or Inf, so no checkpoint was "
                f"written. {self._last_good()}"
            )
        if not self._writer:  # rank 0 writes the (identical) state
            self.checkpoint_step = self.step
            return self.out / "checkpoint.npz"
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
        different run. Every field of the file is checked before use (runs.resume_trainer).
        """
        return runs.resume_trainer(cls, run, **changes)

    # ------------------------------------------------------------------ helpers
    def plot(self) -> None:
        """Loss/accuracy curves and the learning-rate schedule, into ``out/plots``.

        A figure that cannot be drawn gives a warning, never a failed run.
        """
        try:
            import matplotlib  # noqa: F401  (optional)
        except ImportError:
            self._note(
                "matplotlib",
                "matplotlib is not installed, so no plots were drawn (pip install matplotlib;"
                " then: minitransformer plot --run RUN)",
            )
            return
        from . import viz

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

    def _on_signal(self, signum, frame) -> None:  # noqa: ARG002
        name = signal.Signals(signum).name
        if self._stop_requested:  # a second signal: stop now
            if signum == signal.SIGTERM:
                raise SystemExit(128 + signal.SIGTERM)
            raise KeyboardInterrupt
        self._stop_requested = name
        if self._bar is None and self._writer:
            if self.world is not None:
                print(f"\n{name}: the ranks stop together at the next log line, after a "
                      "checkpoint", file=sys.stderr, flush=True)  # fmt: skip
                return
            again = "Ctrl-C" if signum == signal.SIGINT else name
            print(f"\n{name}: finishing this step, then saving a checkpoint ({again} again to "
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


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _hardware(device: str) -> dict[str, Any]:
    import os

    return dict(
        machine=platform.machine(),
        processor=backend.cpu_model() or platform.processor() or platform.machine(),
        cpu_count=os.cpu_count(),
        python=platform.python_version(),
        numpy=backend.np.__version__,
        device=backend.normalize_device(device),
    )
