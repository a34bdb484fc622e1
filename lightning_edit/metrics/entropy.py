"""Generation n-gram entropy (ROME's GE, EasyEdit's fluency).

For one text: H_n = -Σ p log2 p over the frequency distribution of its word n-grams, and the score is the
weighted mean over n = 2, 3 with weights 2/3 and 4/3, i.e. H_2/3 + 2·H_3/3 (ROME ``n_gram_entropy``).

Deviation: the reference code splits words with ``nltk.word_tokenize``, which needs a data download; here words
and punctuation marks are split by a regular expression that treats ``'s``, ``n't`` and other clitics the same way
(``"don't" -> do, n't``). On plain English text the two agree except for rare cases (abbreviations with dots,
quotes), so values may differ slightly from published ones.
"""

from __future__ import annotations

import math
import re
from collections import Counter

_WORDS = re.compile(r"\w+(?=n't)|n't|'\w+|\w+|[^\w\s]")


def words(text: str) -> list[str]:
    """Words and punctuation marks of ``text``, with clitics split off (``can't`` -> ``ca``, ``n't`` as nltk)."""
    return _WORDS.findall(text)


def ngram_entropy(text: str, orders: tuple[int, ...] = (2, 3), weights: tuple[float, ...] = (2 / 3, 4 / 3)) -> float:
    """Weighted mean of the n-gram entropies (bits) of ``text``."""
    tokens = words(text)
    entropies = []
    for n in orders:
        counts = Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
        total = sum(counts.values())
        entropies.append(-sum(c / total * math.log2(c / total) for c in counts.values()) if total else 0.0)
    return sum(w * h for w, h in zip(weights, entropies)) / len(orders)
