"""In-context editing: IKE (Zheng et al., 2023, "Can We Edit Factual Knowledge by In-Context Learning?") and PROMPT.

No weight changes: the new fact is written before every evaluation prompt of its case
(docs/editors/ike-prompt.md#ike-and-prompt),

    <k demonstrations> New Fact: {prompt} {target_new}\\nPrompt: {evaluation prompt}

and the answer is scored after it as usual. A demonstration is built from a fact of a pool file as
``New Fact: {fact}\\nPrompt: {query} {answer}\\n\\n``, of three kinds: copy (the query is the fact's own prompt, the
answer its new target), update (a paraphrase, the new target) and retain (a neighbourhood prompt, its original
answer). The k demonstrations most similar to ``New Fact: {fact}\\nPrompt: {prompt}\\n\\n`` are kept over all kinds
(EasyEdit; the original code fixes the mix 4 copy : 12 update : 16 retain) and ordered from least to most
similar, so that the most similar stands next to the query. With k = 0 this is PROMPT, the new fact alone.
Demonstrations about the case's own subject and relation (the same prompt template) are never retrieved: the pool
may be the evaluated file, or hold another new object for the same fact.

:class:`InContext` configures it; any editor takes one (``--model.in_context``), so weight edits compose with
in-context prompting at evaluation (BAKE §6.2); :class:`~lightning_edit.editors.ike.IKE` is the editor that
changes no weight.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from lightning_edit.cases import EditCase, EditRequest
from lightning_edit.errors import ConfigError, require
from lightning_edit.models.loading import ModelSource
from lightning_edit.models.tokenization import pad

log = logging.getLogger(__name__)

Retriever = Literal["encoder", "model", "lexical"]


@dataclass
class InContext:
    """How the in-context text of a case is built.

    Args:
        demonstrations: k, the number of retrieved demonstrations (0: PROMPT, the new fact alone; IKE: 32 in the
            paper, 16 in EasyEdit).
        pool: the file demonstrations are built from, in a CounterFact format (ROME or flat; BAKE files too).
        retriever: how demonstrations are ranked: ``encoder`` (a sentence encoder, the paper's all-MiniLM-L6-v2:
            needs it downloaded or cached), ``model`` (mean-pooled last hidden states of the model being edited,
            before any edit) or ``lexical`` (TF-IDF cosine of words; no model, no download).
        encoder: hub id or directory of the sentence encoder (mean pooling of its last hidden states).
        texts_per_forward: texts per forward pass when embedding.
    """

    demonstrations: int = 0
    pool: str | None = None
    retriever: Retriever = "encoder"
    encoder: str = "sentence-transformers/all-MiniLM-L6-v2"
    texts_per_forward: int = 64

    @property
    def pool_file(self) -> str | None:
        """The pool file to read, None when no demonstration is retrieved (PROMPT)."""
        return self.pool if self.demonstrations else None

    def __post_init__(self) -> None:
        require(self.demonstrations >= 0, "model.in_context.demonstrations", self.demonstrations, "k, at least 0")
        meaning = f"the file the {self.demonstrations} demonstrations are retrieved from: set it (0: PROMPT)"
        require(not self.demonstrations or self.pool is not None, "model.in_context.pool", self.pool, meaning)


def fact(request: EditRequest) -> str:
    """The new fact as a sentence: ``{prompt} {target_new}``."""
    return f"{request.filled_prompt} {request.target_new}"


def _about(request: EditRequest) -> tuple[str, str]:
    """What a fact is about: its subject and relation (prompt template)."""
    return request.subject, request.prompt


def demonstration(new_fact: str, query: str, answer: str) -> str:
    return f"New Fact: {new_fact}\nPrompt: {query} {answer}\n\n"


def demonstrations_of(case: EditCase) -> list[str]:
    """The copy, update and retain demonstrations of a pool case (first request)."""
    request = case.requests[0]
    new_fact = fact(request)
    texts = [demonstration(new_fact, request.filled_prompt, request.target_new)]
    if "paraphrase" in case.groups:
        texts += [demonstration(new_fact, p, request.target_new) for p in case.groups["paraphrase"].prompts]
    if "neighborhood" in case.groups:
        group = case.groups["neighborhood"]
        texts += [demonstration(new_fact, p, answer) for p, answer in zip(group.prompts, group.expected)]
    return texts


@torch.no_grad()
def mean_pooled_embeddings(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: list[str], batch_size: int
) -> torch.Tensor:
    """(N, d) unit vectors: the mean of the last hidden states over each text's tokens (sentence-transformers)."""
    rows = []
    for start in range(0, len(texts), batch_size):
        sequences = [tokenizer(text)["input_ids"] for text in texts[start : start + batch_size]]
        input_ids, mask, positions = pad(sequences, tokenizer.pad_token_id, "right")
        hidden = model(
            input_ids=input_ids.to(model.device),
            attention_mask=mask.to(model.device),
            position_ids=positions.to(model.device),
            output_hidden_states=True,
        ).hidden_states[-1]  # (B, L, d)
        mask = mask.to(hidden.device, torch.float32)[..., None]
        rows.append(((hidden.float() * mask).sum(1) / mask.sum(1)).cpu())
    return F.normalize(torch.cat(rows), dim=-1)


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def tfidf_similarities(queries: list[str], documents: list[str]) -> torch.Tensor:
    """(Q, N) cosine similarities of TF-IDF word vectors (idf = log(N / df) + 1, as scikit-learn's smooth=False)."""
    counts = [Counter(_words(text)) for text in documents]
    frequency = Counter(word for count in counts for word in count)
    vocabulary = {word: i for i, word in enumerate(sorted(frequency))}
    idf = {word: math.log(len(documents) / df) + 1 for word, df in frequency.items()}

    def vectors(texts_counts: list[Counter]) -> torch.Tensor:
        indices = [[], []]
        values = []
        for row, count in enumerate(texts_counts):
            for word, n in count.items():
                if word in vocabulary:
                    indices[0].append(row)
                    indices[1].append(vocabulary[word])
                    values.append(n * idf[word])
        matrix = torch.sparse_coo_tensor(
            indices, values, (len(texts_counts), len(vocabulary)), dtype=torch.float64, check_invariants=True
        )
        norms = torch.zeros(len(texts_counts), dtype=torch.float64).index_add_(
            0, torch.tensor(indices[0], dtype=torch.long), torch.tensor(values, dtype=torch.float64) ** 2
        )
        return matrix, norms.sqrt().clamp(min=1e-12)

    document_matrix, document_norms = vectors(counts)
    query_matrix, query_norms = vectors([Counter(_words(text)) for text in queries])
    dots = torch.sparse.mm(document_matrix, query_matrix.to_dense().T).T  # (Q, N)
    return (dots / query_norms[:, None] / document_norms[None, :]).float()


