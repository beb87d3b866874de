"""Marian's tokenizer: two SentencePiece models and one vocabulary, as in an opus-mt folder.

A Marian (opus-mt) folder tokenizes with two SentencePiece models, `source.spm` for the
input language and `target.spm` for the output, but numbers the pieces with its own
`vocab.json` (by default one joint vocabulary shared by both sides, so the embeddings can
be tied). Encoding a source text, exactly as `transformers.MarianTokenizer` does:

    "</s>", "<unk>", "<pad>" in the text   stay whole (the text is split around them)
    ">>es<<" at the start of a piece       the target-language code, kept as one token
    the rest                               cut into pieces by source.spm ("▁" marks a space)
    piece -> id                            vocab.json; a piece it lacks becomes <unk>
    + </s>                                 every sequence ends with EOS (there is no BOS)

    tok = SentencePieceTokenizer.from_pretrained("opus-mt-en-es")
    tok.encode("The dog.")          # [..., tok.eos_id]     what the encoder reads
    tok.decode([..., tok.eos_id])   # "El perro."           special tokens dropped

The decoder starts from `pad_id` (Marian has no BOS), so `bos_id` is `pad_id` here. `train()`
makes a small folder of this layout offline (for the tests and the lesson).
"""

from __future__ import annotations

import io
import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from minitransformer.data.folder_files import read_capped, read_json, write_replacing
from minitransformer.errors import ArgumentError, CheckpointError, TokenIdError, install_hint

MAX_SPM_BYTES = 64 << 20  # opus-mt's models are about 0.8 MB each
MAX_VOCAB_BYTES = 64 << 20  # opus-mt's vocab.json is about 1.5 MB
MAX_CONFIG_BYTES = 1 << 20
SPACE = "\u2581"  # "▁", SentencePiece's visible space
CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
            (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))  # fmt: skip
INERT_KEYS = {  # bookkeeping written by transformers that does not change any id or text
    "name_or_path", "special_tokens_map_file", "backend", "is_local", "local_files_only",
    "tokenizer_file", "padding_side", "truncation_side", "model_input_names", "verbose",
    "target_vocab_file", "processor_class",
}  # fmt: skip


def _sentencepiece():
    try:
        import sentencepiece
    except ImportError as err:
        msg = f"the SentencePiece tokenizer needs sentencepiece: {install_hint('hf')}"
        raise ImportError(msg, name="sentencepiece") from err
    return sentencepiece


def _check_vocab(path: Path, fix: str) -> dict[str, int]:
    """vocab.json: a dict of str -> int whose ids are 0..n-1, each once."""
    vocab = read_json(path, MAX_VOCAB_BYTES, fix)
    if not isinstance(vocab, dict) or not vocab:
        raise CheckpointError(f"{path}: expected a non-empty JSON object token -> id; {fix}")
    for token, i in vocab.items():
        if type(i) is not int or i < 0:
            raise CheckpointError(f"{path}: the id of {token!r} is {i!r}, not an int >= 0; {fix}")
    if len(set(vocab.values())) != len(vocab) or max(vocab.values()) != len(vocab) - 1:
        raise CheckpointError(
            f"{path}: the {len(vocab)} ids must be 0..{len(vocab) - 1}, each once (found "
            f"duplicates or gaps, largest {max(vocab.values())}); {fix}"
        )
    return vocab


def _is_token(v: Any) -> bool:
    """A special token as tokenizer_config.json writes it: "</s>" or {"content": "</s>", ...}."""
    if isinstance(v, dict) and not any(v.get(k) for k in ("lstrip", "rstrip", "single_word")):
        v = v.get("content")
    return isinstance(v, str) and v != ""


def _content(v: Any) -> Any:
    """A token's text ("</s>" or {"content": "</s>"}); any other field as it is."""
    return v["content"] if isinstance(v, dict) and "content" in v else v


TOKEN = (_is_token, 'a token: "</s>" or {"content": "</s>"} without lstrip/rstrip/single_word')
TEXT = (lambda v: v is None or isinstance(v, str), "a string or null")
FLAG = (lambda v: isinstance(v, bool), "true or false")
OFF = (lambda v: not v, "empty or false (this tokenizer does not change ids that way)")
RULES = {  # tokenizer_config.json fields whose meaning is implemented here: (check, must be)
    "source_lang": TEXT, "target_lang": TEXT, "separate_vocabs": FLAG,
    "clean_up_tokenization_spaces": FLAG, "sp_model_kwargs": OFF, "split_special_tokens": OFF,
    "additional_special_tokens": OFF, "extra_special_tokens": OFF,
    "model_max_length": (lambda v: type(v) is int and v >= 1, "an int >= 1"),
    "tokenizer_class": (lambda v: v == "MarianTokenizer", '"MarianTokenizer" (a Marian folder)'),
    "added_tokens_decoder": (lambda v: isinstance(v, dict), "an object id -> token"),
    "unk_token": TOKEN, "eos_token": TOKEN, "pad_token": TOKEN,
}  # fmt: skip


