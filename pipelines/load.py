"""A trained model dir in one call, from Python: `load(model_dir).translate(["A dog."])`."""

import os
from typing import Sequence

from export.translator import Translator


class ModelDirTranslator:
    """Translates text with a trained model dir; see `load`."""

    def __init__(self, translator: Translator):
        self.translator = translator

    @property
    def search(self):
        """The recorded decoding settings, with `load`'s overrides: the translator's."""
        return self.translator.search

    def translate(self, sentences: Sequence[str], *, beam_size: int | None = None,
                  alpha: float | None = None, max_extra_length: int | None = None,
                  n_best: int = 1) -> list:
        """One translation per sentence (str); with `n_best` > 1, per sentence a list of `n_best`
        (translation, score) pairs, best first. The keywords override this call's search
        (`beam_size` at least `n_best`)."""
        import tensorflow as tf

        sentences = tf.constant(list(sentences), tf.string)
        if (beam_size, alpha, max_extra_length, n_best) == (None, None, None, 1):
            out = self.translator.translate(sentences)
            return [t.decode("utf-8") for t in out["translation"].numpy()]
        out = self.translator.translate_with_options(
            sentences, beam_size or max(self.search.beam_size, n_best),
            self.search.alpha if alpha is None else alpha, n_best,
            self.search.extra_length if max_extra_length is None else max_extra_length,
            tf.fill(tf.shape(sentences), ""))
        rows = [[(t.decode("utf-8"), float(s)) for t, s in zip(texts, scores)]
                for texts, scores in zip(out["translations"].numpy(), out["scores"].numpy())]
        return [row[0][0] for row in rows] if n_best == 1 else rows


def load(model_dir: os.PathLike | str, **decoding) -> ModelDirTranslator:
    """The model dir's translator: its final weights (else its latest checkpoint), vocabulary
    and recorded decoding settings; a keyword (any decoding flag, `beam_size=8`) overrides one.
    Raises `ModelDirError` for an untrained model dir, `ConfigError` for a refused setting."""
    from pipelines.settings import resolver
    from pipelines.stages.export import make_translator

    options = resolver.resolve({"model_dir": os.fspath(model_dir), **decoding})
    return ModelDirTranslator(make_translator(options, options.make_task(),
                                              log=lambda message: None))
