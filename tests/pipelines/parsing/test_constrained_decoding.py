"""Tree symbols as vocabulary pieces, constrained beam search, and in-graph bracketed trees."""
import nltk
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer import Transformer
from keras_transformer.decoding import BeamSearch, decode
from pipelines.data import vocab as vocab_lib
from pipelines.data.vocab import BOS_ID, EOS_ID
from pipelines.tasks.parsing import serving, treebank
from pipelines.tasks.parsing.constraint import TreeConstraint
from pipelines.tasks.parsing.linearize import delinearize, linearize, to_target_string
from pipelines.tasks.parsing.splits import tree_to_line
from pipelines.tasks.parsing.task import ptb_parsing
from tests.helpers import tiny_config

pytestmark = pytest.mark.xdist_group("test_constrained_decoding")  # its module fixtures: one worker


@pytest.fixture(scope="module")
def sample(shared_data, tmp_path_factory):
    """Linearized WSJ sample trees (POS tags kept) and a small vocabulary trained with the
    tree symbols."""
    path = shared_data / "ptb_sample"
    pairs = {split: [linearize(tree) for tree in treebank.read_trees(path / f"{split}.mrg",
                                                                       preprocessed=True)]
             for split in ("train", "dev")}
    targets = tmp_path_factory.mktemp("ptb") / "train.tgt"
    targets.write_text("".join(to_target_string(t) + "\n" for _, t in pairs["train"]))
    symbols = ptb_parsing().vocab_symbols(targets)
    lines = [" ".join(words) for words, _ in pairs["train"]]
    lines += [to_target_string(target) for _, target in pairs["train"]]
    proto = vocab_lib.train_sentencepiece(lines, 1200, user_defined_symbols=symbols)
    return pairs, proto


def dev_sentences(pairs, count):
    return [" ".join(words) for words, _ in pairs["dev"][:count]]


def test_tree_symbols_are_single_pieces(sample):
    pairs, proto = sample
    tokenizer = tf_text.SentencepieceTokenizer(model=proto)
    targets = [to_target_string(target) for _, target in pairs["dev"][:50]]
    pieces = tokenizer.tokenize(targets)
    assert pieces.row_lengths().numpy().tolist() == [len(t.split()) for t in targets]
    assert [t.decode() for t in tokenizer.detokenize(pieces).numpy()] == targets


def test_words_are_counted_from_source_pieces(sample):
    pairs, proto = sample
    constraint = TreeConstraint.from_proto(proto)
    sentences = dev_sentences(pairs, 40)
    ids = tf_text.SentencepieceTokenizer(model=proto).tokenize(sentences)
    ids = tf.concat([ids, tf.ones([len(sentences), 1], tf.int32) * 3], axis=1).to_tensor()
    assert constraint.words(ids).numpy().tolist() == [len(s.split()) for s in sentences]


def untrained_parses(proto, constraint, sentences, extra_length):
    """The symbols a random-weight model decodes for `sentences` under `constraint` (beam 3);
    every hypothesis must have ended with the end token."""
    tokenizer = tf_text.SentencepieceTokenizer(model=proto)
    source = tokenizer.tokenize(sentences)
    source = tf.concat([source, tf.fill([len(sentences), 1], EOS_ID)], axis=1).to_tensor()
    model = Transformer(tiny_config(vocab_size=tokenizer.vocab_size().numpy().item(),
                                    max_length=512))
    ids, *_ = decode(model, source, BeamSearch(beam_size=3, alpha=0.3, extra_length=extra_length),
                     constraint=constraint)
    rows = [row[: np.flatnonzero(row == EOS_ID)[0]] for row in ids[:, 0].numpy()]
    return [tokenizer.detokenize([row]).numpy()[0].decode().split() for row in rows]


@pytest.mark.parametrize("extra_length", [2, 40])
def test_untrained_model_under_the_constraint_only_builds_well_formed_trees(sample,
                                                                             extra_length):
    """Random weights choose freely among what the constraint allows: every output must
    still be a tree over exactly the sentence's words, even with almost no spare length."""
    pairs, proto = sample
    sentences = dev_sentences(pairs, 12)
    outputs = untrained_parses(proto, TreeConstraint.from_proto(proto), sentences, extra_length)
    for sentence, symbols in zip(sentences, outputs):
        tree, repairs = delinearize(symbols, sentence.split())
        assert repairs == 0, (sentence, symbols)
        assert len(tree) == 1  # one root constituent under TOP
        assert {tag for _, tag in tree.pos()} <= set(treebank.POS_TAGS)


def admits(constraint, tokenizer, sentence, target):
    """True if the constraint allows every token of `target` after its prefix (beam 1),
    without its fallback of allowing everything."""
    source = tokenizer.tokenize([sentence]).to_list()[0] + [EOS_ID]
    target_ids = tokenizer.tokenize([target]).to_list()[0] + [EOS_ID]
    vocab_size = tokenizer.vocab_size().numpy().item()
    state = constraint.initial_state(tf.constant([source]), 1, len(source) + 300)
    previous = BOS_ID
    for step, token in enumerate(target_ids):
        allowed, state = constraint.allowed(tf.constant([[previous]]), step, state,
                                            tf.constant([len(source) + 300]), vocab_size)
        allowed = allowed.numpy()[0, 0]
        if not allowed[token] or allowed.all():
            return False
        previous = token
    return True


