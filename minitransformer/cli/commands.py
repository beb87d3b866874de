"""The command line's commands: each runs one parsed command and returns its exit status.

    train       Trainer (train/), with --resume, --data-parallel over MPI
    translate   Translator.from_checkpoint(...).translate(sentences)
    generate    TextSampler.from_checkpoint(...).generate(prompts): a language model writes
    evaluate    Translator.from_checkpoint(...).evaluate(split)
    plot        viz.plot_training_curves of a run's metrics log
    bench       bench.main (bench/)
    ablate      the ablation study (ablate/)
    scale       the scaling study of the language model (scaling/)
    attention   explorer.explore(Translator.from_checkpoint(...), sentence): page and grid

Errors are raised, not printed: ``main`` (cli/__init__.py) turns them into one line and an
exit status.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from .. import backend, fast
from ..backend import host
from ..errors import ConfigError
from ..runtime import checkpoint, runs
from ..runtime.pretrained import pretrained_folder
from ..runtime.sampler import TextSampler
from ..runtime.translator import Translator
from ..tools import ablate, bench, explorer, scaling, viz
from ..train import TrainConfig, Trainer, report
from . import flags
from .parser import subparser

# train options -> TrainConfig fields (None: not given on the command line); main() words
# the library's messages with the flags of these fields
TRAIN_FIELDS = {
    "preset": "preset", "steps": "steps", "batch_size": "batch_size", "warmup": "warmup",
    "lr": "peak_lr", "dropout": "dropout", "label_smoothing": "label_smoothing",
    "clip_norm": "clip_norm", "seed": "seed", "device": "device", "out": "out",
    "log_every": "log_every", "eval_every": "eval_every", "eval_samples": "eval_samples",
    "checkpoint_every": "checkpoint_every", "final_eval_samples": "final_eval_samples",
    "average_last": "average_last", "average_every": "average_every", "cuda_graph": "cuda_graph",
}  # fmt: skip


def train_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``train``: a new run, or ``--resume`` one; ``--data-parallel`` over MPI ranks."""
    world = None
    if args.data_parallel:
        from ..runtime import distributed  # here: without --data-parallel, nothing of MPI loads

        world = distributed.World.from_mpi()
        # a collective: every rank calls it (a bare ``cuda`` gives each rank its own GPU)
        args.device = distributed.device_of_rank(world, args.device)
        host.set_blas_threads(distributed.blas_threads_per_rank(distributed.local_size(world)))

    given = {
        field: getattr(args, name)
        for name, field in TRAIN_FIELDS.items()
        if getattr(args, name) is not None
    }
    given["progress"] = not args.no_progress
    if args.no_plots:
        given["plots"] = False
    overrides = dict(args.model)
    if "tokenizer" in overrides:  # --model tokenizer=char: the lm task's knob
        if (args.task or "lm") != "lm":
            subparser(parser, "train").error(
                f"--model tokenizer=... chooses the lm task's tokenizer; task {args.task} has "
                "its own (see --knob)"
            )
        args.knob.append(("tokenizer", overrides.pop("tokenizer")))
    if overrides:
        given["model_overrides"] = overrides
    if args.knob:
        given["task_knobs"] = dict(args.knob)
        if args.task is not None:
            given["task_knobs"] = flags.checked_knobs(args.task, args.knob)
    if args.resume:
        run = _checkpoint_path("--resume", args.resume)
        if world is None:  # before the task and model are built; --out: the run's own
            home = checkpoint.checkpoint_file(run).parent
            out = home if args.out is None else Path(args.out)
            own = out.resolve() == home.resolve()
            runs.check_out(out, owned=own, overwrite=args.overwrite)
        if args.task is not None:
            given["task"] = args.task
        trainer = Trainer.resume(run, **given)
        _check_graph_request(args, trainer.cfg.device, parser)  # the run's device, now known
        if trainer.step >= trainer.cfg.steps and (world is None or world.is_writer):
            print(
                f"the run is already at step {trainer.step} of {trainer.cfg.steps}: running "
                "its final evaluation (again); pass --steps N to train longer",
                file=sys.stderr,
            )
    else:
        if args.task is None:
            subparser(parser, "train").error("train needs a TASK (or --resume RUN)")
        given.setdefault("out", f"runs/{args.task}")
        _check_graph_request(args, given.get("device", TrainConfig.device), parser)
        if world is None:  # at once, not after the data and model are built (data parallel:
            runs.check_out(given["out"], owned=False, overwrite=args.overwrite)  # rank 0's)
        trainer = Trainer(TrainConfig(task=args.task, **given))
    if world is not None:
        world.attach(trainer)
    if world is None or world.is_writer:
        print(trainer.task.summary(), file=sys.stderr)
        print(
            f"model: {trainer.model.extra_repr()}, {trainer.model.num_parameters():,} "
            f"parameters, device {trainer.cfg.device}; ops: "
            f"{fast.describe(backend.normalize_device(trainer.cfg.device))}"
            + (f", resuming at step {trainer.step}" if args.resume else "")
            + (f", data-parallel over {world.size} ranks" if world is not None else "")
            + _mode_words(trainer.graph_report()),
            file=sys.stderr,
            flush=True,
        )
    result = trainer.train(overwrite=args.overwrite)
    if result.get("interrupted"):
        return 128 + (signal.SIGTERM if result.get("signal") == "SIGTERM" else signal.SIGINT)
    if world is not None and not world.is_writer:
        return 0
    graphs = report.graph_line(result["cuda_graphs"])  # the result card's: None on the CPU
    if graphs:
        print(graphs, file=sys.stderr)
    if args.json:  # the test line said it already; this is for scripts
        keys = ("task", "steps", "wall_time_s", "train_time_s", "metrics")
        print(json.dumps({k: result[k] for k in keys}))
    plots = f"; plots: {trainer.out / 'plots'}" if trainer.cfg.plots else ""
    print(f"result card: {trainer.out / 'result.json'}{plots}")
    return 0


