"""What a finished run leaves beside its checkpoint: the result card ``result.json`` and the
plots ``plots/*.png`` (what the person watching sees while it trains, the progress bar or
plain lines and the notes, is progress.py).

Only the process that writes the run's files reports (rank 0 of a data-parallel job); the
others stay silent. Nothing here changes the training: a plot that cannot be drawn is a
warning, never a failed run.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import textwrap
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from .. import backend, fast
from ..backend import host
from ..data.batching import make_batch
from ..runtime.runs import files, read_metrics
from ..tensor import no_grad
from .evaluation import showcase

# ---------------------------------------------------------------------- after training


def result_card(trainer: Any, metrics: dict[str, float]) -> dict[str, Any]:
    """The summary of a finished run (``result.json``): task, steps, time, throughput, the
    final metrics, the steps whose weights the final model averages (``[steps]``: the last
    step's alone; train/averaging.py), both configs, the parameter count and the machine.

    ``wall_time_s``: the seconds of the ``train()`` call that writes the card, from its start
    to the card: training, evaluations, checkpoints, final test (the plots come after it).
    A resumed run's card counts its last session and says ``resumed_at_step``; a card
    written outside ``train()`` has only the steps' time.
    ``train_time_s``: the training steps alone, over every session of the run.
    ``cuda_graphs``: how the steps ran (graph_record; the counts are this session's)."""
    cfg = trainer.cfg
    last = trainer.losses[-20:]
    records, _ = read_metrics(trainer.out / "metrics.jsonl")
    rates = [r["tokens_per_s"] for r in records if isinstance(r.get("tokens_per_s"), float)]
    wall = trainer.elapsed if trainer.started is None else time.perf_counter() - trainer.started
    result = dict(
        task=cfg.task,
        seed=cfg.seed,
        steps=trainer.step,
        wall_time_s=round(wall, 1),
        train_time_s=round(trainer.elapsed, 1),
        tokens_per_s=round(sum(rates) / len(rates) if rates else 0.0, 1),
        final_train_loss=round(sum(last) / max(len(last), 1), 4),
        eval_split=cfg.final_eval_split,
        metrics={k: round(v, 4) for k, v in metrics.items()},
        averaged_steps=trainer.averaging.final_steps(trainer.step),  # the model: their mean
        config=trainer.model_cfg.to_dict(),
        train_config=dataclasses.asdict(cfg),
        parameters=trainer.model.num_parameters(),
        ops=fast.describe(backend.normalize_device(cfg.device)),
        hardware=host.hardware(backend.normalize_device(cfg.device)),
    )
    result["cuda_graphs"] = graph_record(trainer.graph_report())
    if trainer.started_at_step:
        result["resumed_at_step"] = trainer.started_at_step
    if trainer.world is not None:
        result["data_parallel_ranks"] = trainer.world.size
    if trainer.model_cfg.decoder_only:  # what the language model writes, from nothing
        result["samples"] = lm_samples(trainer)
    return result


MIB = 2**20


def graph_record(report: dict[str, Any]) -> dict[str, Any]:
    """The result card's ``cuda_graphs``: from ``Trainer.graph_report()``, whether graphs were
    asked for (``requested``), the ``mode`` ("graph": replayed from CUDA graphs; "eager": on a
    GPU, every step eagerly; "off": the CPU, which has none) and ``why`` it is not "graph";
    with graphs, the batch shapes captured (``graphs``), the steps replayed (``replays``) and
    run eagerly (``eager_steps``), the steps of each reason to run eagerly (``fallbacks``), and
    the graphs' shared memory pool and its budget in MiB (``pool_mib``, ``max_mib``)."""
    record = {key: report.get(key) for key in ("requested", "mode", "why")}
    if report.get("mode") == "off":
        return record  # the CPU: no graphs, nothing to count
    for key in ("graphs", "replays", "eager_steps", "fallbacks"):
        if key in report:
            record[key] = report[key]
    for key, name in (("pool_bytes", "pool_mib"), ("max_bytes", "max_mib")):
        if report.get(key) is not None:
            record[name] = round(report[key] / MIB, 1)
    return record


def graph_line(record: dict[str, Any]) -> str | None:
    """The end of a run on a GPU in one line, from ``graph_record``: ``CUDA graphs: 2 batch
    shapes captured, 1,994 steps replayed, 6 eager (fallbacks: ...); memory pool 41.2 MiB
    of 4,096.0 MiB`` or ``CUDA graphs: none, every step eager: why``; None on the CPU."""
    if record["mode"] == "off":
        return None
    if record["mode"] != "graph":
        why = record.get("why")
        return "CUDA graphs: none, every step eager" + (f": {why}" if why else "")
    shapes = record.get("graphs", 0)
    line = (
        f"CUDA graphs: {shapes:,} batch shape{'s' if shapes != 1 else ''} captured, "
        f"{record.get('replays', 0):,} steps replayed, {record.get('eager_steps', 0):,} eager"
    )
    fallbacks = record.get("fallbacks") or {}
    if fallbacks:
        listed = ", ".join(f"{reason} {n:,} steps" for reason, n in fallbacks.items())
        line += f" (fallbacks: {listed})"  # the rest: each shape's first steps, before capture
    if "pool_mib" in record:
        budget = f" of {record['max_mib']:,.1f} MiB" if "max_mib" in record else ""
        line += f"; memory pool {record['pool_mib']:,.1f} MiB{budget}"
    return line


def lm_samples(trainer: Any, n: int = 3, temperature: float = 0.8) -> list[str]:
    """``n`` verses a language model writes from the start token alone, at ``temperature``,
    drawn with the run's seed (the result card's ``samples``)."""
    model, task = trainer.model, trainer.task
    prompts = [[task.vocab.bos_id]] * n
    out = model.generate(prompts, task.max_len, temperature, seed=trainer.cfg.seed)
    return [task.detokenize(ids) for ids in out]


def write_result(trainer: Any, result: dict[str, Any]) -> None:
    """``result.json`` in the run directory, then the plots when the run asked for them.

    Written whole, then renamed over the name (runs/files.py): a ``result.json`` that is a
    symbolic link is replaced, never written through."""
    files.write_text(trainer.out, "result.json", json.dumps(result, indent=2) + "\n")
    if trainer.cfg.plots:
        trainer.plot()


def draw_plots(trainer: Any) -> None:
    """Loss/accuracy curves, the learning-rate schedule and the attention of one held-out
    example (a language model's self-attention, else the cross-attention), into
    ``out/plots``. A figure that cannot be drawn gives a warning.

    Each figure is saved through runs/files.py: a ``plots/`` that is a symbolic link is
    refused (a warning), a link at a figure's name is replaced, never written through."""
    try:
        import matplotlib  # noqa: F401  (optional)
    except ImportError:
        trainer.reporter.note(
            "matplotlib",
            "matplotlib is not installed, so no plots were drawn (pip install matplotlib;"
            " then: minitransformer plot --run RUN)",
        )
        return
    from ..tools import viz

    out, plots = trainer.out, trainer.out / "plots"
    try:
        with files.replacing(out, "plots/curves.png") as file:
            title = f"{trainer.cfg.task}: training curves of the run in {out}"
            viz.plot_training_curves(out / "metrics.jsonl", title=title, path=file)
        steps = list(range(1, trainer.cfg.steps + 1))
        with files.replacing(out, "plots/lr_schedule.png") as file:
            viz.plot_lr_schedule(steps, [trainer.schedule.lr_at(s) for s in steps], path=file)
        kind = trainer.model_cfg.attention
        if trainer.model_cfg.decoder_only and kind != "full":  # no weights to draw
            trainer.reporter.note(
                "attention", f"no attention figure: {kind} attention never forms the weights"
            )
            return
        with files.replacing(out, "plots/attention.png") as file:
            trainer.plot_attention(file)
    except Exception as err:  # noqa: BLE001 - the run's result is already written
        warnings.warn(f"could not draw the plots in {plots}: {err}", stacklevel=3)


def plot_attention(
    trainer: Any, path: Path | IO[bytes], split: str | None = None, index: int | None = None
) -> Any:
    """Heatmaps of the last decoder layer's cross-attention (one panel per head) while the
    model decodes a held-out example: which source token each output looks at (a language
    model: its last layer's self-attention over held-out verse ``index``, default 0).
    ``path``: a file name or a binary file (a PNG), as every ``viz`` function takes.

    ``index`` None: the first of the first ``evaluation.SHOWCASE`` examples whose greedy
    output is the reference (evaluation.showcase, one batched decode); when none is, example
    0, and the title says so and gives the reference, the output's tokens that are not in
    it marked red. The rows are always the model's own output, whose weights these are."""
    from ..tools import viz

    cfg, model, model_cfg, task = trainer.cfg, trainer.model, trainer.model_cfg, trainer.task
    split = split or cfg.final_eval_split
    if model_cfg.decoder_only:
        return _plot_self_attention(trainer, path, split, index or 0)
    index, output, right, looked = showcase(model, task, split, index, device=cfg.device)
    (source, target), eos = task.splits[split][index], model_cfg.eos_id
    src = backend.asarray(make_batch([(source, [])]).src, device=cfg.device)
    tgt_in = backend.asarray([[model_cfg.bos_id, *output]], device=cfg.device)
    weights = _stored_weights(model, model.decoder.layers[-1].cross_attn, src, tgt_in)
    label = _token_labeller(task.vocab)
    title = f"{cfg.task}: cross-attention of the last decoder layer, {split} example {index}"
    among = f"{split} examples 0-{looked - 1}"
    rows, marked = "target position (queries)", None
    if right and looked > 1:
        title += f"\n(the first of {among} whose greedy output is the reference)"
    elif right:
        title += " (greedy output = the reference)"
    else:  # the rows are a wrong output: say so, give the reference, mark what it adds
        matcher = difflib.SequenceMatcher(None, [*output, eos], [*target, eos], autojunk=False)
        kept = {i for a, _, n in matcher.get_matching_blocks() for i in range(a, a + n)}
        marked = [i for i in range(len(output) + 1) if i not in kept]
        how = "red: output tokens not in it" if marked else "it leaves out part of it"
        none = f"none of {among} is right; " if looked > 1 else ""
        title += f"\nmodel output differs from the reference ({none}{how})\nreference: "
        title += textwrap.shorten(task.references(split)[index], 160)
        rows = "model output (differs from the reference)"
    tokens = [label(i) for i in [*output, eos]]
    return viz.plot_attention(weights, [label(i) for i in source], tokens, title=title,
                              ylabel=rows, marked_rows=marked, path=path)  # fmt: skip


def _plot_self_attention(trainer: Any, path: Path | IO[bytes], split: str, index: int) -> Any:
    """A language model's last-layer self-attention over held-out verse ``index``: which
    earlier token each position looks at (the upper triangle is the causal mask's zeros)."""
    from ..tools import viz

    model, bos = trainer.model, trainer.model_cfg.bos_id
    _, verse = trainer.task.splits[split][index]
    ids = [bos, *verse]
    attention = model.decoder.layers[-1].self_attn
    weights = _stored_weights(model, attention, backend.asarray([ids], device=trainer.cfg.device))
    label = _token_labeller(trainer.task.vocab)
    tokens = [label(i) for i in ids]
    return viz.plot_attention(
        weights, tokens, tokens,
        title=f"lm: self-attention of the last layer, {split} verse {index}", path=path,
    )  # fmt: skip


def _stored_weights(model: Any, attention: Any, *inputs: Any) -> Any:
    """The weights (H, T, S) of one ``attention`` layer while ``model(*inputs)`` runs once, a
    batch of one, in eval mode without a graph (host NumPy)."""
    model.eval()
    model.attention_weights(True)
    try:
        with no_grad():
            model(*inputs)
        return backend.to_numpy(attention.last_weights)[0]  # (1, H, T, S) -> (H, T, S)
    finally:
        model.attention_weights(False)


def _token_labeller(tokenizer: Any) -> Callable[[int], str]:
    """id -> a short string for plot ticks (a word, or a BPE piece without its end mark)."""
    vocab = getattr(tokenizer, "vocab", tokenizer)  # a BPE keeps its pieces in a Vocab
    return lambda i: vocab.id_to_token(int(i)).replace("</w>", "")
