"""CaseScorer end to end on a hand-made bigram "language model" whose probabilities are known exactly.

The stub model's logits at a position depend only on the token at that position: row ``W[token]`` holds the
log-probabilities of the next token. With a whitespace word-level tokenizer, the target after a prompt is predicted
from the row of the prompt's last word (and, for a two-word target, the row of its first word), so every score
below can be written down from the tables by hand.

Conventions checked (docs/metrics.md: prob, token_acc, agreement, aggregation;
docs/benchmarks/counterfact.md#counterfact):
- ES/PS/NS: 1 iff mean per-token NLL(expected) < NLL(alternative), strictly (a tie is a failure);
- token accuracy: share of target tokens that are the argmax under teacher forcing;
- locality: share of argmax tokens along the expected answer equal to the unedited model's;
- macro = mean of per-case means, micro = mean over all prompts.
"""

import math
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import PreTrainedTokenizerFast

from lightning_edit.cases import EditCase, EditRequest, PromptGroup
from lightning_edit.evaluation import CaseScorer, ScoringConfig
from lightning_edit.metrics import PromptMean
from lightning_edit.scoring import score_targets
from lightning_edit.scoring.kinds import Target

# fmt: off
VOCAB = [
    "<pad>", "<unk>", "The", "capital", "of", "France", "Italy", "USA", "is", "called", "named", "at", "city",
    "largest", "has", "a", "in", "lies", "known", "as", "remains", "was", "Paris", "London", "Rome", "Milan",
    "New", "York", "Boston",
]
# fmt: on
ID = {word: i for i, word in enumerate(VOCAB)}
V = len(VOCAB)

# Next-token distributions, keyed by the current (last seen) word. Probability mass not listed is spread evenly
# over all other words (less than 0.02 each, so never the argmax). Rows not listed are uniform.
UNEDITED = {
    "is": {"Paris": 0.5, "Rome": 0.2, "London": 0.1, "Milan": 0.1},  # argmax Paris
    "called": {"city": 0.35, "Paris": 0.3, "London": 0.3},  # Paris and London tie; argmax "city"
    "named": {"Paris": 0.3, "London": 0.25},  # argmax Paris
    "at": {"Rome": 0.7, "London": 0.1, "Milan": 0.1},  # argmax Rome
    "in": {"New": 0.5, "Boston": 0.3},  # argmax New
    "New": {"York": 0.9},  # argmax York
    "as": {"Boston": 0.4, "New": 0.2},  # argmax Boston
    "remains": {"Milan": 0.6, "Boston": 0.1},  # argmax Milan
    "was": {"New": 0.6, "Boston": 0.1, "Milan": 0.05},  # argmax New
}
EDITED = {
    **UNEDITED,
    "is": {"London": 0.5, "Paris": 0.2, "Milan": 0.2, "Rome": 0.05},  # argmax London
    "called": {"London": 0.6, "Paris": 0.2},  # argmax London
    "named": {"Paris": 0.35, "London": 0.3},  # argmax Paris (the edit does not reach this paraphrase)
    "at": {"London": 0.45, "Rome": 0.4, "Milan": 0.1},  # argmax London (bleeds into the neighbourhood)
    "in": {"Boston": 0.6, "New": 0.3},  # argmax Boston
    "New": {"Boston": 0.5, "York": 0.4},  # argmax Boston
    "as": {"Boston": 0.35, "New": 0.3},  # argmax Boston
}


def log_prob_table(rows: dict[str, dict[str, float]]) -> torch.Tensor:
    table = torch.full((V, V), 1.0 / V, dtype=torch.double)
    for word, probs in rows.items():
        rest = (1.0 - sum(probs.values())) / (V - len(probs))
        table[ID[word]] = rest
        for target, p in probs.items():
            table[ID[word], ID[target]] = p
    assert torch.allclose(table.sum(-1), torch.ones(V, dtype=torch.double))
    return table.log().float()


