"""Generation n-gram entropy (ROME's GE): hand-computed values and the word splitter."""

import math

import pytest

from lightning_edit.metrics import ngram_entropy, words


def test_words_split_clitics_and_punctuation_like_nltk():
    assert words("I can't believe it's Paris, isn't it?") == [
        "I", "ca", "n't", "believe", "it", "'s", "Paris", ",", "is", "n't", "it", "?",
    ]  # fmt: skip
    assert words("They'll say we don't know; I'm sure.") == [
        "They", "'ll", "say", "we", "do", "n't", "know", ";", "I", "'m", "sure", ".",
    ]  # fmt: skip
    assert words("won't  go\n\tnow!") == ["wo", "n't", "go", "now", "!"]
    assert words("nothing isn't known") == ["nothing", "is", "n't", "known"]  # "n" inside a word is not a clitic
    assert words("") == []


def test_ngram_entropy_matches_hand_computation():
    text = "The cat sat. The cat sat."
    assert words(text) == ["The", "cat", "sat", ".", "The", "cat", "sat", "."]
    # 7 bigrams: (The cat) x2, (cat sat) x2, (sat .) x2, (. The) x1
    h2 = -(3 * (2 / 7) * math.log2(2 / 7) + (1 / 7) * math.log2(1 / 7))  # = 1.950212 bits
    # 6 trigrams: (The cat sat) x2, (cat sat .) x2, (sat . The) x1, (. The cat) x1
    h3 = -(2 * (2 / 6) * math.log2(2 / 6) + 2 * (1 / 6) * math.log2(1 / 6))  # = 1.918296 bits
    expected = h2 / 3 + 2 * h3 / 3  # = mean(2/3 * H2, 4/3 * H3)
    assert h2 == pytest.approx(1.950212, abs=1e-6)
    assert h3 == pytest.approx(1.918296, abs=1e-6)
    assert ngram_entropy(text) == pytest.approx(expected, rel=1e-12)
    assert ngram_entropy(text) == pytest.approx(1.928935, abs=1e-6)


def test_ngram_entropy_is_case_sensitive_and_counts_punctuation():
    # "the" and "The" are different words; the trailing "." is a word of its own
    lower = ngram_entropy("the cat sat. The cat sat.")
    assert lower != ngram_entropy("The cat sat. The cat sat.")
    assert ngram_entropy("a b c d") == pytest.approx(math.log2(3) / 3 + 2 * math.log2(2) / 3, rel=1e-12)


def test_degenerate_texts_score_zero():
    assert ngram_entropy("") == 0.0
    assert ngram_entropy("Paris") == 0.0
    assert ngram_entropy("   ") == 0.0
    assert ngram_entropy("Paris Paris Paris Paris") == 0.0  # one distinct bigram and one distinct trigram
    # two words: one bigram (H2 = 0) and no trigram (H3 taken as 0)
    assert ngram_entropy("Paris London") == 0.0


def test_custom_orders_and_weights():
    # unigram entropy of "a b a b" is 1 bit; the weighted sum is divided by the number of orders
    assert ngram_entropy("a b a b", orders=(1,), weights=(1.0,)) == pytest.approx(1.0)
    assert ngram_entropy("a b a b", orders=(1, 2), weights=(1.0, 1.0)) == pytest.approx((1.0 + 0.918296) / 2, abs=1e-6)
