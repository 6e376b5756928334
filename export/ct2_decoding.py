"""CTranslate2 decoding that gives our translations, on a directory that
`export.ctranslate2.write_ctranslate2` wrote (its files: `SETTINGS_FILE`, `VOCAB_FILE` and
CTranslate2's own); needs ctranslate2 and sentencepiece only, no TensorFlow.

CTranslate2 ranks and stops differently from our search (export/README.md), so `translate`
lets it collect beam_size * patience finished hypotheses under its length penalty closest to
ours (`ct2_length_penalty`) and re-ranks them by ours.
"""
import json
import math
import pathlib
from typing import Any, Sequence

SETTINGS_FILE = "keras_transformer.json"
"""The decoding settings (`translate`'s defaults) and the model's shape, beside CTranslate2's
files."""
VOCAB_FILE = "spm.model"
PATIENCE = 1.0
"""`translate` lets CTranslate2 finish PATIENCE * beam_size hypotheses before it stops: 1
agrees with ours almost as often as 2, and is faster (figures: docs/serving.md)."""


def ct2_length_penalty(alpha: float) -> float:
    """CTranslate2's length_penalty closest to our alpha: length ** (2 alpha / 3) has the
    slope of ((5 + length) / 6) ** alpha at 10 tokens, a typical sentence. Never 0: with 0
    CTranslate2 stops when its best beam ends instead of waiting for beam_size * patience."""
    return max(alpha * 2 / 3, 1e-3)


class ConversionError(ValueError):
    """The model cannot be written as a CTranslate2 model (its vocabulary or shape), or a
    setting that CTranslate2 cannot honour."""


def check_stop_rule(decoding: dict[str, Any]) -> None:
    """Raises ConversionError for a stop rule `translate` cannot give. It collects finished
    hypotheses and re-ranks them, which approximates the "exact" rule; "best_finished"
    compares the best finished hypothesis with the best live one under our length penalty,
    which CTranslate2's search cannot see. With alpha 0 the two rules are one (a live
    hypothesis's score only falls)."""
    rule = decoding.get("stop_rule", "exact")  # exports written before it was recorded
    if rule != "exact" and decoding["alpha"] != 0:
        raise ConversionError(f"CTranslate2 cannot stop sentences by --stop_rule {rule} with "
                              f"alpha {decoding['alpha']}; pass --stop_rule exact (or "
                              f"--alpha 0) to this export")


def gnmt_best(hypotheses: Sequence[list[str]], scores: Sequence[float], alpha: float,
              ct2_length_penalty: float) -> tuple[list[str], float]:
    """The hypothesis with the best GNMT score among CTranslate2's finished ones (end token
    included), and that score: CTranslate2's score * length ** ct2_length_penalty is the
    log-probability, divided by ((5 + length) / 6) ** alpha as our search does."""
    best, best_score = None, -math.inf
    for tokens, score in zip(hypotheses, scores):
        length = max(len(tokens), 1)
        ours = score * length ** ct2_length_penalty / ((5.0 + length) / 6.0) ** alpha
        if ours > best_score:
            best, best_score = tokens, ours
    return best, best_score


def source_pieces(sp, lines: Sequence[str], decoding: dict[str, Any],
                  max_length: int) -> tuple[list[list[str]], int]:
    """(the sources' pieces, CTranslate2's max_decoding_length for them as one batch).

    A source keeps its first max_input_length - 1 pieces (CTranslate2 adds EOS); an output
    has at most min(source tokens + extra_length, max_length) tokens, our last one a forced
    end token where CTranslate2 stops without one: one token less, for the longest source.
    """
    max_input = decoding.get("max_input_length") or max_length
    pieces = [p[:max_input - 1] for p in sp.encode(list(lines), out_type=str)]
    longest = max((len(p) + 1 for p in pieces), default=1)
    return pieces, min(longest + decoding["extra_length"], max_length) - 1


def translate(translator, sp, lines: Sequence[str], decoding: dict[str, Any],
              max_length: int, patience: float = PATIENCE, **options) -> list[dict[str, Any]]:
    """Raw sentences -> [{"pieces", "translation", "score"}] with our beam search's choice
    (the module's docstring), lengths as `source_pieces` says.

    Args:
        translator: a `ctranslate2.Translator` on a `write_ctranslate2` directory.
        sp: its `sentencepiece.SentencePieceProcessor` (spm.model).
        decoding: beam_size, alpha, extra_length, stop_rule, max_input_length
            (SETTINGS_FILE's).
        max_length: the model's max_length (SETTINGS_FILE's "model").
        patience: CTranslate2 collects beam_size * patience finished hypotheses.
        options: more `translate_batch` options (max_batch_size, ...).

    `min_decoding_length=0`: ours may end at the first step (CTranslate2's default is 1).
    """
    check_stop_rule(decoding)
    if not lines:
        return []
    beam_size, alpha = decoding["beam_size"], decoding["alpha"]
    pieces, limit = source_pieces(sp, lines, decoding, max_length)
    candidates = max(1, round(beam_size * patience))
    penalty = ct2_length_penalty(alpha)
    results = translator.translate_batch(
        pieces, beam_size=beam_size, patience=patience, num_hypotheses=candidates,
        length_penalty=penalty, return_scores=True, return_end_token=True,
        max_decoding_length=limit, min_decoding_length=0, max_input_length=0, **options)
    out = []
    for result in results:
        best, score = gnmt_best(result.hypotheses, result.scores, alpha, penalty)
        best = best[:-1] if best and best[-1] == "</s>" else best
        out.append({"pieces": best, "translation": sp.decode_pieces(best), "score": score})
    return out


def load(ct2_dir, compute_type: str = "float32", **translator_options):
    """(ctranslate2.Translator, SentencePieceProcessor, SETTINGS_FILE's dict) of a
    `write_ctranslate2` directory, ready for `translate`."""
    import ctranslate2
    import sentencepiece

    ct2_dir = pathlib.Path(ct2_dir)
    info = json.loads((ct2_dir / SETTINGS_FILE).read_text(encoding="utf-8"))
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", compute_type=compute_type,
                                        **translator_options)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(ct2_dir / VOCAB_FILE))
    return translator, sp, info