class BigramLM(torch.nn.Module):
    """Causal LM stub: logits at each position are the row of a fixed table for the token at that position."""

    def __init__(self, rows: dict[str, dict[str, float]]):
        super().__init__()
        self.register_buffer("table", log_prob_table(rows))
        self.calls: list[tuple[int, int]] = []  # (batch, length) of every forward pass

    @property
    def device(self) -> torch.device:
        return self.table.device

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        assert not use_cache
        assert attention_mask is not None and position_ids is not None
        self.calls.append(tuple(input_ids.shape))
        return SimpleNamespace(logits=self.table[input_ids])  # (B, L, V)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    backend = Tokenizer(WordLevel({word: i for i, word in enumerate(VOCAB)}, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>")


# Three CounterFact-like cases and a zsRE-like one (ids 3, 5, 8, 13; not 0..n-1 on purpose).
# Comments give the table row each prompt ends in.
CASES = [
    EditCase(
        case_id=3,
        requests=(EditRequest("The capital of {} is", "France", "London", "Paris"),),
        groups={
            "rewrite": PromptGroup.shared_answer(
                ["The capital of France is"], "London", "Paris", prob="ES", token_acc="rewrite_acc"
            ),  # row "is"
            "paraphrase": PromptGroup.shared_answer(
                ["The capital city of France is called", "France has a capital named"],  # rows "called", "named"
                "London",
                "Paris",
                prob="PS",
                token_acc="rephrase_acc",
            ),
            "neighborhood": PromptGroup.shared_answer(
                ["Italy has a capital at"], "Rome", "London", prob="NS", agreement="locality_acc"
            ),  # row "at"
        },
    ),
    EditCase(
        case_id=5,
        requests=(EditRequest("The largest city of {} lies in", "USA", "Boston", "New York"),),
        groups={
            "rewrite": PromptGroup.shared_answer(
                ["The largest city of USA lies in"], "Boston", "New York", prob="ES", token_acc="rewrite_acc"
            ),  # rows "in" (+ "New" for York)
            "paraphrase": PromptGroup.shared_answer(
                ["USA has a largest city known as"], "Boston", "New York", prob="PS", token_acc="rephrase_acc"
            ),  # rows "as" (+ "New")
            "neighborhood": PromptGroup.shared_answer(
                ["The largest city of Italy remains"], "Milan", "Boston", prob="NS", agreement="locality_acc"
            ),  # row "remains"
        },
    ),
    EditCase(
        case_id=8,
        requests=(EditRequest("The capital of {} is", "Italy", "Milan", "Rome"),),
        groups={
            "rewrite": PromptGroup.shared_answer(
                ["The capital of Italy is"], "Milan", "Rome", prob="ES", token_acc="rewrite_acc"
            ),  # row "is"
            "neighborhood": PromptGroup(
                # the first prompt and answer are also case 3's neighbourhood pair (scored once, used twice)
                ("Italy has a capital at", "The largest city of USA was"),  # rows "at"; "was" (+ "New")
                ("Rome", "New York"),
                ("Milan", "Milan"),
                {"prob": "NS", "agreement": "locality_acc"},
            ),
        },
    ),
    EditCase(  # zsRE-like: no alternatives, a two-word answer scored by token accuracy
        case_id=13,
        requests=(EditRequest("The largest city of {} was", "USA", "New York"),),
        groups={
            "rewrite": PromptGroup.shared_answer(
                ["The largest city of USA was"], "New York", token_acc="rewrite_acc"
            ),  # rows "was", "New"
            "locality": PromptGroup.shared_answer(
                ["Italy has a capital named"], "Rome", agreement="locality_acc"
            ),  # row "named": neither model's argmax is the gold answer Rome
        },
    ),
]


def nll(*probs: float) -> float:
    """Mean per-token NLL of a target whose tokens have these probabilities (written out by hand)."""
    return sum(-math.log(p) for p in probs) / len(probs)


# Unspread mass: NLL of a word not listed in a row (e.g. "Milan" after "in": 0.2 spread over 27 words).
REST_IN_UNEDITED = 0.2 / (V - 2)
REST_IN_EDITED = 0.1 / (V - 2)