def _check_graph_request(
    args: argparse.Namespace, device: str, parser: argparse.ArgumentParser
) -> None:
    """An explicit --cuda-graph on a device that is no GPU asks for what cannot be: a usage
    error naming the fix. Left out, the default is quiet on the CPU (every step eager, as a
    CPU runs them), and on a GPU the Trainer says in one line why it runs a step eagerly."""
    name = backend.normalize_device(device)
    if args.cuda_graph and not name.startswith("cuda"):
        subparser(parser, "train").error(
            f"--cuda-graph needs a GPU, and this run is on {name}. Fix: add --device cuda, "
            "or leave --cuda-graph out (the CPU runs every step eagerly)"
        )


def _mode_words(graphs: dict) -> str:
    """How the steps will run, for the start line (Trainer.graph_report(); nothing on the
    CPU): replayed from CUDA graphs, or every step eager (the Trainer's note says why)."""
    if graphs["mode"] == "graph":
        return ", steps replayed from CUDA graphs (one a batch shape, once it is captured)"
    return ", every step eager" if graphs["mode"] == "eager" else ""


def ablate_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``ablate``: the study of the chosen variants, written to --out (or --list them)."""
    del parser
    settings = ablate.AblationSettings.fast() if args.fast else ablate.AblationSettings()
    if args.steps is not None:
        settings.steps = args.steps
        settings.warmup = min(settings.warmup, args.steps)
    settings.seed = args.seed
    settings.validate()
    chosen = ablate.select(args.only, settings)
    if args.list:
        for v in ablate.select([v.name for v in ablate.variants()], settings):
            print(f"{v.name:22s}{v.change}")
        return 0
    ablate.check_out(args.out, args.overwrite)  # before minutes of training, not after
    study = ablate.run_ablations(settings, chosen, progress=not args.no_progress)
    paths = ablate.write_study(study, args.out, overwrite=args.overwrite)
    print(ablate.markdown_table(study))
    print("wrote " + ", ".join(str(p) for p in paths))
    return 0


def _checkpoint_path(flag: str, text: str, task: str | None = None) -> Path:
    """A run directory or a checkpoint file given on the command line, checked for the
    mistakes a user makes (a typo, a run that has not saved yet) before anything loads;
    ``task``: the one whose run the command needs (the fix for a missing run trains it)."""
    path = Path(text)
    if not path.exists():
        first = f"train one first (minitransformer train {task}) or " if task else ""
        raise FileNotFoundError(
            f"{flag} {text}: no such run directory or checkpoint file. Fix: {first}check the path"
        )
    if path.is_dir() and not checkpoint.checkpoint_file(path).exists():
        raise FileNotFoundError(
            f"{flag} {text}: this directory holds no {checkpoint.CHECKPOINT_NAME} (is it the "
            "--out directory of `minitransformer train`, and did the run save a checkpoint?)"
        )
    return path


def _sentences(args: argparse.Namespace) -> list[str]:
    """The sentences to translate: the arguments, else one per line on stdin (which may be
    closed: ``translate ... <&-``, or a service that starts it without one)."""
    if args.sentences:
        return list(args.sentences)
    if sys.stdin is None or sys.stdin.closed:
        raise ConfigError(
            "no sentences to translate: none were given and stdin is closed. Fix: give them "
            'as arguments (minitransformer translate --checkpoint RUN "a sentence") or one '
            "per line on stdin (... < sentences.txt)"
        )
    if hasattr(sys.stdin, "reconfigure"):
        sys.stdin.reconfigure(errors="replace")  # undecodable bytes become U+FFFD (-> UNK)
    if sys.stdin.isatty():
        print("reading sentences from stdin, one per line (Ctrl-D ends)", file=sys.stderr)
    return [line.rstrip("\r\n") for line in sys.stdin]


def translate_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``translate``: the given sentences (or stdin's lines) with a trained checkpoint."""
    del parser
    translator = _translator(args)
    sentences = _sentences(args)
    lines = translator.translate(
        sentences, beam_size=args.beam, alpha=args.alpha, max_len=args.max_len
    )
    for line in lines:
        print(line)
    return 0


