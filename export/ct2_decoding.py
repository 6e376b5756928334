"""CTranslate2 decoding that gives our translations, on a `write_ctranslate2` directory, with
ctranslate2 and sentencepiece only. CTranslate2 ranks and stops differently (export/README.md),
so `translate` lets it collect beam_size * patience finished hypotheses under the length penalty
closest to ours (`ct2_length_penalty`), then re-ranks them."""
import json
import math
import pathlib
from typing import Any, Sequence

SETTINGS_FILE = "keras_transformer.json"
"""Beside CTranslate2's files: decoding settings (`translate`'s defaults) and the model's shape."""
VOCAB_FILE = "spm.model"
PATIENCE = 1.0
"""CTranslate2 finishes PATIENCE * beam_size hypotheses before it stops (docs/serving.md)."""
ASCII_SPACE = " \t\n\v\f\r"


def ct2_length_penalty(alpha: float) -> float:
    """CTranslate2's length_penalty closest to alpha: length ** (2 alpha / 3) has the slope of
    ((5 + length) / 6) ** alpha at 10 tokens. Never 0: with 0 it stops when its best beam ends."""
    return max(alpha * 2 / 3, 1e-3)


class ConversionError(ValueError):
    """A model (vocabulary, shape) or a setting that CTranslate2 cannot take."""


def check_stop_rule(decoding: dict[str, Any]) -> None:
    """ConversionError for a stop rule `translate` cannot give: "best_finished" needs the best
    live hypothesis, which CTranslate2 hides (with alpha 0 it is "exact": live scores only fall)."""
    rule = decoding.get("stop_rule", "exact")  # absent from older exports
    if rule != "exact" and decoding["alpha"] != 0:
        raise ConversionError(f"CTranslate2 cannot stop sentences by --stop_rule {rule} with "
                              f"alpha {decoding['alpha']}; pass --stop_rule exact (or "
                              f"--alpha 0) to this export")


def gnmt_best(hypotheses: Sequence[list[str]], scores: Sequence[float], alpha: float,
              ct2_length_penalty: float) -> tuple[list[str], float]:
    """(hypothesis, score) best by our GNMT score among CTranslate2's finished ones (end token
    included): score * length ** ct2_length_penalty / ((5 + length) / 6) ** alpha."""
    best, best_score = None, -math.inf
    for tokens, score in zip(hypotheses, scores):
        length = max(len(tokens), 1)
        ours = score * length ** ct2_length_penalty / ((5.0 + length) / 6.0) ** alpha
        if ours > best_score:
            best, best_score = tokens, ours
    return best, best_score


def source_pieces(sp, lines: Sequence[str], decoding: dict[str, Any],
                  max_length: int) -> tuple[list[list[str]], int]:
    """(the sources' pieces, CTranslate2's max_decoding_length for them as one batch): sources
    keep max_input_length - 1 pieces (CTranslate2 adds EOS); the length is our output cap for the
    longest source, min(tokens + extra_length, max_length), less our forced end token."""
    max_input = decoding.get("max_input_length") or max_length
    # An all-space line is an empty one (ASCII spaces, as `tf.strings.strip` in ours).
    lines = [line if line.strip(ASCII_SPACE) else "" for line in lines]
    pieces = [p[:max_input - 1] for p in sp.encode(lines, out_type=str)]
    longest = max((len(p) + 1 for p in pieces), default=1)
    return pieces, min(longest + decoding["extra_length"], max_length) - 1


def translate(translator, sp, lines: Sequence[str], decoding: dict[str, Any],
              max_length: int, patience: float = PATIENCE, **options) -> list[dict[str, Any]]:
    """Raw sentences -> [{"pieces", "translation", "score"}]: our beam search's choice, lengths
    as `source_pieces` says, never ending before the first token (`min_decoding_length=1`, as
    ours); a line without pieces gives "" and score 0, as ours does. `translator`, `sp` as `load`
    gives them; `decoding`, `max_length` from SETTINGS_FILE; `options` go to `translate_batch`."""
    check_stop_rule(decoding)
    if not lines:
        return []
    beam_size, alpha = decoding["beam_size"], decoding["alpha"]
    pieces, limit = source_pieces(sp, lines, decoding, max_length)
    out = [{"pieces": [], "translation": "", "score": 0.0} for _ in pieces]
    given = [i for i, p in enumerate(pieces) if p]
    if not given:
        return out
    penalty = ct2_length_penalty(alpha)
    results = translator.translate_batch(
        [pieces[i] for i in given], beam_size=beam_size, patience=patience,
        num_hypotheses=max(1, round(beam_size * patience)), length_penalty=penalty,
        return_scores=True, return_end_token=True, max_decoding_length=limit,
        min_decoding_length=1, max_input_length=0, **options)
    for i, result in zip(given, results):
        best, score = gnmt_best(result.hypotheses, result.scores, alpha, penalty)
        best = best[:-1] if best and best[-1] == "</s>" else best
        out[i] = {"pieces": best, "translation": sp.decode_pieces(best), "score": score}
    return out


def load(ct2_dir, compute_type: str = "float32", **translator_options):
    """(ctranslate2.Translator, SentencePieceProcessor, SETTINGS_FILE's dict) for `translate`."""
    import ctranslate2
    import sentencepiece

    ct2_dir = pathlib.Path(ct2_dir)
    info = json.loads((ct2_dir / SETTINGS_FILE).read_text(encoding="utf-8"))
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", compute_type=compute_type,
                                        **translator_options)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(ct2_dir / VOCAB_FILE))
    return translator, sp, info