# --- Unedited model (the "pre" scores), every value from the UNEDITED table -------------------------------------
PRE = {
    "ES": [
        # case 3: NLL(London | is) = -log 0.1 = 2.303 > NLL(Paris | is) = -log 0.5 = 0.693
        (3, 0, 0.0),
        # case 5: NLL(Boston | in) = -log 0.3 = 1.204 > NLL(New York) = (-log 0.5 - log 0.9)/2 = 0.399
        (5, 0, 0.0),
        # case 8: NLL(Milan | is) = -log 0.1 = 2.303 > NLL(Rome | is) = -log 0.2 = 1.609
        (8, 0, 0.0),
    ],
    "rewrite_acc": [
        (3, 0, 0.0),  # argmax after "is" is Paris, not London
        (5, 0, 0.0),  # argmax after "in" is New, not Boston
        (8, 0, 0.0),  # argmax after "is" is Paris, not Milan
        (13, 0, 1.0),  # argmaxes after "was" and "New" are New and York: 2/2
    ],
    "PS": [
        # "called": NLL(London) = -log 0.3 = NLL(Paris): an exact tie is not a success
        (3, 0, 0.0),
        # "named": NLL(London) = -log 0.25 = 1.386 > NLL(Paris) = -log 0.3 = 1.204
        (3, 1, 0.0),
        # "as": NLL(Boston) = -log 0.4 = 0.916 > NLL(New York) = (-log 0.2 - log 0.9)/2 = 0.857, although
        # P(New York) = 0.18 < P(Boston) = 0.4: the comparison is per token (length-normalised), not joint
        (5, 0, 0.0),
    ],
    "rephrase_acc": [
        (3, 0, 0.0),  # argmax after "called" is "city"
        (3, 1, 0.0),  # argmax after "named" is Paris
        (5, 0, 1.0),  # argmax after "as" is Boston
    ],
    "NS": [
        # "at": NLL(Rome) = -log 0.7 = 0.357 < NLL(London) = -log 0.1 = 2.303
        (3, 0, 1.0),
        # "remains": NLL(Milan) = -log 0.6 = 0.511 < NLL(Boston) = -log 0.1 = 2.303
        (5, 0, 1.0),
        # "at": NLL(Rome) = 0.357 < NLL(Milan) = -log 0.1 = 2.303
        (8, 0, 1.0),
        # "was": NLL(New York) = (-log 0.6 - log 0.9)/2 = 0.308 < NLL(Milan) = -log 0.05 = 2.996
        (8, 1, 1.0),
    ],
    # the unedited model agrees with itself
    "locality_acc": [(3, 0, 1.0), (5, 0, 1.0), (8, 0, 1.0), (8, 1, 1.0), (13, 0, 1.0)],
}

# --- Edited model (the "post" scores), from the EDITED table; locality against the UNEDITED argmaxes ------------
POST = {
    "ES": [
        # "is": NLL(London) = -log 0.5 = 0.693 < NLL(Paris) = -log 0.2 = 1.609
        (3, 0, 1.0),
        # "in": NLL(Boston) = -log 0.6 = 0.511 < NLL(New York) = (-log 0.3 - log 0.4)/2 = 1.060
        (5, 0, 1.0),
        # "is": NLL(Milan) = -log 0.2 = 1.609 < NLL(Rome) = -log 0.05 = 2.996
        (8, 0, 1.0),
    ],
    "rewrite_acc": [
        (3, 0, 1.0),  # argmax after "is" is London
        (5, 0, 1.0),  # argmax after "in" is Boston
        (8, 0, 0.0),  # argmax after "is" is London, not Milan
        (13, 0, 0.5),  # argmax after "was" is New (right), after "New" Boston (wrong): 1/2, no exact match needed
    ],
    "PS": [
        # "called": NLL(London) = -log 0.6 = 0.511 < NLL(Paris) = -log 0.2 = 1.609
        (3, 0, 1.0),
        # "named": NLL(London) = -log 0.3 = 1.204 > NLL(Paris) = -log 0.35 = 1.050
        (3, 1, 0.0),
        # "as": NLL(Boston) = -log 0.35 = 1.0498 < NLL(New York) = (-log 0.3 - log 0.4)/2 = 1.0601 (close call)
        (5, 0, 1.0),
    ],
    "rephrase_acc": [
        (3, 0, 1.0),  # argmax after "called" is London
        (3, 1, 0.0),  # argmax after "named" is still Paris
        (5, 0, 1.0),  # argmax after "as" is Boston
    ],
    "NS": [
        # "at": NLL(Rome) = -log 0.4 = 0.916 > NLL(London) = -log 0.45 = 0.799: the edit bled over
        (3, 0, 0.0),
        # "remains" unchanged: 0.511 < 2.303
        (5, 0, 1.0),
        # "at": NLL(Rome) = 0.916 < NLL(Milan) = -log 0.1 = 2.303
        (8, 0, 1.0),
        # "was" unchanged, but "New" changed: NLL(New York) = (-log 0.6 - log 0.4)/2 = 0.714 < -log 0.05 = 2.996
        (8, 1, 1.0),
    ],
    "locality_acc": [
        (3, 0, 0.0),  # along "Rome" after "at": unedited argmax Rome, edited London -> 0/1
        (5, 0, 1.0),  # along "Milan" after "remains": Milan == Milan -> 1/1
        (8, 0, 0.0),  # same pair as case 3 -> 0/1
        (8, 1, 0.5),  # along "New York" after "was": [New, York] vs [New, Boston] -> 1/2
        (13, 0, 1.0),  # along "Rome" after "named": Paris == Paris -> 1/1 (agreement, not correctness: acc is 0)
    ],
}

