"""ScEdit: both formats load, and ES / S-ES / S-NS / S-BO equal hand-computed values on a stub with set logits."""

import json
import math
import re
from types import SimpleNamespace

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import PreTrainedTokenizerFast

from lightning_edit.data import DataFormatError, ScEdit
from lightning_edit.data.scedit import scedit_cf_record, script_cloze
from lightning_edit.evaluation import CaseScorer, ScoringConfig

# fmt: off
VOCAB = ["<pad>", "<unk>", "The", "tower", "is", "in", "How", "visit", "the", "museum", "Step", "1", "fly", "to",
         "go", "near", "Rome", "Paris", "mayor", "of", "Xton", "Bob", "Ann", "call", "meet", "Cat", "Dan", "?"]
# fmt: on
ID = {word: i for i, word in enumerate(VOCAB)}

# next-token probabilities by the last word (the rest of the mass is spread evenly over the other words)
UNEDITED = {
    "in": {"Paris": 0.6, "Rome": 0.2},
    "to": {"Paris": 0.5, "Rome": 0.1},
    "near": {"Paris": 0.5, "Rome": 0.1},
    "is": {"Ann": 0.7, "Bob": 0.1},
    "call": {"Ann": 0.4, "Bob": 0.3},
    "meet": {"Cat": 0.6},
    "visit": {"Dan": 0.3},
}
EDITED = {
    **UNEDITED,
    "in": {"Rome": 0.7, "Paris": 0.1},  # ES: the edit took
    "to": {"Rome": 0.4, "Paris": 0.3},  # S-ES: the script prefers the new object
    "near": {"Rome": 0.6, "Paris": 0.2},  # S-NS fails: the neighbour's script now prefers the new object too
    "is": {"Bob": 0.8, "Ann": 0.1},
    "call": {"Ann": 0.5, "Bob": 0.2},  # S-ES fails on ScEdit-T's script
    "meet": {"Cat": 0.45},  # S-BO: the neighbour's object lost 0.15
    "visit": {"Dan": 0.5},  # gained: no bleedover
}

CF_RECORD = {
    "case_id": 7,
    "prompt": "The tower is in",
    "subject": "The tower",
    "ground_truth": "Paris",
    "target_new": "Rome",
    "rephrase_prompts": ["How to visit the tower ? Step 1 fly to"],
    "neighborhood_prompts": ["How to visit the museum ? Step 1 go near"],
    "interrupt_step": [1],
    "property": "location",
    "generation_prompts": ["How to visit the tower ?"],
}
T_RECORD = {
    "case_id": 4,
    "subject": "Xton",
    "relation": "mayor",
    "prompt": "The mayor of Xton is",
    "old_update": "Ann",
    "new_update": "Bob",
    "question": ["How to visit the mayor of Xton ? Step 1 call"],
    "neighborhood": [
        {"object": "Cat", "prompt": "The mayor of the museum is", "question": "How to visit the museum ? Step 1 meet"},
        {"object": "Dan", "prompt": "The mayor of the tower is", "question": "How to visit the tower ? Step 1 visit"},
    ],
}


class BigramLM(torch.nn.Module):
    """Logits at each position: the row of a fixed table for the token at that position."""

    def __init__(self, rows):
        super().__init__()
        table = torch.full((len(VOCAB), len(VOCAB)), 1.0 / len(VOCAB), dtype=torch.double)
        for word, probs in rows.items():
            table[ID[word]] = (1.0 - sum(probs.values())) / (len(VOCAB) - len(probs))
            for target, p in probs.items():
                table[ID[word], ID[target]] = p
        self.register_buffer("table", table.log().float())

    @property
    def device(self):
        return self.table.device

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return SimpleNamespace(logits=self.table[input_ids])