def test_the_constraint_admits_gold_trees_with_tags(sample):
    pairs, proto = sample
    tokenizer = tf_text.SentencepieceTokenizer(model=proto)
    constraint = TreeConstraint.from_proto(proto)
    assert constraint.is_word.sum() == len(treebank.POS_TAGS)  # every tag is a word slot
    for words, target in pairs["dev"][:25]:
        assert admits(constraint, tokenizer, " ".join(words), to_target_string(target))
    words, target = pairs["dev"][0]
    wrong = list(target)
    wrong[wrong.index(")NP")] = ")VP"  # closes the innermost NP with the wrong label
    assert not admits(constraint, tokenizer, " ".join(words), to_target_string(wrong))


def test_a_label_unseen_in_training_stays_reachable(sample):
    """The WSJ sample's training trees have no WHADJP; one dev tree does. The vocabulary
    holds every standard label, so the constraint can still produce that gold tree."""
    pairs, proto = sample
    assert not any("(WHADJP" in target for _, target in pairs["train"])
    words, target = next((w, t) for w, t in pairs["dev"] if "(WHADJP" in t)
    tokenizer = tf_text.SentencepieceTokenizer(model=proto)
    text = to_target_string(target)
    assert tokenizer.tokenize([text]).row_lengths().numpy()[0] == len(target)
    assert admits(TreeConstraint.from_proto(proto), tokenizer, " ".join(words), text)


def test_without_tree_symbols_the_constraint_is_refused(shared_data):
    proto = vocab_lib.train_sentencepiece(["a plain vocabulary", "with no tree symbols"] * 20,
                                          300)
    with pytest.raises(ValueError, match="tree symbols"):
        TreeConstraint.from_proto(proto)


def test_in_graph_trees_equal_python_delinearization(sample):
    pairs, _ = sample
    sentences = [" ".join(words) for words, _ in pairs["dev"]]
    targets = [to_target_string(target) for _, target in pairs["dev"]]
    # Round brackets in words become -LRB-/-RRB-; an empty sentence gives an empty tree.
    sentences += ["f ( x )", ""]
    targets += ["(S XX (PRN -LRB- NN -RRB- )PRN )S", ""]
    got = serving.trees_from_linearized(tf.constant(sentences), tf.constant(targets))
    for sentence, target, tree in zip(sentences, targets, got.numpy()):
        words = sentence.replace("(", "-LRB-").replace(")", "-RRB-").split()
        expected = tree_to_line(delinearize(target.split(), words)[0])
        assert tree.decode() == expected
    assert nltk.Tree.fromstring(got.numpy()[-2].decode()).leaves() == [
        "f", "-LRB-", "x", "-RRB-"]


@pytest.mark.quick
def test_in_graph_trees_carry_the_predicted_pos_tags():
    got = serving.trees_from_linearized(
        tf.constant(["John runs .", "a b", "a"]),
        tf.constant(["(S (NP NNP )NP (VP VBZ )VP . )S", "(NP XX XX )NP", "(NP DT NN )NP"]))
    assert [g.decode() for g in got.numpy()] == [
        "(TOP (S (NP (NNP John)) (VP (VBZ runs)) (. .)))",
        "(TOP (NP (XX a) (XX b)))",
        "(TOP (NP (DT a)))"]  # a word symbol without a word left is dropped


@pytest.mark.quick
def test_serving_input_squeezes_whitespace():
    got = serving.normalize_sentences(tf.constant(["  John  has\ta dog . ", ""]))
    assert [g.decode() for g in got.numpy()] == ["John has a dog .", ""]


@pytest.fixture(scope="module")
def words_sample(shared_data, tmp_path_factory):
    """The "words" form: the WSJ sample linearized with the words as word symbols, and a
    vocabulary whose only tree symbols are the brackets."""
    path = shared_data / "ptb_sample"
    pairs = {split: [linearize(tree, "words") for tree in
                     treebank.read_trees(path / f"{split}.mrg", preprocessed=True)]
             for split in ("train", "dev")}
    targets = tmp_path_factory.mktemp("ptb_words") / "train.tgt"
    targets.write_text("".join(to_target_string(t) + "\n" for _, t in pairs["train"]))
    task = ptb_parsing(target_form="words")
    symbols = task.vocab_symbols(targets)
    assert all(symbol[1] in "()" for symbol in symbols)  # words stay ordinary text
    lines = [" ".join(words) for words, _ in pairs["train"]]
    lines += [to_target_string(target) for _, target in pairs["train"]]
    proto = vocab_lib.train_sentencepiece(lines, 1200, user_defined_symbols=symbols)
    return pairs, proto, task.decoding_constraint(proto)