KINDS = {
    "ES": "prob",
    "PS": "prob",
    "NS": "prob",
    "rewrite_acc": "token_acc",
    "rephrase_acc": "token_acc",
    "locality_acc": "agreement",
}

# Hand-computed aggregates of POST. Cases 3, 5 and 8 have unequal numbers of PS/NS/locality prompts.
POST_MEANS = {  # metric: (macro, micro)
    "ES": (1.0, 1.0),
    "rewrite_acc": ((1.0 + 1.0 + 0.0 + 0.5) / 4, (1.0 + 1.0 + 0.0 + 0.5) / 4),  # 0.625
    "PS": ((0.5 + 1.0) / 2, 2 / 3),  # case 3: (1 + 0)/2, case 5: 1; micro: 2 of 3 prompts
    "rephrase_acc": ((0.5 + 1.0) / 2, 2 / 3),
    "NS": ((0.0 + 1.0 + 1.0) / 3, 3 / 4),  # case 8 has two prompts, both 1
    # case 8 has two prompts (0 and 0.5, mean 0.25): macro (0 + 1 + 0.25 + 1)/4 = 0.5625, micro 2.5/5 = 0.5
    "locality_acc": ((0.0 + 1.0 + (0.0 + 0.5) / 2 + 1.0) / 4, (0.0 + 1.0 + 0.0 + 0.5 + 1.0) / 5),
}
PRE_MEANS = {
    "ES": (0.0, 0.0),
    "rewrite_acc": (1 / 4, 1 / 4),  # only case 13
    "PS": (0.0, 0.0),
    "rephrase_acc": ((0.0 + 1.0) / 2, 1 / 3),  # case 3: 0, case 5: 1; micro: 1 of 3 prompts
    "NS": (1.0, 1.0),
    "locality_acc": (1.0, 1.0),
}


def scorer(rows, tokenizer, sequences_per_forward=32) -> CaseScorer:
    return CaseScorer(BigramLM(rows).eval(), tokenizer, ScoringConfig(sequences_per_forward=sequences_per_forward))


def test_tokenizer_knows_every_word_and_adds_no_special_tokens(tokenizer):
    for case in CASES:
        for group in case.groups.values():
            for text in group.prompts + group.expected + (group.alternatives or ()):
                ids = tokenizer(text)["input_ids"]
                assert ids == [ID[word] for word in text.split()], text
    assert tokenizer.pad_token_id == 0 and tokenizer.bos_token is None


