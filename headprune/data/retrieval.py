"""Needle-in-a-haystack items: a long context with one sentence holding a number, and a question about it.

The items are generated once from a seed (``make_items``) and saved (``write_items``, JSON Lines), so every
gate setting and every study is scored on the same token ids (``headprune.evaluation.retrieval`` scores
them).

How an item is built:

* The haystack text is tokenized ONCE, without special tokens. An item's context is exactly
  ``context_length`` tokens: ``context_length - len(needle)`` haystack tokens read from an offset (drawn
  from the seed, different for the items of one setting; the haystack wraps around when the offset is
  near its end) with the needle's tokens inserted among them.
* The needle is the sentence ``needle`` with a random ``value_digits``-digit value, tokenized alone and
  without special tokens; with a leading space where the tokenizer tells " The" from "The" (byte-level
  BPE), as it would read inside running text.
* Depth d% targets position p = round(d / 100 * (context_length - needle_len)) among the haystack
  tokens. The needle goes to the nearest sentence boundary at or before p: a position right after a
  token whose decoded text ends in '.', '!', '?' or a newline. Position 0 is no boundary (no token before
  it), the context's end is one: depth 0 puts the needle first, depth 100 last. Where no boundary is at
  or before p the needle goes to p itself.
* The prompt (``prompt_ids``): with a chat template (``chat_template=True`` and a tokenizer that has one),
  the template rendered with the user message context + "\\n\\n" + question and the generation prompt,
  the context's ids kept exactly as above: the template is rendered around a placeholder, and the text
  before and after it is tokenized on its own (special tokens only as the template writes them: one BOS,
  not two) and joined as before + context + after (+ the ids of ``answer_prefix``). Without one: the
  tokenizer's BOS where it adds one, the context, and the ids of "\\n" + question + "\\n" + answer_prefix.

An item is a dict: id, context_length, depth (as stated), needle_start (the needle's token offset in the
context), value, needle (the sentence), prompt_ids, needle_span and context_span ([start, end) in
prompt_ids).

The tokenizer is duck-typed (no torch here): ``encode(text, add_special_tokens=...)``, ``decode(ids)``,
``bos_token_id``, and for the chat prompt ``chat_template`` and ``apply_chat_template``; a Hugging Face
tokenizer has them all.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from headprune.io.atomic import atomic_path

NEEDLE = "The special magic number is {value}."
QUESTION = "What is the special magic number mentioned in the text?"
SENTENCE_ENDS = (".", "!", "?", "\n")
_PLACEHOLDER = "HEADPRUNECONTEXTPLACEHOLDER"
_KEYS = ("id", "context_length", "depth", "needle_start", "value", "needle", "prompt_ids", "needle_span",
         "context_span")


def make_items(tokenizer, haystack_text: str, *, context_lengths, depths, needles_per_setting: int = 1,
               seed: int = 0, needle: str = NEEDLE, question: str = QUESTION, answer_prefix: str = "",
               value_digits: int = 5, chat_template: bool = True) -> list[dict]:
    """Items for every (context length, depth) setting, ``needles_per_setting`` each (see the module
    docstring). The same arguments give the same items."""
    if "{value}" not in needle:
        raise ValueError(f"the needle must hold '{{value}}' where the number goes: {needle!r}")
    if value_digits < 1:
        raise ValueError(f"value_digits must be at least 1, got {value_digits}")
    haystack = _encode(tokenizer, haystack_text)
    if len(haystack) < max(context_lengths):
        raise ValueError(f"the haystack has {len(haystack)} tokens, fewer than a context of {max(context_lengths)}")
    for depth in depths:
        if not 0 <= depth <= 100:
            raise ValueError(f"a depth is a percentage from 0 to 100, got {depth}")
    ends = _sentence_end_tokens(tokenizer, haystack)
    rng = random.Random(seed)
    template = _prompt_parts(tokenizer, question, answer_prefix, chat_template)
    items = []
    for context_length in context_lengths:
        for depth in depths:
            offsets = rng.sample(range(len(haystack)), min(needles_per_setting, len(haystack)))
            offsets += [rng.randrange(len(haystack)) for _ in range(needles_per_setting - len(offsets))]
            for k, offset in enumerate(offsets):
                value = str(rng.randrange(10 ** (value_digits - 1), 10 ** value_digits))
                sentence = needle.format(value=value)
                needle_ids = _needle_ids(tokenizer, sentence)
                if len(needle_ids) > context_length:
                    raise ValueError(f"the needle has {len(needle_ids)} tokens, more than a context of "
                                     f"{context_length}")
                hay = [haystack[(offset + i) % len(haystack)] for i in range(context_length - len(needle_ids))]
                start = needle_position(hay, depth, lambda token: token in ends)
                context = hay[:start] + needle_ids + hay[start:]
                before, after = template
                prompt = before + context + after
                items.append({
                    "id": f"{context_length}-{depth:g}-{k}", "context_length": context_length, "depth": depth,
                    "needle_start": start, "value": value, "needle": sentence, "prompt_ids": prompt,
                    "needle_span": [len(before) + start, len(before) + start + len(needle_ids)],
                    "context_span": [len(before), len(before) + context_length]})
    return items


def needle_position(hay: list[int], depth: float, ends_sentence) -> int:
    """Where the needle goes among the ``hay`` tokens (``len(hay) == context_length - needle_len``): the
    nearest sentence boundary at or before p = round(depth / 100 * len(hay)) (Python's round: half to even),
    else p (module docstring).
    ``ends_sentence(token)`` says whether a token ends a sentence."""
    target = round(depth / 100 * len(hay))
    if target >= len(hay):
        return len(hay)  # the context's end is a boundary: depth 100 puts the needle last
    for position in range(target, 0, -1):
        if ends_sentence(hay[position - 1]):
            return position
    return target


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _sentence_end_tokens(tokenizer, ids) -> set[int]:
    """The distinct token ids of ``ids`` whose decoded text ends a sentence (each decoded once)."""
    return {token for token in set(ids) if tokenizer.decode([token]).endswith(SENTENCE_ENDS)}


def _needle_ids(tokenizer, sentence: str) -> list[int]:
    """The sentence's ids as inside running text: after a space where the tokenizer tells " The" from "The".

    A tokenizer that puts a space before a text of its own (SentencePiece's dummy prefix: "▁The") already
    gives the sentence as after a space: its plain encoding is the one."""
    plain = _encode(tokenizer, sentence)
    spaced = _encode(tokenizer, " " + sentence)
    if spaced == plain or (plain and _starts_with_space_marker(tokenizer, plain[0])):
        return plain
    return spaced


def _starts_with_space_marker(tokenizer, token: int) -> bool:
    to_tokens = getattr(tokenizer, "convert_ids_to_tokens", None)
    return to_tokens is not None and str(to_tokens(token)).startswith("\u2581")


def _continuation_ids(tokenizer, text: str) -> list[int]:
    """Ids of text that follows other text: without a dummy-prefix space token the tokenizer would add
    before a text of its own (SentencePiece's lone "▁")."""
    ids = _encode(tokenizer, text)
    to_tokens = getattr(tokenizer, "convert_ids_to_tokens", None)
    if len(ids) > 1 and text[:1] != " " and to_tokens is not None and to_tokens(ids[0]) == "\u2581":
        return ids[1:]
    return ids


def _leading_special_ids(tokenizer) -> list[int]:
    """What the tokenizer puts before a text by default (its BOS, or nothing)."""
    probe = "a"
    plain = _encode(tokenizer, probe)
    default = list(tokenizer.encode(probe))
    for k in range(len(default) - len(plain) + 1):
        if default[k:k + len(plain)] == plain:
            return default[:k]
    bos = getattr(tokenizer, "bos_token_id", None)
    return [bos] if bos is not None and default[:1] == [bos] and plain[:1] != [bos] else []


def _prompt_parts(tokenizer, question: str, answer_prefix: str, chat_template: bool) -> tuple[list, list]:
    """The prompt's ids before and after the context."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": f"{_PLACEHOLDER}\n\n{question}"}],
                                                 add_generation_prompt=True, tokenize=False)
        if rendered.count(_PLACEHOLDER) != 1:
            raise ValueError("the chat template does not render the user message once, as it is: cannot keep the "
                             "context's token ids")
        before_text, after_text = rendered.split(_PLACEHOLDER)
        before = _encode(tokenizer, before_text)
        bos = getattr(tokenizer, "bos_token_id", None)
        if bos is not None and before[:2] == [bos, bos]:
            raise ValueError("the chat prompt would start with two BOS tokens")
        after = _continuation_ids(tokenizer, after_text)
        if answer_prefix:
            after += _continuation_ids(tokenizer, answer_prefix)
        return before, after
    return _leading_special_ids(tokenizer), _continuation_ids(tokenizer, f"\n{question}\n{answer_prefix}")


def write_items(items: list[dict], path) -> None:
    """The items as JSON Lines, written to a temporary name and renamed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as out:
        for item in items:
            out.write(json.dumps(item, ensure_ascii=False) + "\n")


def read_items(path, max_items: int | None = None) -> list[dict]:
    """The first ``max_items`` items of a ``write_items`` file; a line that is not an item is an error naming
    the file and the line."""
    items = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if max_items is not None and len(items) >= max_items:
                break
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: not JSON ({error.msg})") from None
            problem = _item_problem(item)
            if problem:
                raise ValueError(f"{path}:{number}: {problem}")
            items.append(item)
    return items


def _item_problem(item) -> str | None:
    if not isinstance(item, dict):
        return f"expected an item object, got {type(item).__name__}"
    missing = [key for key in _KEYS if key not in item]
    if missing:
        return f"item without {', '.join(missing)}"
    ids = item["prompt_ids"]
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and i >= 0 for i in ids):
        return "prompt_ids must be a non-empty list of token ids"
    for key in ("needle_span", "context_span"):
        span = item[key]
        if not (isinstance(span, list) and len(span) == 2 and all(isinstance(i, int) for i in span)
                and 0 <= span[0] <= span[1] <= len(ids)):
            return f"{key} {span!r} is not a [start, end) span of the {len(ids)} prompt ids"
    if not isinstance(item["value"], str) or not item["value"].isdigit():
        return f"value {item['value']!r} is not a string of digits"
    return None
