"""`TransformerConfig`, every hyper-parameter of the model, and `PRESETS`, the named models
(the model only: how a run trains them is the application's, `pipelines/settings/recipes.py`)."""

import dataclasses
import json
from typing import Any


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of an encoder-decoder Transformer (Sections 3, 5.4; Table 3).

    Attributes:
        vocab_size: size of the shared source/target vocabulary (id 0 is padding).
        num_layers: N, encoder and decoder layers each.
        d_model: width of every residual stream and of the embeddings.
        d_ff: inner width of the position-wise feed-forward network (Eq. 2).
        num_heads: h, attention heads.
        d_k, d_v: per-head query/key and value widths; `None`: d_model // num_heads.
        dropout: P_drop, on every sub-layer output and on embedding + position sums (5.4).
        attention_dropout, relu_dropout: on attention weights; after the FFN's ReLU (paper: 0).
        max_length: longest sequence (learned positions); also the export's and decoding's cap.
        positional: "sinusoidal" (3.5) or "learned" (Table 3 row E).
        norm: "post" (the paper: LayerNorm(x + Sublayer(x))) or "pre" (x + Sublayer(LN(x))).
        share_embeddings: tie both embeddings and the pre-softmax projection (3.4; one vocabulary).
    """

    vocab_size: int = 37000
    num_layers: int = 6
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    d_k: int | None = None
    d_v: int | None = None
    dropout: float = 0.1
    attention_dropout: float = 0.0
    relu_dropout: float = 0.0
    max_length: int = 1024
    positional: str = "sinusoidal"
    norm: str = "post"
    share_embeddings: bool = True

    def __post_init__(self):
        for name in ("d_k", "d_v"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, self.d_model // self.num_heads)
        problems = []
        for name in ("vocab_size", "num_layers", "d_model", "d_ff", "num_heads", "d_k", "d_v",
                     "max_length"):
            if int(getattr(self, name)) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("dropout", "attention_dropout", "relu_dropout"):
            if not 0.0 <= float(getattr(self, name)) < 1.0:
                problems.append(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.positional not in ("sinusoidal", "learned"):
            problems.append(
                f"positional must be 'sinusoidal' or 'learned', got {self.positional!r}")
        if self.norm not in ("post", "pre"):
            problems.append(f"norm must be 'post' or 'pre', got {self.norm!r}")
        if problems:
            raise ValueError("Invalid TransformerConfig: " + "; ".join(problems))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "TransformerConfig":
        """The configuration named by a key of `PRESETS`, with `overrides` applied."""
        if name not in PRESETS:
            raise ValueError(f"Unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
        return cls.from_dict({**PRESETS[name], **overrides})

    def replace(self, **changes: Any) -> "TransformerConfig":
        """A copy with `changes` applied (d_k/d_v recomputed unless given)."""
        fields = self.to_dict()
        if "d_model" in changes or "num_heads" in changes:
            del fields["d_k"], fields["d_v"]
        return TransformerConfig(**{**fields, **changes})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> "TransformerConfig":
        """The config of `fields`, less the `TRAINING_FIELDS` of older config.json files."""
        fields = {k: v for k, v in fields.items() if k not in TRAINING_FIELDS}
        unknown = set(fields) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"Unknown TransformerConfig field(s): {', '.join(sorted(unknown))}")
        return cls(**fields)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "TransformerConfig":
        return cls.from_dict(json.loads(text))


TRAINING_FIELDS = ("label_smoothing", "train_steps")  # older config.json files' training fields

_SMALL = dict(num_layers=3, d_model=256, d_ff=1024, num_heads=4)
_TINY = dict(vocab_size=10000, num_layers=4, d_model=128, d_ff=256, num_heads=4, dropout=0.3,
             max_length=256)

PRESETS: dict[str, dict] = {
    "base": {},
    "big": dict(d_model=1024, d_ff=4096, num_heads=16, dropout=0.3),
    "A1": dict(num_heads=1, d_k=512, d_v=512), "A2": dict(num_heads=4, d_k=128, d_v=128),
    "A3": dict(num_heads=16, d_k=32, d_v=32), "A4": dict(num_heads=32, d_k=16, d_v=16),
    "B1": dict(d_k=16), "B2": dict(d_k=32),
    "C1": dict(num_layers=2), "C2": dict(num_layers=4), "C3": dict(num_layers=8),
    "C4": dict(d_model=256, d_k=32, d_v=32), "C5": dict(d_model=1024, d_k=128, d_v=128),
    "C6": dict(d_ff=1024), "C7": dict(d_ff=4096),
    "D1": dict(dropout=0.0), "D2": dict(dropout=0.2),
    "D3": {}, "D4": {},  # label smoothing 0 and 0.2: training settings (the recipe's)
    "E": dict(positional="learned"),
    # Not from the paper: trains in minutes on a 2-core CPU (`--task text` picks it below a
    # million pairs); and with Multi30k's 8,000 pieces.
    "small": dict(**_SMALL, dropout=0.1),
    "multi30k_small": dict(vocab_size=8000, **_SMALL, dropout=0.1, max_length=256),
    # fairseq's `transformer_tiny` with the task's vocabulary; with Multi30k's, as Wu et al.'s
    # (ACL 2021) text-only baseline, and trained with the recipe that reproduced its figure.
    "tiny": {k: v for k, v in _TINY.items() if k != "vocab_size"},
    "multi30k_tiny": dict(_TINY),
    "multi30k_quality": dict(_TINY),
    # Section 6.3: 4 layers, d_model 1024, the base model's other settings, 16K vocabulary.
    "parsing_wsj": dict(vocab_size=16000, num_layers=4, d_model=1024, d_k=128, d_v=128,
                        max_length=1024),
    # Not from the paper: a parser for the 10% WSJ sample on a 2-core CPU (docs/parsing.md).
    "parsing_wsj_sample": dict(vocab_size=4000, num_layers=4, d_model=256, d_ff=1024,
                               num_heads=4, dropout=0.3, max_length=1024),
}
"""Every named model, `TransformerConfig.preset(name)`, as the fields it sets (else base's):
Table 2's, Table 3's rows (A heads, B d_k, C size, D regularisation, E positions) and CPU-sized
ones. A `vocab_size` or `max_length` here wins over a task's; presets without them take it."""