class SentencePieceTokenizer:
    """Marian's tokenizer; the same ids and texts as `transformers.MarianTokenizer`. It has
    this library's `Tokenizer` interface (`tokenize`, `detokenize`, `len()`, `pad_id`, `bos_id`,
    `eos_id`, `unk_id`) except `to_dict`: it travels as a folder, not inside a checkpoint."""

    def __init__(self, source_spm: bytes, target_spm: bytes, vocab: dict[str, int],
                 target_vocab: dict[str, int] | None = None,
                 config: dict[str, Any] | None = None) -> None:  # fmt: skip
        """From the two models' bytes, the vocabularies and tokenizer_config's fields."""
        spm, self._spm = _sentencepiece(), []
        self._protos = (bytes(source_spm), bytes(target_spm))
        for name, proto in zip(("source.spm", "target.spm"), self._protos, strict=True):
            self._spm.append(sp := spm.SentencePieceProcessor())
            try:
                sp.LoadFromSerializedProto(proto)
            except (RuntimeError, OSError, ValueError) as err:
                why = " ".join(str(err).split())
                raise CheckpointError(f"{name}: not a SentencePiece model ({why}); copy the "
                                      "file again from the model's folder") from None  # fmt: skip
        get = dict(config or {}).get
        self.source_lang, self.target_lang = get("source_lang"), get("target_lang")
        self.separate_vocabs = bool(get("separate_vocabs", False))
        self.model_max_length = get("model_max_length", 512)
        self.clean_up_spaces = bool(get("clean_up_tokenization_spaces", False))
        self.unk_token, self.eos_token = get("unk_token", "<unk>"), get("eos_token", "</s>")
        self.pad_token = get("pad_token", "<pad>")
        self.vocab = dict(vocab)
        self.target_vocab = dict(target_vocab) if self.separate_vocabs else self.vocab
        specials = [self.eos_token, self.unk_token, self.pad_token]  # in the order of the ids
        for side, table in (("vocab.json", self.vocab), ("target_vocab.json", self.target_vocab)):
            if missing := [t for t in specials if t not in table]:
                msg = f"{side}: lacks {missing}; a Marian vocabulary holds </s>, <unk>, <pad>"
                raise CheckpointError(msg + ": add them, or use the model's own file")
        self._itos = {i: t for t, i in self.target_vocab.items()}
        self.eos_id, self.unk_id, self.pad_id = (self.vocab[t] for t in specials)
        self.bos_id = self.pad_id  # Marian's decoder starts from the pad id
        # special tokens are numbered by vocab.json on both sides, as in MarianTokenizer
        self._specials = {t: self.vocab[t] for t in specials}
        self._special_ids = set(self._specials.values())
        longest_first = sorted(self._specials, key=len, reverse=True)  # as transformers' Trie
        self._split = re.compile("(" + "|".join(map(re.escape, longest_first)) + ")")

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> SentencePieceTokenizer:
        """Read a Marian folder: source.spm, target.spm, vocab.json, and where present
        tokenizer_config.json (and target_vocab.json when it says separate_vocabs)."""
        folder = Path(directory)
        if not folder.is_dir():
            raise CheckpointError(
                f"{folder}: not a folder; give the folder that holds source.spm, target.spm "
                "and vocab.json (a Marian / opus-mt model)"
            )
        fix = "copy it again from the model's folder (a Marian / opus-mt layout)"
        config: dict[str, Any] = {}
        if (folder / "tokenizer_config.json").exists():
            config = _check_config(folder / "tokenizer_config.json")
        source = read_capped(folder / "source.spm", MAX_SPM_BYTES, fix)
        target = read_capped(folder / "target.spm", MAX_SPM_BYTES, fix)
        vocab = _check_vocab(folder / "vocab.json", fix)
        target_vocab = None
        if config.get("separate_vocabs"):
            target_vocab = _check_vocab(folder / "target_vocab.json", fix)
        for token, i in config.pop("added_tokens", {}).items():
            if vocab.get(token) != i:
                raise CheckpointError(
                    f"{folder}: tokenizer_config.json gives {token!r} the id {i}, vocab.json "
                    f"{vocab.get(token)}; the files do not belong together: {fix}"
                )
        try:
            return cls(source, target, vocab, target_vocab, config)
        except CheckpointError as err:
            raise CheckpointError(f"{folder}/{err}") from None

    def save_pretrained(self, directory: str | os.PathLike, overwrite: bool = False) -> list[Path]:
        """Write the folder `from_pretrained` (and MarianTokenizer) reads; returns the paths.
        A file already there with other contents is an error unless `overwrite=True`."""
        folder = Path(directory)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CheckpointError(f"{folder}: cannot make the folder ({err})") from None
        config = {
            "source_lang": self.source_lang, "target_lang": self.target_lang,
            "separate_vocabs": self.separate_vocabs, "unk_token": self.unk_token,
            "eos_token": self.eos_token, "pad_token": self.pad_token,
            "model_max_length": self.model_max_length,
            "clean_up_tokenization_spaces": self.clean_up_spaces, "sp_model_kwargs": {},
            "tokenizer_class": "MarianTokenizer",
        }  # fmt: skip
        files = {"source.spm": self._protos[0], "target.spm": self._protos[1],
                 "vocab.json": json.dumps(self.vocab, indent=2).encode(),
                 "tokenizer_config.json": json.dumps(config, indent=2).encode()}  # fmt: skip
        if self.separate_vocabs:
            files["target_vocab.json"] = json.dumps(self.target_vocab, indent=2).encode()
        for name, data in files.items():  # every clash is found before anything is written
            path = folder / name
            same = path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data
            if path.exists() and not overwrite and not same:
                raise CheckpointError(
                    f"{path}: already there with other contents; save into an empty folder, "
                    "or pass overwrite=True to replace it"
                )
        for name, data in files.items():
            write_replacing(folder / name, data)
        return [folder / name for name in files]

    @classmethod
    def train(cls, source_sentences: Iterable[str], target_sentences: Iterable[str],
              directory: str | os.PathLike, vocab_size: int = 1000, seed: int = 0,
              source_lang: str | None = None, target_lang: str | None = None,
              language_codes: Sequence[str] = ()) -> SentencePieceTokenizer:  # fmt: skip
        """Train two unigram SentencePiece models (in memory) and write a Marian folder.

        The joint vocab.json holds </s> = 0, <unk> = 1, the source pieces, the target pieces
        not already in it, the `language_codes` (">>es<<", for a multilingual model) and
        <pad> last (the id Marian's config uses as pad and start).
        `vocab_size` is each model's size (a soft limit: small corpora give fewer pieces).
        """
        if type(vocab_size) is not int or not 8 <= vocab_size <= 1_000_000:
            raise ArgumentError(f"train: vocab_size must be an int in [8, 1e6], got {vocab_size!r}")
        if type(seed) is not int or not 0 <= seed < 2**32:
            raise ArgumentError(f"train: seed must be an int in [0, 2**32), got {seed!r}")
        spm = _sentencepiece()
        protos = []
        for side, sentences in (("source", source_sentences), ("target", target_sentences)):
            sentences = list(sentences)
            if not sentences or not all(isinstance(s, str) for s in sentences):
                raise ArgumentError(f"train: {side}_sentences must be a non-empty list of str")
            spm.set_random_generator_seed(seed)
            model = io.BytesIO()
            try:
                spm.SentencePieceTrainer.train(
                    sentence_iterator=iter(sentences), model_writer=model, model_type="unigram",
                    vocab_size=vocab_size, hard_vocab_limit=False, character_coverage=1.0,
                    unk_id=0, bos_id=-1, eos_id=1, pad_id=-1, unk_piece="<unk>",
                    eos_piece="</s>", num_threads=1, minloglevel=2,
                )  # fmt: skip
            except RuntimeError as err:
                raise ArgumentError(f"train: SentencePiece could not train on the {side} "
                                    f"sentences ({err}); give more text") from None  # fmt: skip
            protos.append(model.getvalue())
        vocab = {"</s>": 0, "<unk>": 1}
        for proto in protos:
            sp = spm.SentencePieceProcessor()
            sp.LoadFromSerializedProto(proto)
            for i in range(sp.GetPieceSize()):
                if not (sp.IsControl(i) or sp.IsUnknown(i)):
                    vocab.setdefault(sp.IdToPiece(i), len(vocab))
        for code in language_codes:
            if not (isinstance(code, str) and re.fullmatch(r">>\w+<<", code)):
                raise ArgumentError(f"train: a language code looks like '>>es<<', got {code!r}")
            vocab.setdefault(code, len(vocab))
        vocab["<pad>"] = len(vocab)
        config = {"source_lang": source_lang, "target_lang": target_lang}
        tokenizer = cls(protos[0], protos[1], vocab, None, config)
        tokenizer.save_pretrained(directory)
        return tokenizer

    def pieces(self, text: str, target: bool = False) -> list[str]:
        """The tokens of a text before they become ids (no </s>): specials and the >>xx<<
        code kept whole, the rest cut by source.spm (target.spm with `target=True`)."""
        if not isinstance(text, str):
            raise ArgumentError(f"expected a str to tokenize, got {type(text).__name__}")
        sp, out = self._spm[1 if target else 0], []
        for part in self._split.split(text):
            if part in self._specials or not part:
                out += [part] if part else []
                continue
            if part.startswith(">>") and (end := part.find("<<")) != -1:
                out.append(part[: end + 2])  # the language code, as MarianTokenizer reads it
                part = part[end + 2 :]
            out += sp.encode(part, out_type=str)
        return out

    def encode(self, text: str) -> list[int]:
        """Source text -> ids ending with </s>: what Marian's encoder reads."""
        return self._ids(self.pieces(text), self.vocab)

    def encode_target(self, text: str) -> list[int]:
        """Target text -> ids ending with </s> (target.spm; target_vocab.json if separate)."""
        return self._ids(self.pieces(text, target=True), self.target_vocab)

    def _ids(self, pieces: list[str], vocab: dict[str, int]) -> list[int]:
        specials, unk = self._specials, vocab[self.unk_token]
        ids = [specials[p] if p in specials else vocab.get(p, unk) for p in pieces]
        return ids + [self.eos_id]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` of each text (unpadded)."""
        return [self.encode(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        """Target ids -> text, as `MarianTokenizer.decode(ids, skip_special_tokens=True)`:
        </s>, <pad> and <unk> are dropped, the pieces joined by SentencePiece, "▁" -> " ".

        Like MarianTokenizer, a joint vocabulary's ids are joined by source.spm.
        """
        tokens = []
        for i in ids:
            if isinstance(i, bool) or not hasattr(i, "__index__"):
                raise TokenIdError(f"decode: token ids must be ints, got {i!r}")
            i = int(i)
            if i not in self._itos:
                raise TokenIdError(f"decode: token id {i} is outside the vocabulary of "
                                   f"{len(self._itos)}; made by another tokenizer?")  # fmt: skip
            if i not in self._special_ids:
                tokens.append(self._itos[i])
        sp = self._spm[1 if self.separate_vocabs else 0]
        text, run = "", []  # a special token left (target_vocab's own) is kept as text
        for token in tokens:
            if token in self._specials:
                text, run = text + sp.decode_pieces(run) + token + " ", []
            else:
                run.append(token)
        text = (text + sp.decode_pieces(run)).replace(SPACE, " ").strip()
        for before, after in CLEAN_UP if self.clean_up_spaces else ():
            text = text.replace(before, after)  # transformers' clean_up_tokenization
        return text

    def decode_batch(self, rows: Iterable[Iterable[int]]) -> list[str]:
        """`decode` of each row."""
        return [self.decode(row) for row in rows]

    def tokenize(self, text: str) -> list[int]:
        """`encode`: the source ids, </s> included (Marian's encoder expects it)."""
        return self.encode(text)

    def detokenize(self, ids: Iterable[int]) -> str:
        """`decode` of the ids before the first </s> (the interface's stop at EOS)."""
        ids = list(ids)
        return self.decode(ids[: next((k for k, i in enumerate(ids) if i == self.eos_id), None)])

    @property
    def vocab_size(self) -> int:
        """Entries of vocab.json (the embedding rows of a joint-vocabulary model)."""
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        langs = f"{self.source_lang}->{self.target_lang}"
        return f"SentencePieceTokenizer({langs}, vocab_size={self.vocab_size})"


def _check_config(path: Path) -> dict[str, Any]:
    """tokenizer_config.json: every field known and of the right kind; returns them."""
    raw = read_json(path, MAX_CONFIG_BYTES, "fix or delete the file")
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: expected a JSON object; fix or delete the file")
    for key, value in raw.items():
        if key not in RULES and key not in INERT_KEYS:
            why = "is not supported here; remove it if it does not change tokenization"
            raise CheckpointError(f"{path}: the field {key!r} {why}")
        if key in RULES and not RULES[key][0](value):
            why = f"must be {RULES[key][1]}, got {value!r:.80}"
            raise CheckpointError(f"{path}: {key} {why}")
    out = {k: _content(raw[k]) for k in RULES if k in raw and k != "added_tokens_decoder"}
    specials = {out.get(k, d) for k, d in (("unk_token", "<unk>"), ("eos_token", "</s>"),
                ("pad_token", "<pad>"))}  # fmt: skip
    out["added_tokens"] = {}
    for key, value in (raw.get("added_tokens_decoder") or {}).items():
        if not re.fullmatch(r"[0-9]{1,9}", key):  # str.isdigit() also takes "²" and "٣"
            why = "is not a token id (a decimal number of at most 9 digits)"
            raise CheckpointError(f"{path}: the added_tokens_decoder key {key!r:.40} {why}")
        if not (_is_token(value) and _content(value) in specials):
            why = f"is {value!r:.80}; only the special tokens {sorted(specials)} may be there"
            raise CheckpointError(f"{path}: added_tokens_decoder[{key!r}] {why}")
        out["added_tokens"][_content(value)] = int(key)
    return out
