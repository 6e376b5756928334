#!/usr/bin/env python
"""Two parsers that never read the words, as floors for the ptb_parsing dev F1.

    python benchmarks/parsing_baselines.py --data ../shared/data/ptb_sample

Both are scored on the dev trees with the project's own EVALB (`pipelines.tasks.parsing.evalb`,
COLLINS.prm: gold punctuation deleted, preterminals ignored), and print precision, recall and
labelled F1, one line each:

* right-branching: for n words, `(S w1 (VP w2 (VP w3 ... (VP w(n-1) wn))))`: one S over the
  sentence, its first word, then a chain of VPs, the VP starting at word i spanning words
  i..n, down to the VP over the last two words (n = 1: `(S w1)`; n = 2: `(S w1 w2)`).
* n-gram: a source-blind language model over target symbols (order 4 by default,
  interpolated absolute discounting, D = 0.75) trained on the training targets, that only
  knows the number of words: decoded greedily (the most probable allowed symbol at every
  step, no beam) under the same rules as the beam search's `TreeConstraint` (brackets close
  in order, no empty constituent, exactly one word symbol per word, one root, end once
  complete), so every output is a well-formed tree over the sentence.

Targets use `--target_form` (default "xx", the form the figures in issue 14 were measured
with; "tags" trains the n-gram on POS-tag targets). Pure Python, no TensorFlow: seconds.
"""
from __future__ import annotations

import argparse
import collections
import math
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from pipelines.tasks.parsing import evalb, linearize, treebank  # noqa: E402

END = "</s>"
START = "<s>"


def right_branching(count: int) -> list[str]:
    """The right-branching target for `count` words (module docstring), XX word symbols."""
    if count == 0:
        return []
    symbols = ["(S", linearize.PLACEHOLDER]
    chain = max(0, count - 2)  # VPs starting at words 2 .. n-1
    for _ in range(chain):
        symbols += ["(VP", linearize.PLACEHOLDER]
    symbols += [linearize.PLACEHOLDER] * (count - 1 - chain)
    return symbols + [")VP"] * chain + [")S"]


class NGram:
    """Interpolated absolute-discounting n-gram model over symbols (`END` ends a line)."""

    def __init__(self, lines: list[list[str]], order: int, discount: float = 0.75):
        self.order, self.discount = order, discount
        self.counts = [collections.defaultdict(collections.Counter) for _ in range(order)]
        for symbols in lines:
            padded = [START] * (order - 1) + symbols + [END]
            for i in range(order - 1, len(padded)):
                for n in range(order):  # n = context length
                    self.counts[n][tuple(padded[i - n:i])][padded[i]] += 1
        self.vocab = sorted(self.counts[0][()])
        # Per history: (total count, distinct followers), and a cache of computed log-probs.
        self.totals = [{h: (sum(c.values()), len(c)) for h, c in level.items()}
                       for level in self.counts]
        self.cache: dict[tuple, float] = {}

    def log_prob(self, context: tuple[str, ...], symbol: str) -> float:
        """log P(symbol | the last order-1 symbols of context)."""
        key = context[len(context) - self.order + 1:] + (symbol,)
        if key not in self.cache:
            prob = 1.0 / len(self.vocab)
            for n in range(self.order):
                history = context[len(context) - n:] if n else ()
                if history not in self.totals[n]:
                    continue
                total, distinct = self.totals[n][history]
                seen = self.counts[n][history][symbol]
                prob = max(seen - self.discount, 0) / total + self.discount * distinct / total * prob
            self.cache[key] = math.log(prob)
        return self.cache[key]


def allowed(symbol: str, words_left: int, stack: list[str], just_opened: bool, started: bool,
            room: int) -> bool:
    """Whether `symbol` may come next (the rules of `constraint.TreeConstraint`).

    `stack`: labels of the open constituents; `just_opened`: the last symbol opened one;
    `started`: the root was opened; `room`: symbols that may still be generated, this one and
    the end included.
    """
    depth = len(stack)
    if symbol == END:
        return words_left == 0 and depth == 0 and started
    if linearize.is_word_symbol(symbol):
        return words_left > 0 and depth > 0
    label = symbol[1:]
    if symbol.startswith(linearize.CLOSE):
        return (depth > 0 and stack[-1] == label and not just_opened
                and (depth > 1 or words_left == 0))
    return (words_left > 0 and words_left + depth + 3 <= room
            and (depth > 0 or not started))


def greedy_decode(model: NGram, count: int, extra_length: int = 300) -> list[str]:
    """The n-gram's greedy choice, step by step, among the symbols `allowed` allows."""
    symbols: list[str] = []
    stack: list[str] = []
    words_left, just_opened, started = count, False, False
    context = (START,) * (model.order - 1)
    max_length = count + extra_length
    while True:
        room = max_length - len(symbols)
        options = [s for s in model.vocab
                   if allowed(s, words_left, stack, just_opened, started, room)]
        if not options:
            return symbols  # only for a sentence without words
        best = max(options, key=lambda s: model.log_prob(context, s))
        if best == END:
            return symbols
        symbols.append(best)
        context = context[1:] + (best,)
        just_opened = best.startswith(linearize.OPEN)
        if linearize.is_word_symbol(best):
            words_left -= 1
        elif just_opened:
            stack.append(best[1:])
            started = True
        else:
            stack.pop()


def score(gold: list, hypotheses: list[list[str]]) -> dict:
    trees, repaired = [], 0
    for tree, symbols in zip(gold, hypotheses):
        rebuilt, repairs = linearize.delinearize(symbols, tree.leaves())
        trees.append(rebuilt)
        repaired += repairs > 0
    return dict(evalb.score_corpus(gold, trees), repaired=repaired)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    default = pathlib.Path(os.environ.get("KT_DATA_DIR", "../shared/data")) / "ptb_sample"
    parser.add_argument("--data", default=str(default), help="folder with train.mrg, dev.mrg")
    # Not "words": an n-gram over targets that contain the words would read them.
    parser.add_argument("--target_form", default="xx", choices=("tags", "xx"))
    parser.add_argument("--order", type=int, default=4)
    args = parser.parse_args()
    data = pathlib.Path(args.data)
    train = treebank.read_trees(data / "train.mrg", preprocessed=True)
    dev = treebank.read_trees(data / "dev.mrg", preprocessed=True)
    model = NGram([linearize.linearize(t, args.target_form)[1] for t in train], args.order)
    results = {
        "right-branching": score(dev, [right_branching(len(t.leaves())) for t in dev]),
        f"{args.order}-gram ({args.target_form}, greedy)":
            score(dev, [greedy_decode(model, len(t.leaves())) for t in dev]),
    }
    print(f"dev: {len(dev)} trees ({data / 'dev.mrg'}); n-gram trained on {len(train)} trees")
    for name, s in results.items():
        print(f"{name:>24}: F1 {s['f1']:.2f}  P {s['precision']:.2f}  R {s['recall']:.2f}  "
              f"exact {s['exact']}  repaired {s['repaired']}")


if __name__ == "__main__":
    main()