def test_stub_model_gives_the_hand_written_nlls(tokenizer):
    """Check the stub itself: score_targets reproduces -log p from the tables (tolerance for float32)."""
    model = BigramLM(UNEDITED)
    prompts = ["The capital of France is", "USA has a largest city known as", "The largest city of USA lies in"]
    targets = ["Paris", "New York", "Milan"]
    scores = score_targets(model, tokenizer, prompts, targets, batch_size=2)
    assert scores[0].nll == pytest.approx(-math.log(0.5), abs=1e-6)
    assert scores[1].nll == pytest.approx(nll(0.2, 0.9), abs=1e-6)  # (-log 0.2 - log 0.9)/2
    assert scores[2].nll == pytest.approx(-math.log(REST_IN_UNEDITED), abs=1e-6)  # unlisted word after "in"
    assert scores[1].target_ids.tolist() == [ID["New"], ID["York"]]
    assert scores[1].argmax_ids.tolist() == [ID["Boston"], ID["York"]]
    assert scores[1].accuracy == 0.5


def test_hand_nll_comments_are_consistent():
    """The close calls and ties in the tables are as the comments say (guards against editing a table carelessly)."""
    assert nll(0.2, 0.9) < -math.log(0.4) and 0.2 * 0.9 < 0.4  # pre PS case 5: per-token vs joint disagree
    assert -math.log(0.35) < nll(0.3, 0.4) < -math.log(0.35) + 0.02  # post PS case 5: close call
    assert -math.log(0.45) < -math.log(0.4)  # post NS case 3: London overtakes Rome
    assert -math.log(REST_IN_EDITED) > nll(0.3, 0.4)  # post NS case 8/1 vs a word not in the row


def as_sorted(scores):
    return {metric: (kind, sorted(rows)) for metric, (kind, rows) in scores.items()}


def expected_scores(table):
    return {metric: (KINDS[metric], sorted(rows)) for metric, rows in table.items()}


def test_unedited_scores_match_hand_computation(tokenizer):
    unedited = scorer(UNEDITED, tokenizer)
    reference = unedited.reference(CASES)
    assert as_sorted(unedited.score(CASES, reference)) == expected_scores(PRE)


def test_reference_holds_unedited_argmaxes_along_expected_answers(tokenizer):
    reference = scorer(UNEDITED, tokenizer).reference(CASES)
    request = {
        (case.case_id, name, k): Target(prompt, group.expected[k])
        for case in CASES
        for name, group in case.groups.items()
        for k, prompt in enumerate(group.prompts)
    }
    expected = {
        (3, "neighborhood", 0): [ID["Rome"]],  # after "at"
        (5, "neighborhood", 0): [ID["Milan"]],  # after "remains"
        (8, "neighborhood", 0): [ID["Rome"]],
        (8, "neighborhood", 1): [ID["New"], ID["York"]],  # after "was", then after "New"
        (13, "locality", 0): [ID["Paris"]],  # after "named"
    }
    assert {key: score.argmax_ids.tolist() for key, score in reference.items()} == {
        request[slot]: ids for slot, ids in expected.items()
    }


def test_edited_scores_match_hand_computation(tokenizer):
    reference = scorer(UNEDITED, tokenizer).reference(CASES)
    edited = scorer(EDITED, tokenizer)
    scores = edited.score(CASES, reference)
    assert as_sorted(scores) == expected_scores(POST)
    # rows come out grouped by case in input order, one per prompt
    assert [row[:2] for row in scores["locality_acc"][1]] == [(3, 0), (5, 0), (8, 0), (8, 1), (13, 0)]


def test_shared_pairs_are_scored_in_one_forward_pass_each_batch(tokenizer):
    edited = scorer(EDITED, tokenizer, sequences_per_forward=100)
    edited.score(CASES, scorer(UNEDITED, tokenizer).reference(CASES))
    # distinct (prompt, answer) pairs: case 3: 1*2 + 2*2 + 1*2 = 8, case 5: 2 + 2 + 2 = 6,
    # case 8: 2 (rewrite) + 1 new ("at", Milan) + 2 ("was", New York / Milan) = 5,
    # case 13: ("was", New York) is case 8's, ("named", Rome) is new = 1; one batch of 20
    assert len(edited.model.calls) == 1
    assert edited.model.calls[0][0] == 20


def test_agreement_needs_a_reference(tokenizer):
    with pytest.raises(ValueError, match="reference"):
        scorer(EDITED, tokenizer).score(CASES)


