"""The training loop: batches -> loss -> backward -> Adam with warm-up, plus evaluation and
checkpoints.

    trainer = Trainer(TrainConfig(task="copy", out="runs/copy"))
    result = trainer.train()          # progress bar; Ctrl-C / SIGTERM save a checkpoint, stop
    Trainer.resume("runs/copy").train()

One step (the paper's §5):  logits = model(src, BOS+tgt);  loss = label-smoothed
cross-entropy against tgt+EOS, averaged over non-pad tokens;  loss.backward();  clip the
gradient norm;  Adam(β1 0.9, β2 0.98, ε 1e-9) with lr = factor·d_model^-0.5·min(step^-0.5,
step·warmup^-1.5).

What a run writes in ``out/``: ``metrics.jsonl`` (one JSON record per log/eval line,
runs/metrics.py), ``checkpoint.safetensors`` (the latest; atomic, checkpoint/),
``result.json`` (the result card) and ``plots/*.png`` (report.py). A run directory has one
run and one writer: ``train()`` refuses a directory that holds another run (unless
``overwrite=True``) and locks it against a second process (runs/lock.py). Ctrl-C and
SIGTERM: stopping.py.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import signal
import time
from pathlib import Path
from typing import IO, Any

from .. import backend
from ..config import TrainConfig, TransformerConfig
from ..data.batching import BatchStream
from ..data.tasks import Task, make_task
from ..errors import ConfigError, TrainingError
from ..nn import build_model
from ..optim import Adam, NoamSchedule
from ..runtime import checkpoint, runs
from . import averaging, evaluation, graph_mode, progress, report, stopping
from .step import TrainingStep


class Trainer(TrainingStep):
    """Builds task, model, optimizer and schedule from a TrainConfig; runs and resumes."""

    def __init__(self, config: TrainConfig, task: Task | None = None):
        self.cfg = cfg = config.resolved()
        backend.normalize_device(cfg.device)  # DeviceError for a name that is no device
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
        if self.task.name == "lm":  # the decoder-only model reads and predicts one sequence
            overrides["decoder_only"] = True
        short = cfg.model_overrides.get("max_len")
        if short is not None and short < self.task.max_len:  # found now, not at a long batch
            raise ConfigError(
                f"TrainConfig: model_overrides sets max_len to {short}, but task "
                f"{self.task.name!r} has sequences of up to {self.task.max_len} positions; "
                f"give max_len of at least {self.task.max_len}, or leave it out"
            )
        overrides.update(cfg.model_overrides)
        block = overrides.pop("block", None)  # the layer's switches; the fields given win
        self.model_cfg = TransformerConfig.preset(cfg.preset, block, **overrides)
        self.model = build_model(self.model_cfg, seed=cfg.seed).to(cfg.device)
        # this trainer's dropout generator: made the default before each of its steps and
        # evaluations (a later Trainer's manual_seed replaces the defaults, not this one)
        self.generator = backend.default_generator(cfg.device)
        self.optimizer = Adam(self.model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
        factor = NoamSchedule.factor_for_peak(cfg.peak_lr, self.model_cfg.d_model, cfg.warmup)
        self.schedule = NoamSchedule(self.optimizer, self.model_cfg.d_model, cfg.warmup, factor)
        self.stream = BatchStream(
            self.task.splits["train"], cfg.batch_size, seed=cfg.seed, max_len=self.task.max_len
        )
        self.averaging = averaging.CheckpointAverage(cfg)  # the final model: the last steps' mean
        self.step = 0
        self.losses: list[float] = []  # one per step: the curve a resumed run must reproduce
        self.out = Path(cfg.out)
        self.elapsed = 0.0  # training seconds over all sessions of this run
        self.checkpoint_step: int | None = None  # step of the last checkpoint written
        self.resumed_from: Path | None = None  # the checkpoint file resume() loaded
        vocab = self.model_cfg.tgt_vocab  # bar, lines, notes (the smoothed loss's floor at V)
        self.reporter = progress.Reporter(cfg, lambda: self._writer, vocab)
        self.started: float | None = None  # perf_counter() when train() began: the card's
        self.started_at_step = 0  # wall time; the step it began at (> 0: a resumed run)
        self._owns_out = False  # out/ holds this trainer's own run (written or resumed)
        self._stop_requested: str | None = None  # "SIGINT" / "SIGTERM" once one arrived
        self._finishing = False  # after the loop's last save: a signal stops at once
        self._pending: list[tuple[Any, Any]] = []  # (loss, grad norm) on the device, per step
        self._healthy: Any = None  # device flag: every step so far was finite (run_step)
        self.grad_hook: Any = None  # hook(flat gradient buffers, loss) after backward
        self.loss_scale = 1.0  # the loss is multiplied by this before backward
        self.world: Any = None  # distributed.World.attach: sharded batches, rank 0 writes
        self._graph_mode: tuple[str, str | None] | None = None  # graph_mode.choose: (mode, why)
        self._graph_lines: set[str] = set()  # the lines graph_mode.say said
        self._agreed_stop: str | None = None  # the stop every rank agreed on (world only)

    # ------------------------------------------------------------------ the loop
    def train(self, *, overwrite: bool = False) -> dict[str, Any]:
        """Train to ``cfg.steps``; log, checkpoint and evaluate along the way (in that order:
        a finished step is saved before an evaluation can fail); then ``finish()``.

        The run directory is locked for the whole call (a second process is refused, naming
        this one's PID). A directory that holds another run is refused unless this trainer
        resumed it or ``overwrite`` is set (the old run's files are then removed first).

        Ctrl-C (SIGINT) or SIGTERM (``kill``, ``timeout``, schedulers) in the loop finishes
        the current step, saves a checkpoint, prints the command that resumes, and returns
        ``{"interrupted": True, "step": ..., "signal": "SIGINT" | "SIGTERM"}``; a second one
        stops at once (KeyboardInterrupt, or SystemExit(143); the last checkpoint stays
        intact). After the loop, with the last step saved, a signal stops the final
        evaluation, result card or plots at once, with the same result (resuming redoes
        them). The previous signal handlers are restored on return.
        """
        self.started, self.started_at_step = time.perf_counter(), self.step
        owned = self._owns_out or (
            self.resumed_from is not None
            and self.out.resolve() == self.resumed_from.parent.resolve()
        )
        self._stop_requested = self._agreed_stop = None
        self._finishing = False
        open_out = functools.partial(runs.open_run, self.out, owned=owned, overwrite=overwrite)
        with stopping.handlers(self._on_signal):
            if self.world is None:
                lock = open_out()
            else:  # rank 0 opens out/ and every rank learns how that went (a refusal stops all)
                lock = self.world.begin(open_out)
                if not self._writer:  # another rank of a data-parallel job: rank 0 writes
                    return self._train_locked()
            try:
                if self.resumed_from is not None and not self._owns_out and owned:
                    runs.truncate_metrics(self.out / "metrics.jsonl", self.step)
                self._owns_out = True
                return self._train_locked()
            finally:
                lock.release()

    def _train_locked(self) -> dict[str, Any]:
        cfg, reporter = self.cfg, self.reporter
        graph_mode.choose(self)  # CUDA graphs or eager (one line why), once the world is known
        log = runs.MetricsLog(self.out / "metrics.jsonl" if self._writer else os.devnull)
        reporter.open(self.step)
        self.averaging.begin(self.model, cfg, self.step)  # train on from the last step's weights
        if self.task.name.startswith("translate"):
            reporter.check_bleu()
        tokens, t_window = 0, time.perf_counter()
        window = progress.loss_window(cfg.log_every)  # the steps the shown loss averages
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
                if self.averaging.due(self.step):  # one of the weights the final model averages
                    self.averaging.add(self.step, self.model)
                log_now = self.step % cfg.log_every == 0 or self.step == cfg.steps
                value = self.read_back()[-1] if log_now else None  # the one wait per log line
                self.elapsed += time.perf_counter() - t0
                tokens += batch.n_tokens
                if reporter.bar is not None:
                    reporter.bar.update(1)
                if log_now:
                    now = time.perf_counter()  # loss: the last batch's; loss_mean: shown
                    mean, averaged = progress.running_mean(self.losses, window)
                    record = dict(
                        step=self.step, split="train", loss=value, loss_mean=mean,
                        loss_window=averaged, lr=self.optimizer.lr,
                        tokens_per_s=tokens / max(now - t_window, 1e-9), elapsed=self.elapsed,
                    )  # fmt: skip
                    tokens, t_window = 0, now
                    log.write(record)
                    reporter.log_line(record)
                if self.step % cfg.checkpoint_every == 0 or self._stopping():
                    self.save()  # before any evaluation: a failing one cannot lose this step
                if self._stopping():
                    return self._stopped(self._stopping())
                evaluate_now = self.step % cfg.eval_every == 0 and self.step < cfg.steps
                if evaluate_now and self._writer:
                    metrics = self.evaluate("valid", cfg.eval_samples)
                    log.write(dict(step=self.step, split="valid", **metrics, **reporter.smoothing))
                    scored = self._scored("valid", cfg.eval_samples)  # a sample: said
                    reporter.eval_line(self.step, "valid", metrics, scored=scored)
                if evaluate_now and self.world is not None:  # the ranks wait for rank 0's
                    self.world.wait_for_evaluation(self.step)  # evaluation, with no deadline
        finally:
            reporter.close()
            log.close()
        self.save()  # a signal during this save waits for it (it only sets the flag) ...
        if self._stop_requested and self.world is None:
            return self._stopped(self._stop_requested)
        self._finishing = True  # ... from here on the last step is on disk: stop at once
        try:
            return self.finish()
        except stopping.StopNow as stop:
            if self.world is not None:  # the other ranks wait in finish() for this result
                self.world.bcast({"interrupted": True, "step": self.step, "signal": stop.args[0]})
            return self._stopped(stop.args[0], after_loop=True)
        finally:
            self._finishing = False

    def _stopped(self, stop: str, after_loop: bool = False) -> dict[str, Any]:
        """Print the command that resumes (rank 0) and return the interrupted result."""
        if self.world is not None:
            self.world.agreed_stop = stop  # every rank ends with 130/143, no MPI_Abort
        again = stopping.resume_line(self.out, self.world)
        self.reporter.stopped(self.step, stop, again, after_loop)
        return {"interrupted": True, "step": self.step, "signal": stop}

    @property
    def _writer(self) -> bool:
        """True when this process writes the run's files and prints (not a rank > 0)."""
        return self.world is None or self.world.is_writer

    def _stopping(self) -> str | None:
        """The stop to act on now: this process's signal, or (data parallel) the one every
        rank agreed on at the last log line."""
        return self._stop_requested if self.world is None else self._agreed_stop

    def _on_signal(self, signum: int, frame: Any) -> None:  # noqa: ARG002
        name = signal.Signals(signum).name
        if self._finishing and self._writer:  # the last step is saved: stop the rest now
            raise stopping.StopNow(name)
        if self._stop_requested:  # a second signal: stop now
            if signum == signal.SIGTERM:
                raise SystemExit(128 + signal.SIGTERM)
            raise KeyboardInterrupt
        self._stop_requested = name
        again = "Ctrl-C" if signum == signal.SIGINT else name
        self.reporter.signal_received(name, again, None if self.world is None else self.world.size)

    def finish(self) -> dict[str, Any]:
        """Final evaluation on the held-out split, the result card and the plots (rank 0 of a
        data-parallel job; the other ranks wait for its result, which may be "interrupted").
        The model is first the mean of the run's last checkpoints (averaging.py), saved."""
        if self.averaging.apply(self.model, self.step):  # the mean of the last checkpoints,
            self.save()  # saved as the model (the last step's weights kept to train on)
        if not self._writer:
            result = self.world.bcast(None, after_evaluation=True)
            if result.get("interrupted"):
                self.world.agreed_stop = result["signal"]
            return result
        split = self.cfg.final_eval_split
        metrics = self.evaluate(split, self.cfg.final_eval_samples)
        scored = self._scored(split, self.cfg.final_eval_samples)
        averaged = averaging.describe(self.averaging.final_steps(self.step))
        self.reporter.eval_line(self.step, split, metrics, final=True, scored=scored,
                                averaged=averaged)  # fmt: skip
        with runs.MetricsLog(self.out / "metrics.jsonl") as log:
            log.write(dict(step=self.step, split=split, **metrics, **self.reporter.smoothing))
        result = report.result_card(self, metrics)
        report.write_result(self, result)
        if self.world is not None:
            self.world.bcast(result, after_evaluation=True)
        return result

    # ------------------------------------------------------------------ evaluation
    def capture_steps(self, warmup: int = 2, max_graphs: int = 16,
                      max_bytes: int | None = None) -> Any:  # fmt: skip
        """Replay each batch shape's training step from a CUDA graph, captured at its
        ``warmup + 1``-th step (fast/gpu/cuda_graph.py), whatever ``cfg.cuda_graph`` says
        (``train()`` chooses by itself: graph_mode.py). A GPU with the fast tier on, one
        process, Adam; else TrainingError. The ``GraphedSteps`` become this trainer's
        ``run_step`` and are returned (``stats()``, ``failed``: which shapes run eagerly)."""
        return graph_mode.capture(self, warmup, max_graphs, max_bytes)

    def graph_report(self) -> dict[str, Any]:
        """How the steps ran: {"requested", "mode": "graph" | "eager" | "off", "why"}, plus
        the graphs' ``stats()`` (graphs, replays, eager_steps, fallbacks, pool_bytes,
        max_bytes) in mode "graph" (graph_mode.report)."""
        return graph_mode.report(self)

    def evaluate(self, split: str = "valid", samples: int | None = None) -> dict[str, float]:
        """Loss and token accuracy (teacher forcing) and greedy exact-match / BLEU on
        ``samples`` pairs of ``split`` (see evaluation.py). Leaves the training run untouched
        (the dropout generator's state is restored)."""
        backend.random.set_default_generator(self.generator)  # this trainer's, as in steps
        metrics = evaluation.evaluate(
            self.model, self.task, split, samples,
            label_smoothing=self.cfg.label_smoothing, device=self.cfg.device,
        )  # fmt: skip
        if self.task.name.startswith("translate") and "bleu" not in metrics:
            self.reporter.check_bleu()  # says once that sacrebleu is missing
        return metrics

    def _scored(self, split: str, samples: int | None) -> tuple[int, int]:
        """(sentences an evaluation of the first ``samples`` of ``split`` scores, sentences
        in the split)."""
        total = len(self.task.splits[split])
        return min(samples or total, total), total

    # ------------------------------------------------------------------ checkpoints
    def save(self, path: Path | None = None) -> Path:
        """Model, optimizer, schedule, data position, RNG and log state in one atomic file.

        Refuses (TrainingError) to overwrite a checkpoint with non-finite weights, or when a
        step since the last read-back was non-finite (``read_back`` raises).
        """
        self.read_back()
        state = self.model.state_dict()
        bad = [k for k, v in state.items() if not backend.all_finite(v)]
        if bad:
            raise TrainingError(
                f"step {self.step}: weights {bad[:3]} hold NaN or Inf, so no checkpoint was "
                f"written. {self._last_good()}"
            )
        if not self._writer:  # rank 0 writes the (identical) state
            self.checkpoint_step = self.step
            return self.out / checkpoint.CHECKPOINT_NAME
        arrays = {f"model.{k}": backend.to_numpy(v) for k, v in state.items()}
        opt_arrays, opt_meta = self.optimizer.state_dict()
        arrays.update({f"optim.{k}": backend.to_numpy(v) for k, v in opt_arrays.items()})
        average_arrays, average_meta = self.averaging.state()  # average.*, last.*: averaging.py
        arrays.update(average_arrays)
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
            rng=self.generator.state(),
            average=average_meta,
        )
        written = checkpoint.save_checkpoint(
            path or self.out / checkpoint.CHECKPOINT_NAME, arrays, meta
        )
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
        different run. Every field of the file is checked before use (runs/resume.py).
        """
        point = runs.read_resume_point(run, **changes)  # the file, checked; the run's config
        trainer = cls(point.config)
        runs.restore(point, trainer)  # weights, optimizer, schedule, data position, RNG
        meta = point.meta
        trainer.step, trainer.losses = meta["step"], [float(x) for x in meta["losses"]]
        trainer.elapsed = float(meta["elapsed"])
        trainer.resumed_from = path = point.path
        same_dir = trainer.out.resolve() == path.parent.resolve()
        trainer.checkpoint_step = (
            trainer.step if same_dir and path.name == checkpoint.CHECKPOINT_NAME else None
        )
        return trainer

    # ------------------------------------------------------------------ plots
    def plot(self) -> None:
        """Loss/accuracy curves and the learning-rate schedule, into ``out/plots`` (a figure
        that cannot be drawn gives a warning, never a failed run)."""
        report.draw_plots(self)

    def plot_attention(
        self, path: Path | IO[bytes], split: str | None = None, index: int | None = None
    ) -> Any:
        """Heatmaps of the last decoder layer's cross-attention (one panel per head) while
        the model decodes held-out example ``index`` (None: the first of the first 16 it gets
        right; report.plot_attention): which source token each output looks at."""
        return report.plot_attention(self, path, split, index)
