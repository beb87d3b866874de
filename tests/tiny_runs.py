"""Shared sizes of the tiny training runs that the CLI, run-directory and MPI tests start,
and of the tiny models in Marian's layout that the pretrained-folder tests save.

One place for them, so a test file does not carry its own copy of the same flags.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

KNOBS = dict(n_train=200, n_valid=16, n_test=16, max_len=6)
"""Task knobs of a copy task small enough to train in a second."""

SIZE = dict(d_model=16, h=2, N=1, d_ff=32)
"""Model overrides of that tiny run."""

TINY = [
    "--model", "d_model=16", "--model", "h=2", "--model", "N=1", "--model", "d_ff=32",
    "--knob", "n_train=200", "--knob", "n_valid=16", "--knob", "n_test=16",
    "--knob", "max_len=6", "--batch-size", "8", "--warmup", "10", "--no-progress",
    "--no-plots", "--eval-samples", "8", "--final-eval-samples", "8",
]  # fmt: skip
"""The same run as ``minitransformer train`` flags."""

DP_TINY = [
    "--model", "d_model=16", "--model", "N=1", "--model", "d_ff=32", "--model", "h=2",
    "--knob", "n_train=200", "--dropout", "0", "--no-plots", "--no-progress",
    "--eval-every", "1000", "--eval-samples", "10", "--final-eval-samples", "10",
]  # fmt: skip
"""The flags of the 2-rank data-parallel runs (tests/test_distributed*.py)."""


def marian_config(vocab: int, pad_id: int = 0, eos_id: int = 1, **sizes):
    """A tiny TransformerConfig in Marian's (opus-mt's) layout: swish, sines then cosines,
    a logits bias, the decoder starting from the pad id; ``sizes`` override d_model 16, h 2,
    N 2, d_ff 32, max_len 64."""
    import minitransformer as mt

    sizes = {"d_model": 16, "h": 2, "N": 2, "d_ff": 32, "max_len": 64, **sizes}
    return mt.TransformerConfig(
        src_vocab=vocab, tgt_vocab=vocab, activation="swish", position_layout="halves",
        logits_bias=True, dropout=0.0, pad_id=pad_id, bos_id=pad_id, eos_id=eos_id, **sizes,
    )  # fmt: skip


def verse_tokenizer(folder, pairs: int, vocab_size: int):
    """A Marian SentencePiece tokenizer (en -> es) trained in ``folder`` on the first ``pairs``
    shipped verse pairs: what a tiny Marian folder's model starts from."""
    from minitransformer.data.sentencepiece import SentencePieceTokenizer
    from minitransformer.data.tasks import load_bible_pairs

    verses = load_bible_pairs()[:pairs]
    return SentencePieceTokenizer.train(
        [e for e, _ in verses], [s for _, s in verses], folder, vocab_size=vocab_size, seed=0,
        source_lang="en", target_lang="es",
    )  # fmt: skip


def rank_pids(mpiexec_pid: int) -> list[int]:
    """The python ranks under an mpiexec (its grandchildren, through hydra's proxy)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    return sorted(g for c in children.get(mpiexec_pid, []) for g in children.get(c, []))


MPIEXEC = Path(sys.executable).with_name("mpiexec")
"""MPICH's mpiexec of this environment (pip install -e ".[mpi]" puts it beside python)."""


def _have_mpi() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return MPIEXEC.exists()


needs_mpi = pytest.mark.skipif(
    not _have_mpi(), reason='mpi4py / mpiexec not installed (pip install -e ".[mpi]")'
)
"""Skips a test that starts real MPI jobs where mpi4py or mpiexec is missing."""