def generate_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``generate``: a language model (``train lm``) continues each prompt (none: writes
    from the start token), ``--samples`` times each, one text a line."""
    del parser
    prompts = args.prompts or [""]
    flags.check_text_count(len(prompts), args.samples)  # before the model loads
    path = _checkpoint_path("--checkpoint", args.checkpoint, "lm")
    sampler = TextSampler.from_checkpoint(path, device=args.device)
    texts = sampler.stream(prompts, args.samples, args.max_new_tokens, args.temperature,
                           args.top_k, args.seed)  # fmt: skip
    for text in texts:  # a batch at a time: memory is one batch's, whatever --samples is
        print(text, flush=True)
    return 0


def evaluate_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``evaluate``: BLEU / exact match of a checkpoint on a held-out split: one line saying
    what was measured (split, sentences, decoding: the model's defaults where --beam or
    --max-len is left out) and the scores, or ``--json``."""
    del parser
    translator = _translator(args)
    metrics = translator.evaluate(
        args.split, args.samples, beam_size=args.beam, alpha=args.alpha, max_len=args.max_len
    )
    beam = translator.decoding(args.beam, args.max_len).beam_size
    decoding = "greedy" if beam == 1 else f"beam {beam} (alpha {args.alpha:g})"
    if args.max_len is not None:
        decoding += f", at most {args.max_len:,} tokens"
    if args.json:
        scores = {k: round(v, 2 if k == "bleu" else 4) for k, v in metrics.items()
                  if k != "sentences"}  # fmt: skip
        print(json.dumps(dict(split=args.split, sentences=metrics["sentences"],
                              decoding=decoding, **scores), indent=2))  # fmt: skip
        return 0
    print(evaluation_line(args.split, decoding, metrics))
    return 0


