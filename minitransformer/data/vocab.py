"""Token <-> id vocabulary, shared by source and target (so embeddings can be tied).

The first four ids are fixed for every vocabulary in this project:

    PAD = 0   padding; batching fills with it, the model builds its masks from it
    BOS = 1   begin of sequence; batching puts it in front of the decoder input
    EOS = 2   end of sequence; batching puts it after the decoder target
    UNK = 3   any token the vocabulary has not seen

`Tokenizer` is the small interface every task's tokenizer offers (`Vocab` for whole words,
`CharVocab` for characters, `minitransformer.data.bpe.BPE` for subwords): text in, ids out,
and back.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from minitransformer.errors import ConfigError, TokenIdError

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")


@runtime_checkable
class Tokenizer(Protocol):
    """What a trainer, a decoder and BLEU need from a tokenizer.

    `tokenize("a b c")` gives ids without BOS/EOS; `detokenize(ids)` stops at the first EOS
    and skips PAD/BOS, giving text that can be scored against a reference. `to_dict()` is
    JSON-serialisable so the tokenizer can travel inside a checkpoint.
    """

    pad_id: int
    bos_id: int
    eos_id: int
    unk_id: int

    def __len__(self) -> int: ...

    def tokenize(self, text: str) -> list[int]: ...

    def detokenize(self, ids: Iterable[int]) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...


class Vocab:
    """A whole-token vocabulary: PAD, BOS, EOS, UNK, then the tokens in a fixed order.

    >>> v = Vocab(["a", "b"])
    >>> v.encode(["b", "zzz"]), v.decode([5, 4, 2, 5])
    ([5, 3], ['b', 'a'])
    """

    pad_id, bos_id, eos_id, unk_id = PAD, BOS, EOS, UNK

    def __init__(self, tokens: Iterable[str] = ()) -> None:
        self._itos: list[str] = list(SPECIAL_TOKENS)
        self._stoi: dict[str, int] = {t: i for i, t in enumerate(self._itos)}
        for token in tokens:
            if not isinstance(token, str) or token == "":
                raise ConfigError(f"Vocab tokens must be non-empty strings; got {token!r}.")
            if token not in self._stoi:
                self._stoi[token] = len(self._itos)
                self._itos.append(token)

    @classmethod
    def from_tokens(cls, tokens: Iterable[str], min_count: int = 1) -> Vocab:
        """Build from a stream of tokens (all sentences, both sides).

        Tokens seen fewer than `min_count` times are left out (they will encode to UNK).
        Order is deterministic: most frequent first, ties broken alphabetically.
        """
        if min_count < 1:
            raise ConfigError(f"min_count must be >= 1; got {min_count}.")
        counts = Counter(tokens)
        kept = [t for t, c in counts.items() if c >= min_count and t not in SPECIAL_TOKENS]
        kept.sort(key=lambda t: (-counts[t], t))
        return cls(kept)

    def __len__(self) -> int:
        return len(self._itos)

    def __contains__(self, token: object) -> bool:
        return token in self._stoi

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocab) and self._itos == other._itos

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)})"

    @property
    def tokens(self) -> list[str]:
        """All tokens in id order, specials included (a copy)."""
        return list(self._itos)

    def token_to_id(self, token: str) -> int:
        """The id of one token (UNK if unknown)."""
        return self._stoi.get(token, UNK)

    def id_to_token(self, i: int) -> str:
        """The token of one id; raises TokenIdError for ids outside the vocabulary."""
        if not 0 <= i < len(self._itos):
            raise TokenIdError(
                f"token id {i} is outside the vocabulary of size {len(self)}; "
                "was the model trained with another vocabulary?"
            )
        return self._itos[i]

    def encode(self, tokens: Iterable[str]) -> list[int]:
        """Tokens -> ids; unknown tokens become UNK. No BOS/EOS is added."""
        get = self._stoi.get
        return [get(t, UNK) for t in tokens]

    def decode(self, ids: Iterable[int], strip_special: bool = True) -> list[str]:
        """Ids -> tokens, stopping at the first EOS.

        With `strip_special` (the default) PAD and BOS are skipped and EOS ends the sequence
        without being returned; UNK stays visible as "<unk>". With `strip_special=False`
        every id is returned as its token, EOS included, and nothing stops early.
        """
        out: list[str] = []
        for i in ids:
            i = int(i)
            if strip_special:
                if i == EOS:
                    break
                if i in (PAD, BOS):
                    continue
            out.append(self.id_to_token(i))
        return out

    def tokenize(self, text: str) -> list[int]:
        """Whitespace-split text -> ids (the `Tokenizer` interface)."""
        return self.encode(text.split())

    def detokenize(self, ids: Iterable[int]) -> str:
        """Ids -> space-joined text, stopping at EOS (the `Tokenizer` interface)."""
        return " ".join(self.decode(ids))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form, specials included, for checkpoints."""
        return {"type": "vocab", "tokens": list(self._itos)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Vocab:
        """Inverse of `to_dict`; checks that the special tokens sit at their fixed ids."""
        if d.get("type", "vocab") != "vocab" or "tokens" not in d:
            raise ConfigError(
                "Vocab.from_dict expects {'type': 'vocab', 'tokens': [...]} as written by "
                f"Vocab.to_dict(); got keys {sorted(d)}."
            )
        tokens: Sequence[str] = d["tokens"]
        if tuple(tokens[:4]) != SPECIAL_TOKENS:
            raise ConfigError(
                f"the first four tokens must be {SPECIAL_TOKENS}; got {tuple(tokens[:4])}. "
                "This dictionary was not written by Vocab.to_dict()."
            )
        return cls(tokens[4:])


class CharVocab(Vocab):
    """A character vocabulary (the language model's ``tokenizer=char``): every character,
    spaces included, is one token, so ``detokenize(tokenize(text)) == text`` for any text
    made of known characters.

    >>> c = CharVocab.from_texts(["ab a"])
    >>> c.tokenize("ba"), c.detokenize(c.tokenize("a b"))
    ([5, 4], 'a b')
    """

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> CharVocab:
        """Every character of ``texts``, most frequent first (ties in code-point order)."""
        counts = Counter(ch for text in texts for ch in text)
        return cls(sorted(counts, key=lambda ch: (-counts[ch], ch)))

    def tokenize(self, text: str) -> list[int]:
        """Text -> one id per character (unknown characters: UNK)."""
        return self.encode(text)

    def detokenize(self, ids: Iterable[int]) -> str:
        """Ids -> the characters joined, stopping at EOS (UNK shown as "<unk>")."""
        return "".join(self.decode(ids))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form, specials included, for checkpoints."""
        return {"type": "chars", "tokens": list(self._itos)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CharVocab:
        """Inverse of `to_dict`; checks the type and the special tokens' ids."""
        if d.get("type") != "chars":
            raise ConfigError(
                f"CharVocab.from_dict expects {{'type': 'chars', ...}}, got type {d.get('type')!r}"
            )
        return cls(Vocab.from_dict({**d, "type": "vocab"}).tokens[4:])
