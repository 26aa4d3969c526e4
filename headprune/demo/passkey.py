"""Passkey documents: the demo Llama's training text for long-context retrieval (needle in a haystack,
Wu et al. 2025, "Retrieval Head Mechanistically Explains Long-Context Factuality").

A document is the retrieval prompt of a tokenizer without a chat template, followed by its answer:

    BOS + context + "\n" + QUESTION + "\n" + ANSWER_PREFIX + " {value}." + EOS

The context is exactly the asked number of tokens: a span of haystack tokens (the demo grammar's
English, cut from the training text, never the test split) with the needle sentence
NEEDLE.format(value=...) inserted at a sentence boundary (the context's start, or right after a full
stop). The value is a random 5-digit number. "The special magic number is" comes twice (needle and
answer prefix), so the answer is a copy of what followed its first occurrence: a 2-layer model learns it
with induction-style heads.

The loss on a batch (``passkey_loss``) is the language-model loss on the documents' text (the context but
the needle, whose value cannot be predicted; the question; the answer prefix) plus the loss on the
answers, where the value's first token (the one that needs the retrieval from the question) weighs more.
``PasskeyMaker.batches`` lets the context length grow over the first part of training: in a short
haystack the needle is easy to find, the long ones make the retrieval general.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

NEEDLE = "The special magic number is {value}."
QUESTION = "What is the special magic number mentioned in the text?"
ANSWER_PREFIX = "The special magic number is"
VALUE_RANGE = (10_000, 99_999)  # 5-digit values


@dataclass(frozen=True)
class PasskeyDocument:
    """One document's token ids and where its parts are: ``input_ids[context]`` is the context (exactly
    the asked number of ids), ``input_ids[needle]`` the needle inside it, ``input_ids[answer]`` the answer
    after the prompt (the value, the full stop and EOS)."""

    input_ids: list[int]
    value: str
    context: slice
    needle: slice
    answer: slice

    @property
    def prompt(self) -> list[int]:
        """BOS, context, question and answer prefix: what the model is asked."""
        return self.input_ids[:self.answer.start]


def passkey_texts(count: int, seed: int = 0) -> list[str]:
    """``count`` needle-question-answer texts with random values, for learning the tokenizer on: with them
    the needle's and the question's words get merges of their own."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        value = rng.randint(*VALUE_RANGE)
        texts.append(f" {NEEDLE.format(value=value)}\n{QUESTION}\n{ANSWER_PREFIX} {value}.")
    return texts


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class PasskeyMaker:
    """Makes passkey documents with ``tokenizer`` (a fast Hugging Face tokenizer with BOS and EOS) from
    ``haystack``, the token ids of the training text (tokenized once, without BOS). ``edge_fraction``: of
    the documents with the needle at the context's first or last sentence boundary (depths 0% and 100%);
    the others have it at a boundary drawn uniformly."""

    def __init__(self, tokenizer, haystack: list[int], *, edge_fraction: float = 0.3):
        self.tokenizer = tokenizer
        self.haystack = list(haystack)
        self.edge_fraction = edge_fraction
        self.stops = {i for token, i in tokenizer.get_vocab().items() if token.endswith(".")}  # full-stop tokens
        self.sentence_starts = [i + 1 for i, t in enumerate(self.haystack[:-1]) if t in self.stops]
        self.question = _encode(tokenizer, f"\n{QUESTION}\n{ANSWER_PREFIX}")
        self._needles: dict[tuple[str, bool], list[int]] = {}

    def needle(self, value: str, leading_space: bool) -> list[int]:
        """The needle sentence's ids, after a space (inside a text) or not (opening the context)."""
        key = (value, leading_space)
        if key not in self._needles:
            self._needles[key] = _encode(self.tokenizer, (" " if leading_space else "") + NEEDLE.format(value=value))
        return self._needles[key]

    def value(self, rng: random.Random) -> str:
        """A random 5-digit value."""
        return str(rng.randint(*VALUE_RANGE))

    def document(self, context_tokens: int, rng: random.Random) -> PasskeyDocument:
        """One document whose context has exactly ``context_tokens`` tokens."""
        value = self.value(rng)
        needle = self.needle(value, leading_space=True)
        hay_len = context_tokens - len(needle)
        if hay_len < 0:
            raise ValueError(f"a context of {context_tokens} tokens cannot hold the needle ({len(needle)} tokens)")
        # A span that starts at a sentence start (ends anywhere) or ends at a sentence end (starts anywhere).
        anchors = [s for s in self.sentence_starts if hay_len <= s <= len(self.haystack) - hay_len]
        if not anchors:
            raise ValueError(f"the haystack ({len(self.haystack)} tokens) is too short for {hay_len} tokens")
        anchor = rng.choice(anchors)
        start = anchor if rng.random() < 0.5 else anchor - hay_len
        span = self.haystack[start:start + hay_len]
        boundaries = [0] + [i + 1 for i, t in enumerate(span) if t in self.stops]
        roll = rng.random()
        if roll < self.edge_fraction / 2:
            position = boundaries[0]
        elif roll < self.edge_fraction:
            position = boundaries[-1]
        else:
            position = rng.choice(boundaries)
        if position == 0 and rng.random() < 0.5:  # the context opens with the needle: with or without its space
            needle = self.needle(value, leading_space=False)
            if len(needle) != len(self.needle(value, leading_space=True)):
                needle = self.needle(value, leading_space=True)
        context = span[:position] + needle + span[position:]
        answer = _encode(self.tokenizer, f" {value}.")  # the ids that follow ANSWER_PREFIX's in the whole answer
        prompt = [self.tokenizer.bos_token_id] + context + self.question
        input_ids = prompt + answer + [self.tokenizer.eos_token_id]
        return PasskeyDocument(input_ids, value, slice(1, 1 + len(context)),
                               slice(1 + position, 1 + position + len(needle)), slice(len(prompt), len(input_ids)))

    def batches(self, count: int, batch_size: int, min_tokens: int, max_tokens: int, *, ramp: float = 0.0,
                seed: int = 0):
        """``count`` batches of ``batch_size`` documents. The documents of a batch share one context length,
        drawn uniformly from [min_tokens, longest] (so a batch needs next to no padding); ``longest`` grows
        from min_tokens to max_tokens over the first ``ramp`` of the batches, then stays at max_tokens."""
        if not 0 < min_tokens <= max_tokens:
            raise ValueError(f"need 0 < min_tokens <= max_tokens, got {min_tokens} and {max_tokens}")
        rng = random.Random(seed)
        for index in range(count):
            grown = min(1.0, index / (ramp * count)) if ramp > 0 else 1.0
            length = rng.randint(min_tokens, min_tokens + round((max_tokens - min_tokens) * grown))
            yield [self.document(length, rng) for _ in range(batch_size)]