def test_the_copying_constraint_admits_gold_trees_and_only_the_source_words(words_sample):
    pairs, proto, constraint = words_sample
    tokenizer = tf_text.SentencepieceTokenizer(model=proto)
    for words, target in pairs["dev"][:25]:
        assert admits(constraint, tokenizer, " ".join(words), to_target_string(target))
    words, target = pairs["dev"][0]
    for wrong_word in ("dog", words[1]):  # a word not in the sentence; the next word too soon
        wrong = list(target)
        wrong[wrong.index(words[0])] = wrong_word
        assert not admits(constraint, tokenizer, " ".join(words), to_target_string(wrong))


@pytest.mark.parametrize("extra_length", [2, 40])
def test_untrained_model_copies_every_word_into_a_well_formed_tree(words_sample, extra_length):
    """Random weights, the "words" form: the search must still write each source word, piece
    by piece and in order, into a well-formed tree, however the model scores the pieces."""
    pairs, proto, constraint = words_sample
    sentences = dev_sentences(pairs, 12)
    for sentence, symbols in zip(sentences,
                                 untrained_parses(proto, constraint, sentences, extra_length)):
        assert [s for s in symbols if s[0] not in "()"] == sentence.split()
        tree, repairs = delinearize(symbols, sentence.split(), word_label="XX")
        assert repairs == 0, (sentence, symbols)
        assert len(tree) == 1 and {tag for _, tag in tree.pos()} == {"XX"}


def test_a_word_slot_is_ranked_by_the_probability_of_any_word(words_sample):
    """The one source piece a word slot may take is ranked by the model's probability of a
    word there, not by its own share of it: a model unsure which word comes next must not
    prefer opening another bracket (an early model opened NPs by the hundred)."""
    pairs, proto, constraint = words_sample
    tokenizer = tf_text.SentencepieceTokenizer(model=proto)
    vocab_size = tokenizer.vocab_size().numpy().item()
    words, _ = pairs["dev"][0]
    source = tf.constant([tokenizer.tokenize([" ".join(words)]).to_list()[0] + [EOS_ID]])
    state = constraint.initial_state(source, 1, 300)
    _, state = constraint.allowed(tf.constant([[BOS_ID]]), 0, state, tf.constant([300]),
                                  vocab_size)
    _, state = constraint.allowed(tf.constant([[tokenizer.string_to_id("▁(S").numpy()]]), 1,
                                  state, tf.constant([300]), vocab_size)
    first_piece = source[0, 0].numpy()
    assert state["copy_id"].numpy()[0, 0] == first_piece
    logits = tf.random.stateless_normal([1, 1, vocab_size], seed=[1, 2])
    pooled = constraint.logits(logits, state).numpy()[0, 0]
    text = constraint.is_text[:vocab_size]
    assert pooled[first_piece] == pytest.approx(
        np.log(np.exp(logits.numpy()[0, 0][text]).sum()), rel=1e-5)
    others = np.arange(vocab_size) != first_piece
    np.testing.assert_array_equal(pooled[others], logits.numpy()[0, 0][others])


def test_the_search_reads_what_training_read(sample):
    """"read" forms: stepping the constraint along a gold target, the tokens it feeds the
    decoder (`decoder_inputs`) are exactly the teacher-forced input training rewrote
    (`teacher_inputs`): every bracket as itself, the start token and every tag as the first
    piece of the next word, the end token after the last."""
    pairs, proto = sample
    tokenizer = tf_text.SentencepieceTokenizer(model=proto)
    constraint = TreeConstraint.from_proto(proto, read_words=True)
    pieces = [tokenizer.id_to_string(i).numpy().decode()
              for i in range(tokenizer.vocab_size().numpy().item())]
    for words, target in pairs["dev"][:10]:
        source = tokenizer.tokenize([" ".join(words)]).to_list()[0] + [EOS_ID]
        target_ids = tokenizer.tokenize([to_target_string(target)]).to_list()[0]
        teacher = constraint.teacher_inputs(tf.constant(source),
                                            tf.constant([BOS_ID] + target_ids)).numpy()
        state = constraint.initial_state(tf.constant([source]), 1, len(source) + 300)
        fed = []
        for step, token in enumerate([BOS_ID] + target_ids):
            ids = tf.constant([[token]])
            fed.append(int(constraint.decoder_inputs(ids, state)[0, 0]))
            _, state = constraint.allowed(ids, step, state, tf.constant([len(source) + 300]),
                                          len(pieces))
        assert fed == teacher.tolist()
        read = [fed[0]] + [i for i, symbol in zip(fed[1:], target) if symbol[0] not in "()"]
        first = [tokenizer.tokenize([w]).to_list()[0][0] for w in words]
        assert read == first + [EOS_ID]
        brackets = [i for i, symbol in zip(fed[1:], target) if symbol[0] in "()"]
        assert brackets == [i for i, symbol in zip(target_ids, target) if symbol[0] in "()"]
    # Brackets are read as themselves; without read_words nothing is rewritten.
    assert TreeConstraint.from_proto(proto).teacher_inputs(
        tf.constant(source), tf.constant([BOS_ID] + target_ids)).numpy().tolist() == \
        [BOS_ID] + target_ids
