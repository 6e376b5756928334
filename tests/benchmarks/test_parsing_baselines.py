"""The word-blind parsing baselines as a regression test of the project's EVALB and trees."""
import pytest
from benchmarks import parsing_baselines
from pipelines.tasks.parsing import treebank


@pytest.mark.quick
def test_right_branching_dev_f1_on_the_wsj_sample(shared_data):
    """The right-branching tree of every dev sentence of the 10% WSJ sample, scored by
    `pipelines.tasks.parsing.evalb` (COLLINS.prm): 17.27 labelled F1 when issue 14 was filed.

    Deterministic (integer bracket counts, no model), so the counts are asserted exactly and
    the F1 to 2 decimals: a change means the reader, the scorer or the baseline changed.
    """
    dev = treebank.read_trees(shared_data / "ptb_sample" / "dev.mrg", preprocessed=True)
    scores = parsing_baselines.score(
        dev, [parsing_baselines.right_branching(len(tree.leaves())) for tree in dev])
    assert (scores["sentences"], scores["matched"], scores["gold"], scores["test"]) == (
        273, 952, 4980, 6045)
    assert (scores["exact"], scores["skipped"], scores["repaired"]) == (0, 0, 0)
    assert round(scores["f1"], 2) == 17.27
    assert (round(scores["precision"], 2), round(scores["recall"], 2)) == (15.75, 19.12)
