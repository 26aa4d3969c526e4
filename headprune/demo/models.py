"""The demo's tiny models, trained or initialized here and written as the real ones are published: a
fairseq-architecture translation transformer (a fairseq tarball, for wmt14.en-fr.joined-dict.transformer),
a BERT and a RoBERTa folder in the Hugging Face format (for bert-base-uncased and roberta-base: random
weights, the tasks are learned in fine-tuning) and a Llama-layout causal LM with grouped-query attention
(for Llama on WikiText-2).
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from headprune.demo.corpora import _write_lines
from headprune.demo.grammar import _subseed
from headprune.io.atomic import atomic_dir
from headprune.io.progress import Progress, counted
from headprune.training.finetune import restores_torch_threads
from headprune.training.train import corpus_folder, fit_translation_model, write_translation_tarball

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# The tiny translation model: trained by headprune.training.train (the loop that also trains Figure 5's
# IWSLT model), written as a fairseq tarball.
# ---------------------------------------------------------------------------------------------


def train_tiny_translation_model(
    corpus_paths,
    out_tarball,
    *,
    layers: int = 2,
    heads: int = 4,
    d_model: int = 64,
    ffn: int = 128,
    epochs: int = 8,
    seed: int = 0,
    batch_size: int = 64,
    lr: float = 3e-3,
    dropout: float = 0.1,
    warmup_fraction: float = 0.05,
    folder_name: str = "demo.en-fr.transformer",
    src_lang: str = "en",
    tgt_lang: str = "fr",
    num_threads: int | None = 1,
    progress: bool = True,
) -> Path:
    """Train a small fairseq-architecture transformer on the demo corpus; write a fairseq tarball.

    corpus_paths is make_translation_corpus's output (its dict or its folder). The tarball
    (.tar.bz2) holds folder_name/ with model.pt, dict.{src,tgt}.txt and bpecodes, like the
    real wmt14.en-fr.joined-dict.transformer. See headprune.training.train.fit_translation_model for the
    training.
    """
    folder = corpus_folder(corpus_paths, src_lang, tgt_lang)
    model, _ = fit_translation_model(
        folder, layers=layers, heads=heads, d_model=d_model, ffn=ffn, epochs=epochs, seed=seed,
        batch_size=batch_size, lr=lr, dropout=dropout, warmup_fraction=warmup_fraction,
        src_lang=src_lang, tgt_lang=tgt_lang, num_threads=num_threads, progress=progress,
    )
    return write_translation_tarball(model, folder, out_tarball, folder_name, src_lang=src_lang, tgt_lang=tgt_lang)


# ---------------------------------------------------------------------------------------------
# BERT: a tiny stand-in for bert-base-uncased (headprune.training.finetune fine-tunes it, as the real one)
# ---------------------------------------------------------------------------------------------

BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@restores_torch_threads
def make_tiny_bert(
    out_dir,
    vocab_words,
    *,
    layers: int = 2,
    heads: int = 4,
    hidden: int = 64,
    intermediate: int | None = None,
    max_position_embeddings: int = 512,
    dropout: float = 0.1,
    initializer_range: float = 0.1,
    seed: int = 0,
    pretrain_sentences: list[str] | list[tuple[str, str]] | None = None,
    pretrain_steps: int = 0,
    batch_size: int = 32,
    lr: float = 1e-3,
    num_threads: int | None = 1,
    progress: bool = True,
) -> Path:
    """Write a tiny "pretrained" BERT folder in the Hugging Face format of bert-base-uncased.

    The folder has config.json, model.safetensors (a BertForMaskedLM: encoder, pooler
    and MLM head) and the tokenizer files (vocab.txt, tokenizer.json, tokenizer_config.json),
    loadable with AutoTokenizer and BertForSequenceClassification.from_pretrained. The
    WordPiece vocabulary holds the specials, every word of vocab_words (lowercased) and all
    letters, digits and punctuation (also as "##" pieces), so no word becomes [UNK].
    With pretrain_sentences (strings, or (text_a, text_b) pairs) and pretrain_steps > 0 the
    model first learns masked-language modelling briefly (BERT's 15% masking, 80/10/10);
    otherwise the weights are random. (A few hundred MLM steps did not help the demo tasks.)

    initializer_range is 0.1, not BERT's 0.02: with 0.02 the tiny model's attention barely
    moves at first, and demo MNLI fine-tuning stayed at chance for one of two seeds; with 0.1
    it reached 91-95% dev accuracy in 20 s. transformers 5 does not write the attention
    implementation to config.json: load with attn_implementation="eager" for attention weights.
    """
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    torch.manual_seed(seed)
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as staging:  # the folder appears whole, or not at all
        characters = list("abcdefghijklmnopqrstuvwxyz0123456789") + list(".,;:!?'\"()-")
        vocab = list(BERT_SPECIAL_TOKENS)
        for token in sorted({w.lower() for w in vocab_words}) + characters + ["##" + c for c in characters]:
            if token not in vocab:
                vocab.append(token)
        vocab_file = staging / "vocab.txt"
        _write_lines(vocab_file, vocab)
        tokenizer = BertTokenizer(vocab=str(vocab_file), do_lower_case=True,
                                  model_max_length=max_position_embeddings)

        config = BertConfig(
            vocab_size=len(vocab),
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=intermediate or 4 * hidden,
            max_position_embeddings=max_position_embeddings,
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout,
            initializer_range=initializer_range,
            pad_token_id=BERT_SPECIAL_TOKENS.index("[PAD]"),
            attn_implementation="eager",  # attention weights must be available to the analysis
        )
        model = BertForMaskedLM(config)
        if pretrain_steps > 0 and not pretrain_sentences:
            raise ValueError("pretrain_steps > 0 needs pretrain_sentences to pretrain on")
        if pretrain_steps > 0:
            _pretrain_masked_lm(model, tokenizer, pretrain_sentences, pretrain_steps, batch_size, lr, seed,
                                progress)
        model.eval()
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return out_dir


def _pretrain_masked_lm(model, tokenizer, sentences, steps: int, batch_size: int, lr: float, seed: int,
                       progress: bool = True) -> None:
    """A few steps of BERT's masked-LM objective on the given sentences."""
    rng = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    special_ids = torch.tensor(tokenizer.all_special_ids)
    model.train()
    for _ in counted(range(steps), "pretrain tiny BERT (masked LM)", "steps", enabled=progress, log=log):
        picks = [sentences[i] for i in torch.randint(len(sentences), (batch_size,), generator=rng).tolist()]
        if isinstance(picks[0], str):
            batch = tokenizer(picks, return_tensors="pt", padding=True, truncation=True, max_length=128)
        else:  # sentence pairs, like BERT's two-segment pretraining inputs
            batch = tokenizer([a for a, _ in picks], [b for _, b in picks], return_tensors="pt",
                              padding=True, truncation=True, max_length=128)
        input_ids = batch["input_ids"].clone()
        maskable = ~torch.isin(input_ids, special_ids)
        chosen = (torch.rand(input_ids.shape, generator=rng) < 0.15) & maskable
        labels = torch.where(chosen, input_ids, torch.full_like(input_ids, -100))
        roll = torch.rand(input_ids.shape, generator=rng)
        input_ids[chosen & (roll < 0.8)] = tokenizer.mask_token_id
        random_tokens = torch.randint(len(BERT_SPECIAL_TOKENS), model.config.vocab_size, input_ids.shape, generator=rng)
        replace = chosen & (roll >= 0.8) & (roll < 0.9)
        input_ids[replace] = random_tokens[replace]
        loss = model(input_ids=input_ids, attention_mask=batch["attention_mask"],
                     token_type_ids=batch["token_type_ids"], labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


# ---------------------------------------------------------------------------------------------
# A decoder-only LM and a second encoder: the demo's stand-ins for Llama on WikiText-2 and RoBERTa.
# ---------------------------------------------------------------------------------------------

def _byte_level_bpe(texts: list[str], vocab_size: int, specials: list[str]):
    """A byte-level BPE (GPT-2's, Llama 3's kind of tokenizer) learned on ``texts`` (huggingface tokenizers)."""
    from tokenizers import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
                                  show_progress=False)
    return tokenizer


# The passkey documents' settings (demo/config.yaml's demo.language_model.passkey): documents per step
# (batch_size); the range of their context lengths in tokens, the longest growing from min_tokens to
# max_tokens over the first ``ramp`` of the steps (short haystacks first: the needle is easy to find);
# the weights of headprune.demo.passkey.passkey_loss (answer_weight: the answer beside the documents'
# text; first_weight: the value's first token, the one that needs the retrieval, beside the answer's
# other tokens); after which fraction of the steps the ordinary windows join (windows_after: until then
# the documents' own text is the language model's); and how many needle-question-answer texts join the
# text the tokenizer is learned on, so that the needle's and question's words get merges of their own
# (the values do not: a 5-digit value stays "Ġd" and four single digits, easy to copy).
PASSKEY_DEFAULTS = {"batch_size": 16, "min_tokens": 32, "max_tokens": 224, "ramp": 0.5, "answer_weight": 3.0,
                    "first_weight": 5.0, "windows_after": 0.5, "tokenizer_texts": 1000}


def tiny_llama_tokenizer(text: str, vocab_size: int, passkey_texts: list[str] = ()):
    """The tiny Llama's tokenizer: a byte-level BPE learned on the lines of ``text`` and on
    ``passkey_texts``, that puts <s> before every text (as Llama's); </s> and <pad> are its other specials."""
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    lines = [line for line in text.splitlines() if line.strip()] + list(passkey_texts)
    bpe = _byte_level_bpe(lines, vocab_size, ["<s>", "</s>", "<pad>"])
    bpe.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bpe.token_to_id("<s>"))])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def passkey_settings(passkey: dict | None) -> dict | None:
    """``passkey`` completed with ``PASSKEY_DEFAULTS``; None stays None."""
    if passkey is None:
        return None
    unknown = set(passkey) - set(PASSKEY_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown passkey settings {sorted(unknown)}; known: {sorted(PASSKEY_DEFAULTS)}")
    return PASSKEY_DEFAULTS | dict(passkey)


@restores_torch_threads
def train_tiny_llama(out_dir, text: str, *, layers: int = 2, heads: int = 4, kv_heads: int = 2, hidden: int = 64,
                     ffn: int = 128, window: int = 64, vocab_size: int = 400, steps: int = 300, batch_size: int = 16,
                     lr: float = 3e-3, initializer_range: float = 0.02, max_positions: int | None = None,
                     passkey: dict | None = None, seed: int = 0, num_threads: int | None = 1,
                     progress: bool = True) -> Path:
    """Train a Llama-layout causal LM with grouped-query attention (``heads`` query heads reading
    ``kv_heads`` key/value heads) on ``text`` and save it as a Hugging Face model folder: config.json,
    model.safetensors, and a byte-level BPE tokenizer.json that puts <s> before every text (as Llama's).

    Each step takes ``batch_size`` windows of ``window`` tokens of the text. With ``passkey`` (settings;
    ``PASSKEY_DEFAULTS`` for those not given) each step also takes a batch of passkey documents
    (``headprune.demo.passkey``: a needle sentence with a 5-digit number at a sentence boundary of a
    haystack cut from ``text``, the question, the answer), so that the model learns to retrieve; the
    windows then join after ``windows_after`` of the steps, and the tokenizer is learned on the text and
    needle-question-answer texts. ``max_positions`` (config.max_position_embeddings; 4 windows if not
    given) should cover the longest prompt the model is asked.

    ``initializer_range``: with Llama's 0.02 this tiny model's attention stays nearly flat for long and
    it did not learn the passkey in 3000 steps; with 0.1 the copy forms within a few hundred steps. It
    forms suddenly (the value's first digit is retrieved early, the other digits all at once later), and
    when depends on the initialization: on the demo's corpus with the demo's settings, seed 0 has it
    after about 350 of 500 steps; some other seeds need far more steps."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from headprune.demo.passkey import PasskeyMaker, collate, passkey_loss, passkey_texts

    if num_threads:
        torch.set_num_threads(num_threads)
    torch.manual_seed(seed)
    out_dir = Path(out_dir)
    passkey = passkey_settings(passkey)
    if batch_size <= 0 and (passkey is None or passkey["batch_size"] <= 0):
        raise ValueError("nothing to train on: batch_size windows and passkey documents are both 0")
    extra = passkey_texts(passkey["tokenizer_texts"], _subseed(seed, "passkey-tokenizer")) if passkey else []
    tokenizer = tiny_llama_tokenizer(text, vocab_size, extra)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=ffn,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         max_position_embeddings=max_positions or 4 * window, initializer_range=initializer_range,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
                         attn_implementation="sdpa")  # trains a quarter faster than eager on the passkey documents
    model = LlamaForCausalLM(config)
    ids = torch.tensor(tokenizer(text)["input_ids"])
    chunks = ids[:len(ids) // window * window].view(-1, window)
    documents = iter(())
    if passkey is not None and passkey["batch_size"] > 0:
        maker = PasskeyMaker(tokenizer, ids[1:].tolist())  # haystacks: the text's ids after <s>
        documents = maker.batches(steps, passkey["batch_size"], passkey["min_tokens"], passkey["max_tokens"],
                                  ramp=passkey["ramp"], seed=_subseed(seed, "passkey-documents"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 20) * (1 - step / steps))
    shuffle = torch.Generator().manual_seed(seed)
    model.train()
    counter = Progress(steps, "train tiny Llama", "steps", enabled=progress, log=log)
    windows_from = round(passkey["windows_after"] * steps) if passkey is not None and passkey["batch_size"] > 0 else 0
    for step in range(steps):
        loss, postfix = 0.0, {}
        if batch_size > 0 and step >= windows_from:
            batch = chunks[torch.randint(len(chunks), (batch_size,), generator=shuffle)]
            loss = model(input_ids=batch, labels=batch).loss
            postfix["loss"] = f"{loss.item():.3f}"
        passkey_batch = next(documents, None)
        if passkey_batch is not None:
            retrieval = passkey_loss(model, collate(passkey_batch, config.pad_token_id),
                                     answer_weight=passkey["answer_weight"], first_weight=passkey["first_weight"])
            loss = loss + retrieval
            postfix["passkey"] = f"{retrieval.item():.3f}"
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        counter.note = ", ".join(f"{name} {value}" for name, value in postfix.items())
        counter.update()
    counter.close()
    model.eval()
    with atomic_dir(out_dir) as staging:  # the folder appears whole, or not at all
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return out_dir


def make_tiny_roberta(out_dir, texts: list[str], *, layers: int = 2, heads: int = 4, hidden: int = 64,
                      vocab_size: int = 400, max_length: int = 64, initializer_range: float = 0.1,
                      seed: int = 0) -> Path:
    """Write a tiny "pretrained" RoBERTa folder as roberta-base is published: config.json,
    model.safetensors (RobertaForMaskedLM, random weights: as the tiny BERT, it learns the task in
    fine-tuning) and its byte-level BPE tokenizer (vocab.json, merges.txt) learned on ``texts``."""
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaTokenizerFast

    torch.manual_seed(seed)
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as staging:  # the folder appears whole, or not at all
        bpe = _byte_level_bpe(texts, vocab_size, ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
        bpe.save_model(str(staging))
        tokenizer = RobertaTokenizerFast(vocab=str(staging / "vocab.json"), merges=str(staging / "merges.txt"),
                                         model_max_length=max_length)
        config = RobertaConfig(vocab_size=bpe.get_vocab_size(), hidden_size=hidden, num_hidden_layers=layers,
                               num_attention_heads=heads, intermediate_size=4 * hidden,
                               max_position_embeddings=max_length + 2 * 2, type_vocab_size=1,
                               initializer_range=initializer_range, pad_token_id=tokenizer.pad_token_id,
                               bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                               attn_implementation="eager")
        RobertaForMaskedLM(config).eval().save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return out_dir
