"""Turn text into padded batches that the head adapters understand."""
from __future__ import annotations

import torch


def classification_batches(tokenizer, pairs: list[tuple[str, str]], labels: list[int] | None = None,
                           batch_size: int = 32, max_length: int = 128) -> list[dict]:
    """Sentence (pair) classification batches: input_ids, attention_mask, token_type_ids, labels."""
    batches = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        text_a = [a for a, _ in chunk]
        text_b = [b for _, b in chunk]
        encoded = tokenizer(text_a, text_b if any(text_b) else None, padding=True, truncation=True,
                            max_length=max_length, return_tensors="pt")
        batch = dict(encoded)
        if labels is not None:
            batch["labels"] = torch.tensor(labels[start:start + batch_size], dtype=torch.long)
        batches.append(batch)
    return batches


class EncodedPairs:
    """Sentence (pair) classification examples tokenized once, batched in any order without tokenizing again.

    ``batches(order, ...)`` gives what ``classification_batches`` gives for the examples in that order (the
    same ids, padding to the longest row of each batch on the tokenizer's padding side, the same masks and
    token types): fine-tuning reshuffles every epoch, and tokenizing the training set again each time took a
    tenth of a small model's fine-tuning.
    """

    def __init__(self, tokenizer, pairs: list[tuple[str, str]], labels: list[int] | None = None,
                 max_length: int = 128):
        text_a = [a for a, _ in pairs]
        text_b = [b for _, b in pairs]
        encoded = tokenizer(text_a, text_b if any(text_b) else None, truncation=True, max_length=max_length)
        self.fields = {key: list(values) for key, values in encoded.items()}
        self.labels = labels
        # what tokenizer(..., padding=True) pads each field with
        self.pad_values = {"input_ids": tokenizer.pad_token_id, "attention_mask": 0,
                           "token_type_ids": getattr(tokenizer, "pad_token_type_id", 0),
                           "special_tokens_mask": 1}
        self.left = tokenizer.padding_side == "left"

    def batches(self, order: list[int], batch_size: int) -> list[dict]:
        batches = []
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            width = max(len(self.fields["input_ids"][i]) for i in rows)
            batch = {}
            for key, values in self.fields.items():
                pad = self.pad_values.get(key, 0)
                padded = [[pad] * (width - len(values[i])) + values[i] if self.left
                          else values[i] + [pad] * (width - len(values[i])) for i in rows]
                batch[key] = torch.tensor(padded, dtype=torch.long)
            if self.labels is not None:
                batch["labels"] = torch.tensor([self.labels[i] for i in rows], dtype=torch.long)
            batches.append(batch)
        return batches


def encode_target(tokenizer, text: str) -> list[int]:
    """Target-side ids as fairseq makes them: Moses in the target language, BPE, target dict, </s>.

    FSMTTokenizer only encodes the source side, so this mirrors its pipeline with
    the target language and vocabulary.
    """
    lang = tokenizer.tgt_lang
    # FSMTTokenizer.decoder maps target ids to tokens (get_tgt_vocab() breaks in transformers 5).
    vocab = {token: index for index, token in tokenizer.decoder.items()}
    unk = vocab[tokenizer.unk_token]
    words = tokenizer.moses_tokenize(tokenizer.moses_pipeline(text, lang=lang), lang=lang)
    ids = [vocab.get(piece, unk) for word in words if word for piece in tokenizer.bpe(word).split(" ")]
    return ids + [vocab[tokenizer.sep_token]]  # FSMT calls fairseq's </s> its sep token


def translation_batches(tokenizer, sources: list[str], targets: list[str], batch_size: int = 32,
                        max_length: int = 256, decoder_start_token_id: int | None = None) -> list[dict]:
    """Teacher-forcing batches, as fairseq builds them.

    decoder_input_ids = [</s>] + target tokens and labels = target tokens + [</s>],
    padded with the pad id (ignored by the loss). transformers' own translation models (Marian, BART,
    M2M100/NLLB: not FSMT's tokenizer) encode the target with their tokenizer (``text_target``, the
    target language's tag included where they add one) and start decoding from the model's
    ``decoder_start_token_id`` (Marian: pad; BART, NLLB: </s>).
    """
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} source sentences but {len(targets)} targets")
    fairseq_style = hasattr(tokenizer, "moses_pipeline")
    pad = tokenizer.pad_token_id
    # FSMT calls fairseq's </s> its sep token
    eos = tokenizer.sep_token_id if fairseq_style else decoder_start_token_id
    if eos is None:
        raise ValueError(f"{type(tokenizer).__name__}: give the model's decoder_start_token_id")
    batches = []
    for start in range(0, len(sources), batch_size):
        src = tokenizer(sources[start:start + batch_size], padding=True, truncation=True,
                        max_length=max_length, return_tensors="pt")
        chunk = targets[start:start + batch_size]
        labels = [encode_target(tokenizer, t)[:max_length] for t in chunk] if fairseq_style else \
            [ids[:max_length] for ids in tokenizer(text_target=chunk, truncation=True, max_length=max_length)["input_ids"]]
        length = max(len(x) for x in labels)
        label_ids = torch.full((len(labels), length), pad, dtype=torch.long)
        decoder_ids = torch.full((len(labels), length), pad, dtype=torch.long)
        for i, ids in enumerate(labels):
            label_ids[i, :len(ids)] = torch.tensor(ids)
            decoder_ids[i, :len(ids)] = torch.tensor([eos] + ids[:-1])
        batches.append({
            "input_ids": src["input_ids"], "attention_mask": src["attention_mask"],
            "decoder_input_ids": decoder_ids, "decoder_attention_mask": (label_ids != pad).long(),
            "labels": label_ids,
        })
    return batches