class InContextPrompts:
    """Builds the in-context text of edit cases from an :class:`InContext` configuration and the cases of its pool
    file (read by the benchmark: :meth:`~lightning_edit.data.base.EditDataModule.demonstration_cases`)."""

    def __init__(
        self,
        config: InContext,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        pool_cases: Sequence[EditCase] = (),
    ):
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        self.pool: list[tuple[tuple[str, str], str]] = []  # ((subject, prompt template), demonstration)
        if config.demonstrations:
            self.pool = [(_about(case.requests[0]), text) for case in pool_cases for text in demonstrations_of(case)]
            if len(self.pool) < config.demonstrations:
                raise ConfigError(
                    f"model.in_context.pool {config.pool}: {len(self.pool)} demonstrations, fewer than "
                    f"in_context.demonstrations={config.demonstrations}"
                )
            self._pool_embeddings: torch.Tensor | None = None
            self._positions: dict[tuple[str, str], list[int]] = {}  # (subject, template) -> pool positions
            for position, (about, _) in enumerate(self.pool):
                self._positions.setdefault(about, []).append(position)

    def _similarities(self, queries: list[str]) -> torch.Tensor:
        """(Q, N) similarity of each query to each pool demonstration."""
        texts = [text for _, text in self.pool]
        if self.config.retriever == "lexical":
            return tfidf_similarities(queries, texts)
        model = self.model
        tokenizer = self.tokenizer
        if self.config.retriever == "encoder":
            model, tokenizer = self._encoder()
        if self._pool_embeddings is None:
            self._pool_embeddings = mean_pooled_embeddings(model, tokenizer, texts, self.config.texts_per_forward)
        return (
            mean_pooled_embeddings(model, tokenizer, queries, self.config.texts_per_forward) @ self._pool_embeddings.T
        )

    def _encoder(self) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
        source = ModelSource(self.config.encoder)
        try:
            tokenizer = AutoTokenizer.from_pretrained(self.config.encoder, trust_remote_code=source.trust_remote_code)
            model = AutoModel.from_pretrained(self.config.encoder, trust_remote_code=source.trust_remote_code)
        except OSError as error:
            raise OSError(
                f"in_context.encoder {self.config.encoder!r} cannot be loaded ({error}); download it, point "
                "in_context.encoder to a local copy, or use in_context.retriever 'model' or 'lexical'"
            ) from None
        return model.eval(), tokenizer

    def contexts(self, cases: list[EditCase]) -> dict[int, str]:
        """Case id -> the text put before each of the case's evaluation prompts."""
        prefixes = {case.case_id: "" for case in cases}
        if self.config.demonstrations:
            queries = [
                f"New Fact: {fact(case.requests[0])}\nPrompt: {case.requests[0].filled_prompt}\n\n" for case in cases
            ]
            similarities = self._similarities(queries)
            for row, case in enumerate(cases):
                own = {_about(request) for request in case.requests}
                scores = similarities[row].clone()
                scores[[i for about in own for i in self._positions.get(about, [])]] = -math.inf
                if int(torch.isfinite(scores).sum()) < self.config.demonstrations:
                    raise ConfigError(
                        f"{case.source or case.case_id}: model.in_context.pool has fewer than "
                        f"{self.config.demonstrations} demonstrations about other subjects or relations"
                    )
                best = scores.topk(self.config.demonstrations).indices.tolist()  # most similar first
                prefixes[case.case_id] = "".join(self.pool[i][1] for i in reversed(best))
        return {
            case.case_id: prefixes[case.case_id] + "".join(f"New Fact: {fact(r)}\n" for r in case.requests) + "Prompt: "
            for case in cases
        }
