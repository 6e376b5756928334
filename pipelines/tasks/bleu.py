"""BLEU as reproducible sacreBLEU (detokenized, cased, 13a, with its signature) and as the paper
computed it: `tokenized_bleu` follows tensor2tensor's get_ende_bleu.sh (compounds split into
` ##AT##-##AT## `, multi-bleu.perl), with sacreBLEU's 13a standing in for Moses' tokenizer."""

import re

import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

_COMPOUND = re.compile(r"(\S)-(\S)")


def sacre_bleu(hypotheses, references, lowercase=False):
    """sacreBLEU (default 13a tokenization) -> (score, signature string)."""
    metric = sacrebleu.metrics.BLEU(lowercase=lowercase)
    return metric.corpus_score(hypotheses, [references]).score, str(metric.get_signature())


def tokenized_bleu(hypotheses, references, split_compounds=True, lowercase=False):
    """BLEU on tokenized text, as multi-bleu.perl after tensor2tensor's get_ende_bleu.sh."""
    tokenize = Tokenizer13a()

    def prepare(line):
        line = tokenize(line.lower() if lowercase else line)
        return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line) if split_compounds else line

    metric = sacrebleu.metrics.BLEU(tokenize="none", force=True)
    return metric.corpus_score([prepare(h) for h in hypotheses],
                               [[prepare(r) for r in references]]).score


def score_translations(hypotheses, references, target_lang="de"):
    """Every BLEU variant we report, with the sacreBLEU signature."""
    score, signature = sacre_bleu(hypotheses, references)
    lower, lower_signature = sacre_bleu(hypotheses, references, lowercase=True)
    split = target_lang == "de"  # the paper's compound splitting is for German
    return {"sacrebleu": score, "sacrebleu_signature": signature,
            "sacrebleu_lowercase": lower, "sacrebleu_lowercase_signature": lower_signature,
            "tokenized_bleu": tokenized_bleu(hypotheses, references, split_compounds=split),
            "tokenized_bleu_lowercase": tokenized_bleu(hypotheses, references,
                                                       split_compounds=split, lowercase=True)}
