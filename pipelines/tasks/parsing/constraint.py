"""Constrained beam search for parsing: every hypothesis is a well-formed linearized tree, so
none needs `linearize.delinearize`'s repairs, which cost F1. A hypothesis only grows by symbols
that keep it a prefix of a tree over the sentence's words: the first opens the root; a word symbol
only inside a constituent while words are left; a closing bracket only with the innermost open
label, not right after its opening, and the root's only after every word; an opening bracket only
if the tokens still allowed can close it and all else; after the root's close only the end token.
These rules finish a tree within the length limit. Tree symbols must be single pieces (`▁(NP`,
`▁)NP`, `▁NN`, `▁XX`); words are counted from the source pieces that start with `▁`.
"""

from typing import Sequence

import numpy as np
import tensorflow as tf

from keras_transformer.constants import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.decoding import DecodingConstraint
from pipelines.tasks.parsing.linearize import CLOSE, OPEN, is_word_symbol

WORD_START = "\u2581"
"""SentencePiece's whitespace marker: a piece starting with it starts a word."""


class TreeConstraint(DecodingConstraint):
    """Allows only continuations that stay a well-formed linearized tree (module docstring).
    `pieces[i]` is the piece of id i; `word_symbols` stand for a word (`NN`, ...; `XX`; no `▁`).
    `copy_words` ("words" form): each word slot copies the next source word's pieces, its first
    ranked by `logits`, the rest forced. `read_words` ("read" forms): the decoder reads each word
    after its word symbol."""

    def __init__(self, pieces: Sequence[str], word_symbols: Sequence[str] = (),
                 copy_words: bool = False, read_words: bool = False):
        if copy_words and read_words:
            raise ValueError("copy_words and read_words exclude each other")
        index = {piece: i for i, piece in enumerate(pieces)}
        word_ids = sorted({index[WORD_START + symbol] for symbol in word_symbols
                           if WORD_START + symbol in index})
        self.copy_words, self.read_words = copy_words, read_words
        if not word_ids and not copy_words:
            raise ValueError(
                "the vocabulary has no word-symbol piece (POS tag or XX): it was not trained "
                "with the tree symbols as user-defined symbols (task ptb_parsing does that)")
        self.is_word = np.isin(np.arange(len(pieces)), word_ids)
        self.close_of = close_of = np.full(len(pieces), -1, np.int32)
        for i, piece in enumerate(pieces):
            if piece.startswith(WORD_START + OPEN) and len(piece) > 2:
                close_of[i] = index.get(WORD_START + CLOSE + piece[2:], -1)
        if not (close_of >= 0).any():
            raise ValueError("the vocabulary has no pair of tree bracket pieces "
                             f"({WORD_START}(LABEL and {WORD_START})LABEL)")
        self.is_open = close_of >= 0
        self.is_close = np.isin(np.arange(len(pieces)), close_of[self.is_open])
        self.word_start = np.array([piece.startswith(WORD_START) for piece in pieces])
        self.is_text = ~(self.is_open | self.is_close)
        self.is_text[[PAD_ID, UNK_ID, BOS_ID, EOS_ID]] = False

    @classmethod
    def from_proto(cls, spm_proto: bytes, copy_words: bool = False,
                   read_words: bool = False) -> "TreeConstraint":
        """The constraint for a serialized SentencePiece model: its user-defined `▁SYMBOL` pieces
        that are not brackets are the word symbols."""
        from sentencepiece import sentencepiece_model_pb2

        model = sentencepiece_model_pb2.ModelProto.FromString(spm_proto)
        pieces = [p.piece for p in model.pieces]
        user_defined = sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED
        words = [p.piece[1:] for p in model.pieces if p.type == user_defined
                 and p.piece.startswith(WORD_START) and is_word_symbol(p.piece[1:])]
        return cls(pieces, words, copy_words, read_words)

    def words(self, source_ids):
        """int32 [batch]: the words of each source (pieces that start one)."""
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        starts = tf.gather(tf.constant(self.word_start), source_ids)
        starts &= tf.not_equal(source_ids, PAD_ID) & tf.not_equal(source_ids, EOS_ID)
        return tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)

    def first_pieces(self, source_ids):
        """int32 [batch, source_len + 1]: each source word's first piece in order, then the end
        token. Static shapes, so the same code runs in tf.data, the search and XLA."""
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        starts = tf.gather(tf.constant(self.word_start), source_ids)
        starts &= tf.not_equal(source_ids, PAD_ID) & tf.not_equal(source_ids, EOS_ID)
        word_index = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1
        at = tf.one_hot(tf.where(starts, word_index, -1), tf.shape(source_ids)[1] + 1,
                        on_value=True, off_value=False)  # [batch, source_len, words + 1]
        first = tf.reduce_sum(tf.where(at, source_ids[:, :, None], 0), axis=1)
        return tf.where(tf.equal(first, PAD_ID), EOS_ID, first)

    def teacher_inputs(self, source_ids, target_in):
        """The decoder's training input in the "read" forms: `target_in` ([BOS] + target, int32
        [batch, length] or one row) with the start token and each word symbol replaced by the
        next word's first piece (the end token after the last), as `decoder_inputs` does."""
        if not self.read_words:
            return target_in
        unbatched = target_in.shape.rank == 1
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        target_in = tf.convert_to_tensor(target_in, tf.int32)
        if unbatched:
            source_ids, target_in = source_ids[None], target_in[None]
        first = self.first_pieces(source_ids)
        is_slot = self._is_word_id(target_in)
        # The start token reads word 0; the i-th word symbol (from 1) reads word i.
        index = tf.minimum(tf.cumsum(tf.cast(is_slot, tf.int32), axis=1), tf.shape(first)[1] - 1)
        reads = is_slot | tf.equal(target_in, BOS_ID)
        read = tf.where(reads, tf.gather(first, index, batch_dims=1), target_in)
        return read[0] if unbatched else read

    def decoder_inputs(self, ids, state):
        """What the decoder reads for the tokens `ids` just chosen, as in `teacher_inputs`."""
        if not self.read_words:
            return ids
        is_slot = self._is_word_id(ids)
        index = state["words"] - state["words_left"] + tf.cast(is_slot, tf.int32)
        word = tf.gather(state["first_pieces"], index, axis=2, batch_dims=2)
        return tf.where(is_slot | tf.equal(ids, BOS_ID), word, ids)

    def _is_word_id(self, ids):
        """bool: whether each id is a word symbol (ids past the vocabulary are not)."""
        table = tf.constant(np.append(self.is_word, False))
        return tf.gather(table, tf.minimum(ids, len(self.is_word)))

    def initial_state(self, source_ids, beam_size, max_steps):
        words = tf.tile(self.words(source_ids)[:, None], [1, beam_size])
        # "closers": the closing piece each open constituent expects, by depth.
        state = {"words_left": words, "depth": tf.zeros_like(words),
                 "closers": tf.zeros(tf.concat([tf.shape(words), [max_steps + 1]], 0), tf.int32)}
        if self.read_words:
            first = self.first_pieces(source_ids)[:, None, :]
            state.update(words=words, first_pieces=tf.tile(first, [1, beam_size, 1]))
        if self.copy_words:
            source_ids = tf.convert_to_tensor(source_ids, tf.int32)
            pieces = tf.where(tf.equal(source_ids, EOS_ID), PAD_ID, source_ids)
            state["source"] = tf.tile(pieces[:, None, :], [1, beam_size, 1])
            state["copied"] = tf.zeros_like(words)  # source pieces copied so far
            state["copy_id"] = tf.zeros_like(words)  # the source piece a word slot takes
        return state

    def allowed(self, ids, step, state, max_lengths, vocab_size):
        opens = tf.constant(self._padded(self.is_open, vocab_size))
        is_open = tf.gather(opens, ids)
        is_close = tf.gather(tf.constant(self._padded(self.is_close, vocab_size)), ids)
        words = tf.constant(self._padded(self.is_word, vocab_size))
        is_word = tf.gather(words, ids)
        depth, closers = state["depth"], state["closers"]
        at_depth = tf.one_hot(depth, tf.shape(closers)[2], on_value=True, off_value=False)
        closer = tf.gather(tf.constant(self._padded(self.close_of, vocab_size)), ids)
        closers = tf.where(at_depth & is_open[:, :, None], closer[:, :, None], closers)
        depth += tf.cast(is_open, tf.int32) - tf.cast(is_close, tf.int32)
        new_state = {"depth": depth, "closers": closers}
        if self.read_words:
            new_state.update(words=state["words"], first_pieces=state["first_pieces"])
        if self.copy_words:
            copy, forced, pieces_left, is_word = self._copy(
                ids, step, state, new_state, is_open | is_close, vocab_size)
        new_state["words_left"] = words_left = state["words_left"] - tf.cast(is_word, tf.int32)

        # Tokens that may still be generated, this one included.
        remaining = tf.cast(max_lengths, tf.int32)[:, None] - step
        inside = depth > 0
        end_ok = tf.equal(words_left, 0) & ~inside
        word_ok = (words_left > 0) & inside
        # Not right after an opening bracket: `is_open` is the token just chosen.
        close_ok = inside & ~is_open & ((depth > 1) | tf.equal(words_left, 0))
        # Opening one more needs room for it, its closing bracket, the words left, every
        # open constituent's closing bracket and the end token.
        tokens_left = pieces_left if self.copy_words else words_left
        open_ok = ((words_left > 0) & (tokens_left + depth + 3 <= remaining)
                   & (inside | tf.equal(step, 0)))
        expected = tf.gather(closers, tf.maximum(depth - 1, 0), axis=2, batch_dims=2)

        column = tf.range(vocab_size)[None, None, :]
        word_column = (tf.equal(column, copy[:, :, None]) if self.copy_words
                       else words[None, None, :])
        allowed = ((tf.equal(column, EOS_ID) & end_ok[:, :, None])
                   | (word_column & word_ok[:, :, None])
                   | (tf.equal(column, expected[:, :, None]) & close_ok[:, :, None])
                   | (opens[None, None, :] & open_ok[:, :, None]))
        if self.copy_words:  # inside a word, its next piece and nothing else
            allowed = tf.where(forced[:, :, None], word_column, allowed)
        # A safety net that the rules above never need within the length limit: a hypothesis
        # with nothing allowed may continue freely (and is repaired afterwards).
        stuck = ~tf.reduce_any(allowed, axis=2, keepdims=True)
        return allowed | stuck, new_state

    def _copy(self, ids, step, state, new_state, is_bracket, vocab_size):
        """The "words" form's copying: (the piece a word slot may take next, whether it is forced,
        the source pieces left, whether `ids` started a word); updates `new_state`."""
        source = state["source"]
        # The step-0 token is the start token; after it, every token that is not a bracket
        # (nor the end token, after which nothing is read) is a copied piece.
        copied_now = ~is_bracket & tf.not_equal(ids, EOS_ID) & (step > 0)
        word_start = tf.constant(self._padded(self.word_start, vocab_size))
        copied = state["copied"] + tf.cast(copied_now, tf.int32)
        copy = tf.gather(tf.concat([source, tf.zeros_like(source[:, :, :1])], axis=2),
                         tf.minimum(copied, tf.shape(source)[2]), axis=2, batch_dims=2)
        new_state.update(source=source, copied=copied, copy_id=copy)
        forced = ~tf.gather(word_start, copy) & tf.not_equal(copy, PAD_ID)
        pieces_left = tf.reduce_sum(tf.cast(tf.not_equal(source, PAD_ID), tf.int32), axis=2)
        pieces_left -= copied
        starts_word = copied_now & tf.gather(word_start, ids)
        return copy, forced, pieces_left, starts_word

    def logits(self, logits, state):
        """In the "words" form, the source piece a word slot takes gets the log-probability of
        all word pieces together: by its own share, a word an unsure model spreads over many
        pieces would lose to opening yet another bracket."""
        if not self.copy_words:
            return logits
        vocab_size = logits.shape[-1]
        text = tf.constant(self._padded(self.is_text, vocab_size))
        mass = tf.reduce_logsumexp(tf.where(text, logits, tf.float32.min), axis=-1, keepdims=True)
        at_copy = tf.equal(tf.range(vocab_size), state["copy_id"][:, :, None])
        return tf.where(at_copy, tf.cast(mass, logits.dtype), logits)

    @staticmethod
    def _padded(table: np.ndarray, vocab_size: int) -> np.ndarray:
        """`table` over the model's vocabulary, which may be larger than SentencePiece's."""
        padding = max(0, vocab_size - len(table))
        fill = -1 if table.dtype != bool else False
        return np.concatenate([table, np.full(padding, fill, table.dtype)])[:vocab_size]