@pytest.mark.parametrize("sequences_per_forward", [1, 2, 3, 7])
def test_scores_do_not_depend_on_sequences_per_forward(tokenizer, sequences_per_forward):
    reference_large = scorer(UNEDITED, tokenizer, sequences_per_forward=1000).reference(CASES)
    reference_small = scorer(UNEDITED, tokenizer, sequences_per_forward=sequences_per_forward).reference(CASES)
    assert reference_small.keys() == reference_large.keys()
    assert all(torch.equal(reference_small[key].argmax_ids, reference_large[key].argmax_ids) for key in reference_large)
    large = scorer(EDITED, tokenizer, sequences_per_forward=1000).score(CASES, reference_large)
    small = scorer(EDITED, tokenizer, sequences_per_forward=sequences_per_forward).score(CASES, reference_small)
    assert small == large  # identical lists, in the same order, with identical floats


@pytest.mark.parametrize(("table", "means"), [(PRE, PRE_MEANS), (POST, POST_MEANS)], ids=["unedited", "edited"])
def test_prompt_mean_of_scores_gives_hand_macro_and_micro(tokenizer, table, means):
    reference = scorer(UNEDITED, tokenizer).reference(CASES)
    scores = scorer(UNEDITED if table is PRE else EDITED, tokenizer).score(CASES, reference)
    assert set(scores) == set(means)
    for metric, (kind, rows) in scores.items():
        mean = PromptMean(kind)
        mean.update(
            torch.tensor([r[0] for r in rows]),
            torch.tensor([r[1] for r in rows]),
            torch.tensor([r[2] for r in rows], dtype=torch.double),
        )
        result = mean.compute()
        macro, micro = means[metric]
        assert result["macro"] == pytest.approx(macro, abs=1e-12), metric
        assert result["micro"] == pytest.approx(micro, abs=1e-12), metric
        assert result["n_cases"] == len({r[0] for r in table[metric]})
        assert result["n_prompts"] == len(table[metric])


def test_hand_means_are_the_documented_values():
    # spelled out once more as plain numbers
    assert POST_MEANS["locality_acc"] == (0.5625, 0.5)
    assert POST_MEANS["rewrite_acc"] == (0.625, 0.625)
    assert POST_MEANS["PS"] == (0.75, pytest.approx(2 / 3))
    assert POST_MEANS["NS"] == (pytest.approx(2 / 3), 0.75)


def test_unedited_scores_are_reported_under_pre_names(tokenizer):
    unedited = scorer(UNEDITED, tokenizer)
    reference = unedited.reference(CASES)
    every = unedited.score_unedited(CASES, reference, every_group=True)
    assert as_sorted(every) == {f"{name}_pre": value for name, value in expected_scores(PRE).items()}
    assert unedited.score_unedited(CASES, reference) == {}  # no group asks for it


def test_groups_that_report_one_metric_number_their_prompts_on(tokenizer):
    """Two groups of a case that report one metric (RULE-EDIT's neighbourhood and distracting prompts, both Loc)
    give one row per prompt, numbered on in group order: no prompt is lost to another's (case, index) row."""
    case = EditCase(
        case_id=3,
        requests=CASES[0].requests,
        groups={
            "neighborhood": PromptGroup.shared_answer(["Italy has a capital at"], "Rome", "London", prob="NS"),
            "distracting": PromptGroup(
                ("The largest city of Italy remains", "The capital city of France is called"),
                ("Milan", "London"),
                ("Boston", "Paris"),
                {"prob": "NS"},
            ),
        },
    )
    rows = scorer(UNEDITED, tokenizer).score([case])["NS"][1]
    # "at": Rome 0.7 > London 0.1; "remains": Milan 0.6 > Boston 0.1; "called": London 0.3 = Paris 0.3, a tie fails
    assert rows == [(3, 0, 1.0), (3, 1, 1.0), (3, 2, 0.0)]
    metric = PromptMean("NS")
    metric.update(*(torch.tensor(column) for column in zip(*rows)))
    assert metric.compute()["n_prompts"] == 3 and metric.compute()["macro"] == pytest.approx(2 / 3)
