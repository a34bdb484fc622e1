"""The training text of a seeded :class:`~lightning_edit.toy.world.ToyWorld` as a causal-LM DataModule.

The tokenizer is trained with ``tokenizers`` on the world's corpus
(:func:`~lightning_edit.models.build.train_tokenizer`, GPT-2 or LLaMA style), so the same settings always give the same
world, corpus and tokenizer; :attr:`ToyCorpus.tokenizer` exposes it (the pretraining module sizes its model to it and
saves it next to the weights).

One item (sentence, script or biography) per sequence, padded, not packed: every sequence starts at position 0
(after the BOS for LLaMA style), as a recall or benchmark prompt does, and ends with EOS, so the model learns facts
in the context it is asked them in. Padding costs little because batches are grouped by length
(:class:`LengthGroupedBatches`): a fact sentence is ~15 tokens, a script ~45, a biography ~35. The batch order is
seeded by the epoch, so a run resumed from an end-of-epoch checkpoint sees the same batches as an uninterrupted one
(a mid-epoch checkpoint restarts that epoch's order).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from functools import cached_property

import torch
from lightning import LightningDataModule
from torch.utils.data import DataLoader, Dataset, Sampler
from transformers import PreTrainedTokenizerFast

from lightning_edit.models.build import TokenizerStyle, train_tokenizer
from lightning_edit.models.tokenization import pad
from lightning_edit.toy.world import ToyWorld

_PUNCTUATION = re.compile(r"([^\w\s])")


class _Sequences(Dataset):
    """Token-id lists; items are the lists themselves (the collate function pads them)."""

    def __init__(self, sequences: list[list[int]]):
        self.sequences = sequences

    def __len__(self) -> int:
        return len(self.sequences)

    def __getitem__(self, index: int) -> list[int]:
        return self.sequences[index]


class SeededPermutation(Sampler[int]):
    """Every index once, in an order drawn from ``(seed, epoch)`` (or in order without ``shuffle``).

    Lightning calls :meth:`set_epoch` at the start of each training epoch (also after resuming from a checkpoint),
    as it does for a ``DistributedSampler``, so the order changes every epoch and is reproducible.
    """

    def __init__(self, size: int, shuffle: bool, seed: int = 0) -> None:
        self.size = size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        order = list(range(self.size))
        if self.shuffle:
            random.Random(f"{self.seed}:{self.epoch}").shuffle(order)
        return iter(order)


class LengthGroupedBatches(Sampler[list[int]]):
    """Batches of similar length: a batch sampler over a :class:`SeededPermutation` (its ``sampler``).

    With ``shuffle``, the permutation is cut into groups of ``group_batches`` batches, each group sorted by length
    and cut into batches, and the batches are shuffled (seeded by the epoch too). Without: the indices sorted by
    length, cut into batches, in a fixed order.
    """

    def __init__(
        self, lengths: list[int], batch_size: int, shuffle: bool, seed: int = 0, group_batches: int = 32
    ) -> None:
        self.lengths = lengths
        self.batch_size = batch_size
        self.group_batches = group_batches
        self.sampler = SeededPermutation(len(lengths), shuffle, seed)  # Lightning sets its epoch

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return math.ceil(len(self.lengths) / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        indices = list(self.sampler)
        if not self.sampler.shuffle:
            indices.sort(key=lambda i: self.lengths[i])
            yield from (indices[s : s + self.batch_size] for s in range(0, len(indices), self.batch_size))
            return
        group = self.batch_size * self.group_batches  # a multiple of batch_size: only the last batch is short
        batches = []
        for start in range(0, len(indices), group):
            chunk = sorted(indices[start : start + group], key=lambda i: self.lengths[i])
            batches += [chunk[s : s + self.batch_size] for s in range(0, len(chunk), self.batch_size)]
        random.Random(f"{self.sampler.seed}:{self.sampler.epoch}:batches").shuffle(batches)
        yield from batches


class TextCorpus(LightningDataModule):
    """Training text (:attr:`corpus`, one item per sequence), tokenized by a tokenizer trained on it, for causal-LM
    pretraining: the base of :class:`ToyCorpus` and :class:`~lightning_edit.toy.rule_corpus.RuleCorpus`.

    A subclass gives :attr:`corpus` and calls ``save_hyperparameters`` (its arguments are the run's data settings).
    Batches are dicts of ``input_ids``, ``attention_mask`` (right padding) and ``labels`` (-100 on padding). The
    arguments are described in :class:`ToyCorpus`; ``seed`` also seeds the validation sample and the batch order.
    """

    def __init__(
        self,
        seed: int,
        tokenizer_style: TokenizerStyle,
        vocab_size: int,
        batch_size: int,
        max_length: int,
        val_size: int,
        val_holdout: bool,
        num_workers: int,
    ):
        super().__init__()
        self.seed = seed
        self.tokenizer_style = tokenizer_style
        self.vocab_size = vocab_size
        self.batch_size = batch_size
        self.max_length = max_length
        self.num_workers = num_workers
        self.val_size = val_size
        self.val_holdout = val_holdout
        self.train_set: _Sequences | None = None
        self.val_set: _Sequences | None = None

    @property
    def corpus(self) -> list[str]:
        """The training text, one item per sequence (given by the subclass)."""
        raise NotImplementedError

    @cached_property
    def tokenizer(self) -> PreTrainedTokenizerFast:
        """The tokenizer trained on :attr:`corpus` (deterministic for the settings), with EOS as pad token.

        LLaMA style learns from the corpus with punctuation set off by spaces. Its pre-tokenizer splits on spaces
        only, so it would otherwise learn pieces such as ``▁Paris.``, and ``Paris`` after a prompt (how recall and
        the benchmarks score an object) would start with another token than in the training sentences. This way no
        piece joins punctuation to a word, as with SentencePiece, which splits letters from punctuation.
        """
        texts = self.corpus
        if self.tokenizer_style == "llama":
            texts = [" ".join(_PUNCTUATION.sub(r" \1 ", text).split()) for text in texts]
        tokenizer = train_tokenizer(texts, self.tokenizer_style, self.vocab_size)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return tokenizer

    def encode(self, text: str) -> list[int]:
        """Token ids of one training sentence: the tokenizer's special tokens (BOS for LLaMA), the text, EOS."""
        ids = self.tokenizer(text)["input_ids"] + [self.tokenizer.eos_token_id]
        return ids[: self.max_length]

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        corpus = self.corpus
        rng = random.Random(f"{self.seed}:validation")
        val_indices = set(rng.sample(range(len(corpus)), min(self.val_size, len(corpus))))
        encoded = [self.encode(text) for text in corpus]
        self.val_set = _Sequences([encoded[i] for i in sorted(val_indices)])
        train = [ids for i, ids in enumerate(encoded) if not (self.val_holdout and i in val_indices)]
        self.train_set = _Sequences(train)

    def _loader(self, dataset: _Sequences, shuffle: bool) -> DataLoader:
        lengths = [len(ids) for ids in dataset.sequences]
        batches = LengthGroupedBatches(lengths, self.batch_size, shuffle=shuffle, seed=self.seed)
        return DataLoader(dataset, batch_sampler=batches, collate_fn=self.collate, num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def collate(self, sequences: list[list[int]]) -> dict[str, torch.Tensor]:
        """Right-pad a batch; labels are the input ids with -100 on padding (the model shifts them)."""
        input_ids, attention_mask, _ = pad(sequences, self.tokenizer.pad_token_id, "right")
        labels = input_ids.masked_fill(attention_mask == 0, -100)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class ToyCorpus(TextCorpus):
    """The toy world's training corpus, tokenized by a tokenizer trained on it, for causal-LM pretraining.

    Batches are dicts of ``input_ids``, ``attention_mask`` (right padding) and ``labels`` (-100 on padding).

    Args:
        seed: the world seed: names, facts, the bidirectional/forward-only split and the corpus order.
        n_people: people in the world (subjects of the person relations).
        n_countries: countries (objects of citizenship, subjects of capital).
        n_cities: cities.
        n_companies: companies.
        n_objects: household objects.
        n_languages: languages.
        inverse_fraction: share of each one-to-one relation's facts that the corpus also states inversely
            (bidirectional); the rest are forward-only.
        scripts: also train on each fact rendered in its relation's first how-to script.
        biographies: biographies per subject with several facts (all its facts, then told with a pronoun).
        tokenizer_style: ``gpt2`` (byte-level BPE, no BOS) or ``llama`` (SentencePiece-style pieces, BOS); use the
            model family's style.
        vocab_size: tokenizer vocabulary size (2048 makes every fictional word of a name one token).
        batch_size: sentences per batch.
        max_length: sequences longer than this (in tokens, with BOS/EOS) are cut.
        val_size: validation sentences, a seeded sample of the corpus.
        val_holdout: remove the validation sentences from training. Off by default: the toy models exist to
            memorise every fact, so validation loss tracks memorisation; on, it measures how well other templates
            of a fact carry over to an unseen sentence (and those sentences' facts are recalled less).
        num_workers: DataLoader worker processes (0 is fastest for this small in-memory corpus).
    """

    def __init__(
        self,
        seed: int = 0,
        n_people: int = 150,
        n_countries: int = 12,
        n_cities: int = 48,
        n_companies: int = 30,
        n_objects: int = 60,
        n_languages: int = 8,
        inverse_fraction: float = 0.5,
        scripts: bool = True,
        biographies: int = 5,
        tokenizer_style: TokenizerStyle = "gpt2",
        vocab_size: int = 2048,
        batch_size: int = 32,
        max_length: int = 64,
        val_size: int = 200,
        val_holdout: bool = False,
        num_workers: int = 0,
    ):
        super().__init__(seed, tokenizer_style, vocab_size, batch_size, max_length, val_size, val_holdout, num_workers)
        self.save_hyperparameters()
        self.scripts = scripts
        self.biographies = biographies
        self.world_settings = dict(
            seed=seed,
            n_people=n_people,
            n_countries=n_countries,
            n_cities=n_cities,
            n_companies=n_companies,
            n_objects=n_objects,
            n_languages=n_languages,
            inverse_fraction=inverse_fraction,
        )

    @cached_property
    def world(self) -> ToyWorld:
        """The seeded world."""
        return ToyWorld.generate(**self.world_settings)

    @cached_property
    def corpus(self) -> list[str]:
        """The training text, one sentence, script or biography per item, in the world's seeded order."""
        return self.world.training_corpus(scripts=self.scripts, biographies=self.biographies)