@pytest.fixture(scope="module")
def tokenizer():
    backend = Tokenizer(WordLevel(ID, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>")


def load(tmp_path, records, variant):
    path = tmp_path / f"{variant}.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    data = ScEdit(str(path), variant=variant)
    data.setup()
    return data


def scores(tokenizer, data):
    reference = CaseScorer(BigramLM(UNEDITED), tokenizer, ScoringConfig()).reference(data.cases)
    edited = CaseScorer(BigramLM(EDITED), tokenizer, ScoringConfig()).score(data.cases, reference)
    return {metric: [value for *_, value in rows] for metric, (_, rows) in edited.items()}


def test_cf_token_level_metrics_equal_hand_computation(tmp_path, tokenizer):
    data = load(tmp_path, [CF_RECORD], "cf")
    assert set(data.declared_metrics()) == {"ES", "S-ES", "S-NS"}
    assert scores(tokenizer, data) == {"ES": [1.0], "S-ES": [1.0], "S-NS": [0.0]}


def test_t_token_level_metrics_equal_hand_computation(tmp_path, tokenizer):
    data = load(tmp_path, [T_RECORD], "t")
    assert data.declared_metrics() == {"ES": "prob", "S-ES": "prob", "S-BO": "bleedover"}
    result = scores(tokenizer, data)
    assert result["ES"] == [1.0] and result["S-ES"] == [0.0]  # after "call", Ann 0.5 still beats Bob 0.2
    assert result["S-BO"] == [pytest.approx(0.6 - 0.45, abs=1e-6), 0.0]  # the drop of Cat; Dan gained


def test_bleedover_is_the_drop_of_the_geometric_mean_probability(tmp_path, tokenizer):
    """S-BO uses P = exp(-mean per-token NLL): for a one-token object, the object's probability."""
    data = load(tmp_path, [T_RECORD], "t")
    unedited = BigramLM(UNEDITED)
    p_before = math.exp(float(unedited.table[ID["meet"], ID["Cat"]]))
    assert p_before == pytest.approx(0.6, abs=1e-6)
    assert scores(tokenizer, data)["S-BO"][0] == pytest.approx(p_before - 0.45, abs=1e-6)


def test_a_file_of_the_other_setting_is_an_error(tmp_path):
    with pytest.raises(DataFormatError, match=r"record 0: field 'new_update': a ScEdit-T record, but variant is 'cf'"):
        load(tmp_path, [T_RECORD], "cf")
    with pytest.raises(DataFormatError, match=r"field 'rephrase_prompts': a ScEdit-CF record, but variant is 't'"):
        load(tmp_path, [CF_RECORD], "t")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r["neighborhood"][1].pop("object"), "neighborhood[1].object"),
        (lambda r: r["neighborhood"].__setitem__(0, "text"), "neighborhood[0]"),
        (lambda r: r.pop("question"), "question"),
        (lambda r: r.__setitem__("new_update", ""), "new_update"),
    ],
)
def test_bad_t_records_name_file_record_and_field(tmp_path, change, field):
    record = json.loads(json.dumps(T_RECORD))
    change(record)
    with pytest.raises(DataFormatError, match=re.escape(f"t.json: record 1: field {field!r}")):
        load(tmp_path, [T_RECORD, record], "t")


def test_toy_scedit_loads_with_generation():
    data = ScEdit("builtin:data/toy/scedit_cf.json", generation=True)
    data.setup()
    assert len(data.cases) == 100 and "GE" in data.declared_metrics()
    case = data.cases[0]
    assert all(prompt.startswith("How to") for prompt in case.groups["script"].prompts)
    assert case.groups["script_neighborhood"].expected[0] == case.requests[0].target_true


def test_script_cloze_cuts_before_the_first_mention_of_the_old_object():
    script = "Step 1: Buy a ticket to Paris. Step 2: Fly to Paris. Step 3: Visit the tower."
    assert script_cloze("How to visit the tower?", script, "Paris") == "How to visit the tower? Step 1: Buy a ticket to"
    with pytest.raises(ValueError, match="does not mention 'Rome'"):
        script_cloze("Q?", script, "Rome")
    record = scedit_cf_record(0, "The tower is in", "The tower", "Paris", "Rome", [("Q?", script)], [])
    assert record["rephrase_prompts"] == ["Q? Step 1: Buy a ticket to"] and record["generation_prompts"] == ["Q?"]