def collate(documents: list[PasskeyDocument], pad_token_id: int):
    """Right-padded ``input_ids`` and ``attention_mask``, and two 0/1 masks over the next-token targets
    (column t is the target input_ids[t + 1]): ``text``, the document's text but the needle (its value
    cannot be predicted) and the answer; ``answer``, the answer (its first column: the value's first token)."""
    import torch

    width = max(len(d.input_ids) for d in documents)
    ids = torch.full((len(documents), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(documents), width), dtype=torch.long)
    text = torch.zeros((len(documents), width - 1))
    answer = torch.zeros((len(documents), width - 1))
    for row, d in enumerate(documents):
        ids[row, :len(d.input_ids)] = torch.tensor(d.input_ids)
        mask[row, :len(d.input_ids)] = 1
        text[row, :d.answer.start - 1] = 1  # target t + 1 is predicted at column t
        text[row, d.needle.start - 1:d.needle.stop - 1] = 0
        answer[row, d.answer.start - 1:d.answer.stop - 1] = 1
    return {"input_ids": ids, "attention_mask": mask, "text": text, "answer": answer}


def passkey_loss(model, batch: dict, *, answer_weight: float = 1.0, first_weight: float = 5.0):
    """The language-model loss on the documents' text (mean over its tokens) plus ``answer_weight`` times
    the loss on their answers (a weighted mean: the value's first token weighs ``first_weight``, the
    others 1). ``batch``: ``collate``'s."""
    import torch

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    targets = batch["input_ids"][:, 1:]
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                                            reduction="none").view(targets.shape)
    answer = batch["answer"].clone()
    first = answer.argmax(1)  # each row's first answer column
    answer[torch.arange(len(answer)), first] = first_weight
    return (nll * batch["text"]).sum() / batch["text"].sum() + answer_weight * (nll * answer).sum() / answer.sum()
