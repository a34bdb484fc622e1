"""In-context editing (IKE, PROMPT): prompt assembly, demonstration retrieval, weights untouched, composition."""

import json
import math

import pytest
import torch
from lightning import Trainer

from lightning_edit.data import CounterFact
from lightning_edit.editors import IKE, ROME, InContext, NoEdit
from lightning_edit.editors.in_context import InContextPrompts, demonstrations_of, tfidf_similarities
from lightning_edit.errors import ConfigError
from lightning_edit.models.loading import ModelSource

POOL = [
    {
        "case_id": i,
        "requested_rewrite": {
            "prompt": "The capital of {} is",
            "subject": subject,
            "target_new": {"str": new},
            "target_true": {"str": true},
        },
        "paraphrase_prompts": [f"{subject} has its capital in"],
        "neighborhood_prompts": [f"The capital of {neighbour} is"],
        "attribute_prompts": [],
        "generation_prompts": [],
    }
    for i, (subject, new, true, neighbour) in enumerate(
        [
            ("France", "London", "Paris", "Spain"),
            ("Italy", "Berlin", "Rome", "Greece"),
            ("Japan", "Oslo", "Tokyo", "Korea"),
        ]
    )
]


@pytest.fixture
def pool(tmp_path) -> str:
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(POOL))
    return str(path)


def cases(path: str) -> list:
    data = CounterFact(path)
    data.setup()
    return data.cases


def test_prompt_is_the_new_fact_before_the_question(pool):
    contexts = InContextPrompts(InContext(), model=None, tokenizer=None).contexts(cases(pool)[:1])
    assert contexts == {0: "New Fact: The capital of France is London\nPrompt: "}


def test_demonstrations_copy_update_and_retain(pool):
    fact = "New Fact: The capital of France is London\nPrompt: "
    assert demonstrations_of(cases(pool)[0]) == [
        fact + "The capital of France is London\n\n",  # copy
        fact + "France has its capital in London\n\n",  # update: a paraphrase, the new answer
        fact + "The capital of Spain is Paris\n\n",  # retain: a neighbour, its (true) answer
    ]


def test_tfidf_similarity_by_hand():
    similarities = tfidf_similarities(["a b"], ["a b", "a c", "c d"])
    common, rare = math.log(3 / 2) + 1, math.log(3 / 1) + 1  # idf = ln(N / df) + 1: a, c in 2 documents; b, d in 1
    query = math.hypot(common, rare)
    expected = [1.0, common * common / (query * math.hypot(common, common)), 0.0]
    assert similarities[0].tolist() == pytest.approx(expected, rel=1e-6)


def test_lexical_retrieval_skips_own_fact_and_puts_the_most_similar_last(pool):
    config = InContext(demonstrations=2, pool=pool, retriever="lexical")
    prompts = InContextPrompts(config, model=None, tokenizer=None, pool_cases=cases(pool))
    context = prompts.contexts(cases(pool)[:1])[0]
    blocks = context.split("\n\n")
    assert len(blocks) == 3  # two demonstrations, then the case's own new fact
    assert "France" not in blocks[0] + blocks[1]  # nothing about the evaluated subject and relation
    assert blocks[2] == "New Fact: The capital of France is London\nPrompt: "
    query = "New Fact: The capital of France is London\nPrompt: The capital of France is\n\n"
    others = [text for (subject, _), text in prompts.pool if subject != "France"]
    scores = tfidf_similarities([query], others)[0]
    best = [others[i] for i in scores.topk(2).indices.tolist()]
    assert [block + "\n\n" for block in blocks[:2]] == best[::-1]  # least similar first, most similar last


def test_model_retriever_embeds_with_the_edited_model(pool, tiny_lm):
    model, tokenizer = tiny_lm
    config = InContext(demonstrations=3, pool=pool, retriever="model", texts_per_forward=2)
    context = InContextPrompts(config, model, tokenizer, cases(pool)).contexts(cases(pool)[1:2])[1]
    assert context.count("New Fact:") == 4 and context.endswith("New Fact: The capital of Italy is Berlin\nPrompt: ")


def test_unavailable_encoder_is_a_clear_error(pool):
    config = InContext(demonstrations=1, pool=pool, retriever="encoder", encoder="/nonexistent/encoder")
    with pytest.raises(OSError, match="retriever 'model' or 'lexical'"):
        InContextPrompts(config, None, None, cases(pool)).contexts(cases(pool)[:1])


def test_configuration_errors():
    with pytest.raises(ConfigError, match="in_context.pool=None: the file the 4 demonstrations are retrieved from"):
        InContext(demonstrations=4)
    with pytest.raises(ConfigError, match="in_context.demonstrations=-1: k, at least 0"):
        InContext(demonstrations=-1)


def validate(editor, path: str, limit: int | None = None) -> dict:
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=False)
    trainer.validate(editor, datamodule=CounterFact(path, batch_size=2, limit=limit), verbose=False)
    return editor.metrics.results


def test_ike_changes_no_weight_and_moves_the_scores(pool):
    source = ModelSource("builtin:models/toy-gpt2")
    editor = IKE(source, InContext(demonstrations=2, pool=pool, retriever="lexical"))
    before = {name: p.detach().clone() for name, p in editor.model.named_parameters()}
    results = validate(editor, pool)
    assert all(torch.equal(p, before[name]) for name, p in editor.model.named_parameters())
    unedited = validate(NoEdit(source), pool)
    assert results["ES"]["n_cases"] == 3
    assert any(results[m]["micro"] != unedited[m]["micro"] for m in ("rewrite_acc", "rephrase_acc", "locality_acc"))


def test_weight_editor_composes_with_in_context_prompting():
    """On toy edits the model knows (the pool's real-world capitals it does not), both parts change the scores."""
    source, toy = ModelSource("builtin:models/toy-gpt2"), "builtin:data/toy/counterfact.json"
    options = dict(fact_token="last", template_lengths=[[5, 1]], mom2_adjustment=False, layer=2)

    def signature(results: dict) -> list[float]:
        return [results[name]["micro"] for name in sorted(results)]

    rome = signature(validate(ROME(source, **options), toy, limit=3))
    prompt = signature(validate(IKE(source), toy, limit=3))
    rome_and_prompt = signature(validate(ROME(source, in_context=InContext(), **options), toy, limit=3))
    assert rome_and_prompt != rome and rome_and_prompt != prompt  # both the weight edit and the prompt act