def _translator(args: argparse.Namespace) -> Translator:
    """The model of --checkpoint (trained here) or of --pretrained (a Marian folder or Hub id)."""
    if args.pretrained is not None:
        return Translator.from_pretrained(pretrained_folder(args.pretrained), args.device)
    path = _checkpoint_path("--checkpoint", args.checkpoint, "translate")
    return Translator.from_checkpoint(path, device=args.device)


def evaluation_line(split: str, decoding: str, metrics: dict[str, float]) -> str:
    """``test split, 1,000 sentences, greedy: BLEU 99.35, exact match 97.2% (972)``."""
    n = int(metrics["sentences"])
    scores = []
    if "bleu" in metrics:
        scores.append(f"BLEU {metrics['bleu']:.2f}")
    em = metrics["exact_match"]
    scores.append(f"exact match {100 * em:.1f}% ({round(em * n):,} of {n:,})")
    return f"{split} split, {n:,} sentences, {decoding}: " + ", ".join(scores)


def plot_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``plot``: a run's training curves, into RUN/plots/curves.png or --to."""
    del parser
    run = Path(args.run)
    log = run / "metrics.jsonl"
    if not log.exists():
        raise FileNotFoundError(f"--run {run}: no metrics.jsonl there (is it a run directory?)")
    if args.to:
        target = _plot_target(Path(args.to))
        viz.plot_training_curves(log, path=target)
    else:  # inside the run: never through a link (a plots/ that points elsewhere)
        target = run / "plots" / "curves.png"
        links = runs.files.linked_entries(run, ["plots/curves.png"])
        if "plots" in links:
            raise runs.RunDirectoryError(
                f"--run {run}: {run / 'plots'} is a symbolic link, and plot writes inside the "
                "run only, never through a link. Fix: remove the link (rm "
                f"{runs.shell_path(run / 'plots')}) or draw elsewhere with --to FILE"
            )
        with runs.files.replacing(run, "plots/curves.png") as file:  # a linked file: replaced
            viz.plot_training_curves(log, path=file)
    print(f"wrote {target}")
    return 0


def _plot_target(to: Path) -> Path:
    """The file --to names: DIR/curves.png for an existing directory, TO.png for a name
    without a suffix (what matplotlib would write), TO itself for .png/.pdf/.svg."""
    if to.is_dir():
        return to / "curves.png"
    if to.suffix == "":
        return to.with_name(to.name + ".png")
    if to.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise ConfigError(f"--to {to}: unknown image suffix {to.suffix!r}; use .png, .pdf or .svg")
    if to.parent.exists() and not to.parent.is_dir():
        raise ConfigError(f"--to {to}: {to.parent} is a file, not a directory")
    return to


def scale_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``scale``: the scaling study (its flags checked by scaling/command.py)."""
    del parser
    return scaling.command.run(args)


def attention_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``attention``: the sentence translated by a checkpoint, its attention written as a
    page (--html) and a grid (--png); the request is checked before the model loads."""
    del parser
    explorer.check_request(args.sentence, args.html, args.png, args.overwrite)
    path = _checkpoint_path("--checkpoint", args.checkpoint, "translate")
    translator = Translator.from_checkpoint(path)
    written = explorer.explore(translator, args.sentence, args.html, args.png,
                               overwrite=args.overwrite, checkpoint=args.checkpoint)  # fmt: skip
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def bench_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``bench``: the benchmark (its flags were checked by bench/options.py)."""
    del parser
    return bench.main(args)


COMMANDS = {
    "train": train_command,
    "translate": translate_command,
    "generate": generate_command,
    "evaluate": evaluate_command,
    "plot": plot_command,
    "bench": bench_command,
    "ablate": ablate_command,
    "scale": scale_command,
    "attention": attention_command,
}
