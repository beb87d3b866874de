"""TransformerConfig: the model's sizes, with the paper's names, and the named presets.

    cfg = TransformerConfig(src_vocab=V, tgt_vocab=V)              # the paper's base sizes
    cfg = TransformerConfig.preset("tiny", src_vocab=V, tgt_vocab=V)
    cfg.to_dict()  ->  JSON-friendly dict;  TransformerConfig.from_dict(d)  ->  the same config
    dataclasses.replace(cfg, dropout=0.3)  ->  a changed copy, validated in turn

A config is frozen: it is validated once, when it is made (``__post_init__``), and cannot
change afterwards, so whatever holds one (the model and every layer it builds) reads it
without checking it again.

Presets (d_model, h, N, d_ff, dropout):

    tiny   64    4   2   256   0.0    CPU-sized, for tests and lessons
    small  128   4   2   512   0.1
    base   512   8   6   2048  0.1    the paper's base model (Table 3)
    big    1024  16  6   4096  0.3    the paper's big model (Table 3)

This module stands on the ground: it imports nothing from the autograd core.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ..checks import is_int, is_real
from ..errors import ConfigError
from .attention import attention_problems
from .blocks import block_fields, block_problems, rotary_problem
from .shapes import Shapes, shape_groups

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"d_model": 64, "h": 4, "N": 2, "d_ff": 256, "dropout": 0.0},
    "small": {"d_model": 128, "h": 4, "N": 2, "d_ff": 512, "dropout": 0.1},
    "base": {"d_model": 512, "h": 8, "N": 6, "d_ff": 2048, "dropout": 0.1},
    "big": {"d_model": 1024, "h": 16, "N": 6, "d_ff": 4096, "dropout": 0.3},
}

_DTYPES = ("float32", "float64")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "swish")  # the feed-forward's; the paper's: relu
POSITION_LAYOUTS = ("interleaved", "halves")  # sin, cos, sin, ... (paper) | all sines, then cosines
MAX_LEN = 65_536  # positions; sentences are hundreds of tokens, the paper's table is 5,000
MAX_PARAMETER_GIB = 16  # float32 weights; the paper's big model is ~0.8 GiB


def head_split_problem(d_model: int, h: int) -> str | None:
    """The rule that h heads split d_model (d_k = d_v = d_model / h), as the one message
    TransformerConfig.validate and nn.MultiHeadAttention give; None when d_model % h == 0."""
    if d_model % h == 0:
        return None
    divisors = [d for d in range(1, min(d_model, 64) + 1) if d_model % d == 0]
    return (
        f"d_model ({d_model}) must be divisible by h ({h}) so that each head gets "
        f"d_k = d_model / h; pick h in {divisors} or pick e.g. d_model = "
        f"{h * max(1, d_model // h)}"
    )


@dataclass(frozen=True)
class TransformerConfig:
    """Sizes and switches of an encoder-decoder Transformer; frozen, validated when made.

    Attributes:
        src_vocab, tgt_vocab: vocabulary sizes of source and target token ids.
        d_model: width of every sublayer's input and output (the paper's d_model).
        h: number of attention heads; d_k = d_v = d_model / h.
        N: number of layers in the encoder and in the decoder.
        d_ff: inner width of the position-wise feed-forward network.
        dropout: P_drop, applied to each sublayer output and to the embedded inputs.
        max_len: the longest source or target sequence (size of the positional table).
        label_smoothing: epsilon_ls of the training loss (the paper uses 0.1).
        pre_norm: False = the paper's post-LN, x = LN(x + Sublayer(x));
            True = pre-LN, x = x + Sublayer(LN(x)) plus a final LayerNorm on each stack.
        tie_embeddings: one matrix for source embedding, target embedding and the output
            projection (paper section 3.4); needs src_vocab == tgt_vocab.
        learned_positions: a learned position table instead of the sinusoids.
        key_dim: the width d_k of each head's queries and keys when it should differ from
            d_model / h (the paper's Table 3 row B shrinks it); None = d_model / h. Values
            keep d_v = d_model / h, so the output projection is unchanged.
        scale_attention: True = the paper's softmax(q kᵀ / √d_k); False = the unscaled
            dot product softmax(q kᵀ), in training and decoding alike (an ablation).
        attention_block_size: None (the paper's attention, default) or an int b: every
            attention layer runs the memory-efficient blocked op (keys in blocks of b, an
            online softmax; ops/blocked_attention.py). Same outputs and gradients up to
            rounding, without the (B, H, T, S) weights in memory.
        attention, attention_window: what every self-attention runs, "full" (the paper's,
            default), "local", "strided" or "linear", and the window of local or the
            stride of strided (config/attention.py; cross-attention is always full).
        activation: the feed-forward's nonlinearity, "relu" (the paper's max(0, x)),
            "gelu" (x Φ(x)), "gelu_tanh" (GPT-2's tanh approximation of it) or "swish"
            (x σ(x), also called SiLU; Marian's opus-mt models, Llama's SwiGLU).
        position_layout: where the sinusoids sit in the positional vector: "interleaved"
            (the paper: sin, cos, sin, cos, ...) or "halves" (Marian: every sine first, then
            every cosine; the same frequencies, the features in another order).
        scale_embedding: multiply the embedded tokens by √d_model (paper section 3.4); False
            adds the positions to the raw embedding rows.
        logits_bias: a learned bias (tgt_vocab,) added to the logits (Marian's
            final_logits_bias); the paper's output projection has none.
        decoder_N, decoder_h, decoder_d_ff: the decoder's layers, heads and inner width when
            they differ from the encoder's; None (default) = N, h, d_ff.
        pad_id, bos_id, eos_id: the special token ids (padding builds the masks). bos_id is
            the decoder's start token; it may equal pad_id (Marian starts from the pad id),
            and then the decoder masks the future only: a start token is never padding.
        dtype: "float32" (default) or "float64" (for gradient checks).
        decoder_only: True = the decoder-only language model (nn.TransformerLM): no encoder,
            no cross-attention; N layers of masked self-attention and feed-forward over one
            vocabulary (src_vocab == tgt_vocab; the decoder_* fields unset). Its bos_id
            may equal eos_id (GPT-2's one <|endoftext|> token).
        norm, norm_eps, rotary, rotary_base, gated_ffn, kv_heads, linear_bias: the block
            since 2017 (config/blocks.py, which also names the blocks "paper", "gpt2" and
            "llama"): "layer" or "rms" norms and their eps; rotary positions (RoPE, "halves"
            or "interleaved", base rotary_base) instead of an added table; the gated
            feed-forward (act(x W1) ⊙ x W3) W2; h_kv key/value heads shared by the h query
            heads (GQA; None = h); biases in the attention and feed-forward linears.
    """

    src_vocab: int
    tgt_vocab: int
    d_model: int = 512
    h: int = 8
    N: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    max_len: int = 256
    label_smoothing: float = 0.1
    pre_norm: bool = False
    tie_embeddings: bool = True
    learned_positions: bool = False
    key_dim: int | None = None
    scale_attention: bool = True
    attention_block_size: int | None = None
    attention: str = "full"
    attention_window: int | None = None
    activation: str = "relu"
    position_layout: str = "interleaved"
    scale_embedding: bool = True
    logits_bias: bool = False
    decoder_N: int | None = None
    decoder_h: int | None = None
    decoder_d_ff: int | None = None
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    dtype: str = "float32"
    decoder_only: bool = False
    norm: str = "layer"
    norm_eps: float = 1e-5
    rotary: str | None = None
    rotary_base: float = 10000.0
    gated_ffn: bool = False
    kv_heads: int | None = None
    linear_bias: bool = True

    # Fields newer than the first checkpoints: a checkpoint without one has its default.
    ADDED: ClassVar[tuple[str, ...]] = (
        "attention_block_size", "activation", "position_layout", "scale_embedding",
        "logits_bias", "decoder_N", "decoder_h", "decoder_d_ff", "decoder_only",
        "attention", "attention_window", "norm", "norm_eps", "rotary", "rotary_base",
        "gated_ffn", "kv_heads", "linear_bias",
    )  # fmt: skip

    def __post_init__(self) -> None:
        self.validate()  # a bad field fails here, once: not later inside a layer or after
        # training. Frozen, the config stays as validated; dataclasses.replace validates anew

    @property
    def d_k(self) -> int:
        """Width of one head's queries and keys: key_dim if set, else d_model / h."""
        return self.key_dim if self.key_dim is not None else self.d_model // self.h

    def sizes(self, stack: str) -> tuple[int, int, int]:
        """(layers, heads, d_ff) of the "encoder" or the "decoder" (decoder_* or the same)."""
        if stack == "encoder":
            return self.N, self.h, self.d_ff
        if stack != "decoder":
            raise ConfigError(f"sizes: stack must be 'encoder' or 'decoder', got {stack!r}")
        return self.decoder_N or self.N, self.decoder_h or self.h, self.decoder_d_ff or self.d_ff

    @classmethod
    def preset(cls, name: str, block: str | None = None, **overrides: Any) -> TransformerConfig:
        """A named size ("tiny", "small", "base", "big"); ``block`` (None, "paper", "gpt2",
        "llama": config/blocks.py) the layer's switches; ``overrides`` set any field (src_vocab
        and tgt_vocab are required), the block's among them."""
        if name not in PRESETS:
            raise ConfigError(
                f"preset: unknown name {name!r}; choose one of {sorted(PRESETS)}, "
                "or build TransformerConfig(...) with explicit sizes"
            )
        switches = {} if block is None else block_fields(f"preset({name!r})", block)
        fields = {**PRESETS[name], **switches, **overrides}
        missing = [k for k in ("src_vocab", "tgt_vocab") if k not in fields]
        if missing:
            raise ConfigError(
                f"preset({name!r}): {', '.join(missing)} must be given, e.g. "
                f"TransformerConfig.preset({name!r}, src_vocab=V, tgt_vocab=V)"
            )
        unknown = sorted(set(fields) - _field_names())
        if unknown:
            raise ConfigError(
                f"preset({name!r}): unknown field(s) {unknown}; valid fields: "
                f"{sorted(_field_names())}"
            )
        return cls(**fields)  # validated by __post_init__

    def validate(self) -> TransformerConfig:
        """Raise ConfigError listing every inconsistency; return self when all is well."""
        problems = []
        for name in ("src_vocab", "tgt_vocab", "d_model", "h", "N", "d_ff", "max_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                problems.append(f"{name} must be a positive int, got {value!r}")
        for name in ("decoder_N", "decoder_h", "decoder_d_ff"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value <= 0):
                problems.append(f"{name} must be a positive int or None (= {name[8:]}), got "
                                f"{value!r}")  # fmt: skip
        key_dim = self.key_dim
        if key_dim is not None and (type(key_dim) is not int or key_dim <= 0):
            problems.append(f"key_dim must be an int > 0 or None (= d_model/h), got {key_dim!r}")
        if not problems:
            problems += self._size_problems()
        for h in dict.fromkeys((self.h, self.decoder_h or self.h)) if not problems else ():
            if problem := head_split_problem(self.d_model, h):
                problems.append(problem)
        problems += attention_problems(
            self.attention, self.attention_window, self.attention_block_size,
            self.scale_attention,
        )  # fmt: skip
        problems += block_problems(self)
        if not problems and (problem := rotary_problem(self)):
            problems.append(problem)
        for name in ("dropout", "label_smoothing"):
            value = getattr(self, name)
            if not (is_real(value) and 0.0 <= value < 1.0):  # NaN fails 0 <= value
                problems.append(f"{name} must be in [0, 1) (a number), got {value!r}")
        for name, choices in (("activation", ACTIVATIONS), ("position_layout", POSITION_LAYOUTS)):
            if not isinstance(getattr(self, name), str) or getattr(self, name) not in choices:
                problems.append(f"{name} must be one of {choices}, got {getattr(self, name)!r}")
        flags = ("pre_norm", "tie_embeddings", "learned_positions", "scale_attention")
        for name in (*flags, "scale_embedding", "logits_bias", "decoder_only"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                problems.append(f"{name} must be True or False, got {value!r}")
        sizes_ok = not problems
        ids = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        # bos_id may equal pad_id (Marian's decoder start) or, in a language model, eos_id
        same = repr(self.pad_id) == repr(self.eos_id)
        if same or (repr(self.bos_id) == repr(self.eos_id) and self.decoder_only is not True):
            problems.append(
                f"pad_id, bos_id and eos_id must be distinct (only bos_id may equal pad_id, "
                f"as in Marian's decoder start, or eos_id in a language model, as GPT-2's "
                f"<|endoftext|>), got {ids}"
            )
        vocab = min(self.src_vocab, self.tgt_vocab) if sizes_ok else None
        for name, value in ids.items():
            if not is_int(value) or value < 0:
                problems.append(f"{name} must be a non-negative int, got {value!r}")
            elif vocab is not None and value >= vocab:
                problems.append(f"{name} = {value} is outside the vocabulary of size {vocab}")
        if self.tie_embeddings and self.src_vocab != self.tgt_vocab:
            problems.append(
                f"tie_embeddings=True shares one matrix between source and target, but "
                f"src_vocab ({self.src_vocab}) != tgt_vocab ({self.tgt_vocab}); set "
                "tie_embeddings=False or use a joint vocabulary"
            )
        if self.decoder_only is True:
            problems += self._decoder_only_problems()
        if not isinstance(self.dtype, str) or self.dtype not in _DTYPES:
            problems.append(f"dtype must be one of {_DTYPES}, got {self.dtype!r}")
        if problems:
            raise ConfigError(
                "invalid TransformerConfig: "
                + "; ".join(problems)
                + " (fix these fields, or start "
                "from TransformerConfig.preset('tiny', src_vocab=V, tgt_vocab=V))"
            )
        return self

    def _decoder_only_problems(self) -> list[str]:
        """What a decoder-only model cannot have: two vocabularies, a second stack's sizes."""
        problems = []
        if self.src_vocab != self.tgt_vocab:
            problems.append(
                f"decoder_only=True reads and predicts one vocabulary, but src_vocab "
                f"({self.src_vocab}) != tgt_vocab ({self.tgt_vocab}); give both the same size"
            )
        stack = [k for k in ("decoder_N", "decoder_h", "decoder_d_ff") if getattr(self, k)]
        if stack:
            problems.append(
                f"decoder_only=True has one stack, sized by N, h and d_ff; unset {stack}"
            )
        return problems

    def parameter_shapes(self) -> Shapes:
        """Every weight of the Transformer this config builds, ``{name: shape}`` in its
        ``state_dict()`` order (tied matrices once), in closed form: nothing is built or
        allocated. The model's one shape table: num_parameters() sums it and
        checkpoint.model_layout adds the dtype (tests check it against built models)."""
        return {
            prefix.format(i=i) + name: shape
            for prefix, copies, shapes in self._shape_groups()
            for i in range(copies)
            for name, shape in shapes.items()
        }

    def num_parameters(self) -> int:
        """Trainable scalars of the model this config builds: the sum over
        parameter_shapes() of each shape's product, counted once per layer table times its
        N copies (so a config with a huge N is sized without listing its layers)."""
        return sum(
            copies * sum(math.prod(shape) for shape in shapes.values())
            for _, copies, shapes in self._shape_groups()
        )

    def num_weight_arrays(self) -> int:
        """How many arrays ``parameter_shapes()`` lists, counted without listing them."""
        return sum(copies * len(shapes) for _, copies, shapes in self._shape_groups())

    def _shape_groups(self) -> list[tuple[str, int, Shapes]]:
        """The shape table (config/shapes.py) as (name prefix, copies, {name: shape})."""
        return shape_groups(self)

    def _size_problems(self) -> list[str]:
        """Sizes that would exhaust memory before the first step: refused up front."""
        problems = []
        if self.max_len > MAX_LEN:
            table = f"{self.max_len * self.d_model * 8 / 2**30:,.1f} GiB of position table"
            why = "rotary positions need no table, but the cap holds for every model"
            why = why if self.rotary else table
            problems.append(
                f"max_len = {self.max_len:,} is above the cap of {MAX_LEN:,} positions ({why}); "
                "use a max_len a little above the longest sentence, e.g. 256"
            )
        gib = self.num_parameters() * 4 / 2**30  # float32 weights alone
        if gib > MAX_PARAMETER_GIB:
            problems.append(
                f"these sizes make {self.num_parameters():,} parameters ({gib:,.1f} GiB in "
                f"float32, above the cap of {MAX_PARAMETER_GIB} GiB, before gradients and "
                "Adam's two moments); reduce d_model, d_ff, N or the vocabulary sizes"
            )
        return problems

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON-serialisable dict of every field."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TransformerConfig:
        """The config of ``to_dict()`` output; unknown keys are an error (a typo, or a
        config from another version)."""
        unknown = sorted(set(d) - _field_names())
        if unknown:
            raise ConfigError(
                f"from_dict: unknown key(s) {unknown}; valid keys: {sorted(_field_names())}. "
                "Fix the spelling or drop the key(s)"
            )
        missing = [k for k in ("src_vocab", "tgt_vocab") if k not in d]
        if missing:
            raise ConfigError(f"from_dict: required key(s) {missing} are missing")
        return cls(**d)  # validated by __post_init__


def _refuse_change(self: TransformerConfig, name: str, *value: Any) -> None:
    """A frozen config's answer to ``cfg.name = value`` and ``del cfg.name``: the error of
    ``dataclass(frozen=True)``, with the way to a changed config."""
    raise dataclasses.FrozenInstanceError(
        f"TransformerConfig is frozen (validated once, when it was made), so {name!r} cannot "
        f"be {'set' if value else 'deleted'}; make a changed copy, validated in turn, with "
        f"dataclasses.replace(cfg, {name}=...)"
    )


# Set after the class: dataclass(frozen=True) refuses a class that defines its own.
TransformerConfig.__setattr__ = _refuse_change
TransformerConfig.__delattr__ = _refuse_change


def _field_names() -> set[str]:
    return {f.name for f in dataclasses.fields(TransformerConfig)}
