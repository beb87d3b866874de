"""Data for the Transformer: vocabularies, tasks, batching and metrics, on host NumPy.

This package stands on the ground: it never imports the autograd core (tensor, ops, nn).

    from minitransformer.data import make_task, BatchStream, bleu
    task = make_task("translate", seed=0)
    stream = BatchStream(task.splits["train"], batch_size=64, seed=0)
    batch = next(stream)          # batch.src (B,S), batch.tgt_in (B,T), batch.tgt_out (B,T)

`SentencePieceTokenizer` reads a Marian / opus-mt folder (needs the `hf` extra).
"""

from minitransformer.data.batching import Batch, BatchStream, batches, make_batch
from minitransformer.data.bpe import BPE
from minitransformer.data.metrics import (
    bleu,
    copy_baseline,
    exact_match,
    token_accuracy,
    word_lookup_baseline,
)
from minitransformer.data.sentencepiece import SentencePieceTokenizer
from minitransformer.data.tasks import TASKS, Task, make_task, tokenizer_from_dict
from minitransformer.data.vocab import BOS, EOS, PAD, UNK, Tokenizer, Vocab

__all__ = [
    "BOS", "EOS", "PAD", "UNK", "Tokenizer", "Vocab", "BPE", "Task", "TASKS", "make_task",
    "tokenizer_from_dict", "Batch", "BatchStream", "batches", "make_batch", "bleu",
    "exact_match", "token_accuracy", "copy_baseline", "word_lookup_baseline",
    "SentencePieceTokenizer",
]  # fmt: skip
