"""How the parsing model meets trees: the vocabulary's tree symbols, the constrained search,
the decoder input of the "read" forms, and the serving graph's input and output."""

import pathlib

from pipelines.tasks.parsing import constraint, forms, linearize, serving, treebank


class ParsingHooks:
    """The `Task` hooks through which the stages see trees; part of `PtbParsingTask`."""

    def vocab_symbols(self, train_target: pathlib.Path) -> list[str]:
        """Every tree symbol as one piece, `▁` included: the training targets' symbols, a
        bracket pair for every `treebank.PHRASE_LABELS` and, in the "tags" forms, every
        `treebank.POS_TAGS`, so the constrained search tells symbols apart by id and can
        produce labels the training trees lack."""
        words = {"tags": treebank.POS_TAGS, "xx": (linearize.PLACEHOLDER,), "words": ()}
        symbols = set(words[forms.symbol_form(self.target_form)])
        symbols.update(bracket + label for label in treebank.PHRASE_LABELS
                       for bracket in (linearize.OPEN, linearize.CLOSE))
        with open(train_target, encoding="utf-8") as handle:
            for line in handle:  # the "words" form's words stay ordinary text
                symbols.update(symbol for symbol in line.split() if self.target_form != "words"
                               or not linearize.is_word_symbol(symbol))
        return [constraint.WORD_START + symbol for symbol in sorted(symbols)]

    def word_symbols(self) -> frozenset[str] | None:
        """The word symbols `score` accepts: `{XX}` for "xx", any non-bracket for "tags"."""
        xx = forms.symbol_form(self.target_form) == "xx"
        return frozenset([linearize.PLACEHOLDER]) if xx else None

    def word_label(self) -> str | None:
        """The preterminal of a predicted word: `XX` for "words", else its word symbol."""
        return linearize.PLACEHOLDER if self.target_form == "words" else None

    def decoding_constraint(self, spm_proto: bytes) -> constraint.TreeConstraint:
        """Beam search that only builds well-formed trees over the sentence's words."""
        return constraint.TreeConstraint.from_proto(
            spm_proto, copy_words=self.target_form == "words",
            read_words=forms.reads_words(self.target_form))

    def teacher_inputs(self, spm_proto: bytes):
        """In the "read" forms, each word symbol of the decoder input becomes its word's
        first source piece (`constraint.TreeConstraint.teacher_inputs`)."""
        if not forms.reads_words(self.target_form):
            return None
        return self.decoding_constraint(spm_proto).teacher_inputs

    def serving_input(self, sentences):
        return serving.normalize_sentences(sentences)

    def serving_output(self, sentences, outputs):
        """The exported parser answers with bracketed trees over the words."""
        return serving.trees_from_linearized(sentences, outputs, word_label=self.word_label())
