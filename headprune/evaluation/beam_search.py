"""Beam search for encoder-decoder translation in which a finished sentence leaves the batch.

transformers' generate() runs every row of a batch until the last sentence of the batch is done, so
a batch costs its rows times its longest output: about 40% of the demo's decoding went to sentences
that were already finished, and more when gate variants share a generate() and one variant babbles
to the length cap. fairseq drops finished sentences from the batch; so does this search. It also
runs the encoder once per distinct encoder gate setting, not once per variant: a variant that only
masks decoder heads reads the full model's encoder states, which are the same numbers.

It computes what ``model.generate(num_beams=beam, length_penalty=lenpen, early_stopping=True,
max_new_tokens=max_new, do_sample=False)`` computes, step for step (transformers 5's beam search:
2 x beam candidates per sentence, a hypothesis finishes with EOS among the best ``beam`` candidates
or at the length cap, scores divided by length ** lenpen, a sentence is done when it holds ``beam``
finished hypotheses), so the translations are generate()'s; tests/test_beam_search.py checks that
sentence for sentence. It handles the logits processors translation models use (forced BOS, as
NLLB and mBART's target language; forced EOS at the cap, as fairseq); ``supports`` says whether a
model asks for nothing else, and the caller falls back to generate() when it does.

Each row of the batch carries its own gate variant (``masking.gated`` with one gate setting per row),
so rows can leave in any order.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from transformers import GenerationConfig

from headprune.models.beam_cache import SourceSharingCache
from headprune.models.heads import ENC_SELF, adapter_for, full_gates
from headprune.models.masking import gated

NEG = -1.0e9  # transformers' "never pick this" score


# Generation settings this search reads (or that change nothing it computes); a model whose
# generation config sets anything else to a non-default value (no_repeat_ngram_size, bad_words_ids,
# repetition_penalty, min_new_tokens, ...) is left to generate().
_HANDLED = {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "forced_bos_token_id",
            "forced_eos_token_id", "max_length", "num_beams", "early_stopping", "length_penalty", "use_cache",
            "output_attentions", "output_hidden_states", "output_scores", "output_logits", "return_dict_in_generate",
            "transformers_version", "_from_model_config", "do_sample", "max_new_tokens", "cache_implementation",
            "temperature", "top_k", "top_p"}  # sampling settings: unused without do_sample


@functools.cache
def _default_settings() -> dict:
    return GenerationConfig().to_dict()


def unhandled_settings(generation_config) -> list[str]:
    """The generation settings beam_search does not apply (would make generate() compute otherwise)."""
    defaults = _default_settings()
    return sorted(key for key, value in generation_config.to_dict().items()
                  if key not in _HANDLED and value != defaults.get(key))


def supports(model) -> str | None:
    """Why this search would not reproduce the model's generate() (None: it does)."""
    if not model.config.is_encoder_decoder:
        return "not an encoder-decoder"
    eos = model.generation_config.eos_token_id
    if isinstance(eos, list) and len(eos) != 1:
        return f"{len(eos)} EOS tokens"
    if model.generation_config.decoder_start_token_id is None and model.config.decoder_start_token_id is None:
        return "no decoder start token"
    unhandled = unhandled_settings(model.generation_config)
    if unhandled:
        return f"its generation config sets {', '.join(unhandled)} (logits processors besides forced BOS/EOS)"
    return None


def _gather(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """tensor[b, index[b, j], ...] for (batch, slots, ...) tensors."""
    while index.dim() < tensor.dim():
        index = index.unsqueeze(-1)
    return torch.take_along_dim(tensor, index, dim=1)


def _row_gates(settings: list[dict], rows: torch.Tensor, types) -> dict:
    """One gate setting per row: settings[rows[r]], stacked (rows, layers, heads) per attention type."""
    return {t: torch.stack([s[t] for s in settings])[rows] for t in types}


@torch.no_grad()
def beam_search(model, encoded: dict, gates_list: list, *, beam: int, lenpen: float,
                max_new: int) -> list[list[torch.Tensor]]:
    """Best hypothesis (token ids, decoder start first) per gate setting and per sentence of ``encoded``
    (input_ids and attention_mask of one batch); a setting of None is the full model.

    The decoder runs its family's own beam steps where it has them (``HeadAdapter.beam_decoding``: FSMT),
    which get the encoder states once per sentence instead of once per beam."""
    with adapter_for(model).beam_decoding(model) as per_sentence:
        return _search(model, encoded, gates_list, beam=beam, lenpen=lenpen, max_new=max_new,
                       per_sentence=per_sentence)


def _search(model, encoded, gates_list, *, beam, lenpen, max_new, per_sentence):
    device = encoded["input_ids"].device
    n, variants, K = encoded["input_ids"].shape[0], len(gates_list), beam
    tokens = _Tokens.of(model)
    max_length = 1 + max_new  # the decoder start token is the prompt
    problem = supports(model)
    if problem is not None:
        raise ValueError(f"beam_search would not compute what this model's generate() does: {problem}")

    # settings made on the CPU (a caller's, or full_gates of a model moved since) go where the batch is
    gates_list = [None if g is None else {t: v.to(device) for t, v in g.items()} for g in gates_list]
    gated_any = any(g is not None for g in gates_list)
    settings = [g if g is not None else {t: v.to(device) for t, v in full_gates(model).items()}
                for g in gates_list] if gated_any else []
    decoder_types = [t for t in (settings[0] if settings else {}) if t != ENC_SELF]
    encoder_states, mask, encoder_of = _encoder_states(model, encoded, gates_list)

    # Rows: (variant, sentence, beam), variant-major. A sentence is a (variant, sentence) pair.
    sentence_variant = torch.arange(variants, device=device).repeat_interleave(n)
    sentence_index = torch.arange(n, device=device).repeat(variants)
    encoder_row = torch.tensor(encoder_of, device=device)[sentence_variant] * n + sentence_index
    row_encoder = encoder_row.repeat_interleave(K)
    # a model spread over GPUs returns its encoder states from the encoder's last device
    source_rows = encoder_row if per_sentence else row_encoder  # the encoder row each decoder row reads
    states, source_mask = encoder_states[source_rows.to(encoder_states.device)], mask[source_rows]
    row_variant = sentence_variant.repeat_interleave(K)
    gates = _row_gates(settings, row_variant, decoder_types) if gated_any else None

    B = variants * n
    beams = _Beams.start(B, K, max_length, tokens, device)
    best: list[list] = [[None] * n for _ in range(variants)]
    cache = SourceSharingCache.for_beam_search(model)
    cur_len = 1
    while B:
        with gated(model, gates):
            logits = model(encoder_outputs=(states,), attention_mask=source_mask,
                           decoder_input_ids=beams.running[:, :, cur_len - 1].reshape(B * K, 1),
                           past_key_values=cache, use_cache=True).logits[:, -1, :]
        log_probs = tokens.log_probs(logits.to(device=device, dtype=torch.float32), cur_len, max_length)
        beam_index, done = beams.advance(log_probs, cur_len, tokens.eos, lenpen, max_length)
        cur_len += 1
        for b in done.nonzero()[:, 0].tolist():
            sentence = int(beams.alive[b])
            best[sentence // n][sentence % n] = beams.finished[b, 0]
        rows = beam_index.flatten()
        if done.any():
            kept = (~done).nonzero()[:, 0]
            beams.keep(kept)
            kept_rows = (kept[:, None] * K + torch.arange(K, device=device)).flatten()
            rows = beam_index[kept].flatten()
            kept_sources = kept if per_sentence else kept_rows
            states, source_mask = states[kept_sources.to(states.device)], source_mask[kept_sources]
            if gates is not None:
                gates = {t: g[kept_rows] for t, g in gates.items()}
            cache.cross_attention_cache.reorder_cache(kept_sources)
            B = len(kept)
        cache.self_attention_cache.reorder_cache(rows)
    return best


@dataclass(frozen=True)
class _Tokens:
    """The tokens the search starts, pads, ends and is forced with, as the model's generate() reads them."""

    eos: int
    pad: int
    start: int
    forced_bos: int | None
    forced_eos: int | None

    @classmethod
    def of(cls, model) -> _Tokens:
        config = model.generation_config
        eos = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id
        pad = config.pad_token_id if config.pad_token_id is not None else eos
        start = config.decoder_start_token_id if config.decoder_start_token_id is not None \
            else model.config.decoder_start_token_id
        return cls(eos, pad, start, config.forced_bos_token_id, config.forced_eos_token_id)

    def log_probs(self, logits: torch.Tensor, cur_len: int, max_length: int) -> torch.Tensor:
        """The next token's log-probabilities, a forced token's (BOS first, EOS at the cap) the only finite one."""
        log_probs = torch.log_softmax(logits, dim=-1)
        forced = self.forced_bos if cur_len == 1 else self.forced_eos if cur_len == max_length - 1 else None
        if forced is not None:
            log_probs = torch.full_like(log_probs, float("-inf"))
            log_probs[:, forced] = 0
        return log_probs


def _encoder_states(model, encoded: dict, gates_list: list):
    """The encoder once per distinct encoder gate setting (None: all on, as for decoder-only variants):
    (encoder states and attention mask, one block of the batch's rows per distinct setting; each gate
    setting's block)."""
    n = encoded["input_ids"].shape[0]
    distinct: dict = {}  # setting (as a tuple) -> (index, gates)
    encoder_of = []
    for g in gates_list:
        key = None if g is None or ENC_SELF not in g or bool((g[ENC_SELF] == 1).all()) else g[ENC_SELF]
        index, _ = distinct.setdefault(None if key is None else tuple(key.flatten().tolist()), (len(distinct), key))
        encoder_of.append(index)
    keys = [key for _, key in distinct.values()]
    ids = encoded["input_ids"].repeat(len(keys), 1)
    mask = encoded["attention_mask"].repeat(len(keys), 1)
    encoder_gates = None
    if any(k is not None for k in keys):
        on = torch.ones_like(next(k for k in keys if k is not None))
        encoder_gates = {ENC_SELF: torch.stack([k if k is not None else on for k in keys]).repeat_interleave(n, 0)}
    with gated(model, encoder_gates):
        encoder_states = model.get_encoder()(input_ids=ids, attention_mask=mask, return_dict=True).last_hidden_state
    return encoder_states, mask, encoder_of


@dataclass
class _Beams:
    """The sentences still in the batch (variant-major), each with its K running hypotheses and its K best
    finished ones so far, and their scores."""

    alive: torch.Tensor  # which sentences the batch rows still hold
    running: torch.Tensor
    running_scores: torch.Tensor
    finished: torch.Tensor
    finished_scores: torch.Tensor
    finished_flags: torch.Tensor
    may_improve: torch.Tensor
    top_k_mask: torch.Tensor  # of the 2 x K candidates, the best K may finish

    @classmethod
    def start(cls, B: int, K: int, max_length: int, tokens: _Tokens, device) -> _Beams:
        alive = torch.arange(B, device=device)
        running = torch.full((B, K, max_length), tokens.pad, dtype=torch.long, device=device)
        running[:, :, 0] = tokens.start
        running_scores = torch.zeros((B, K), device=device)
        running_scores[:, 1:] = NEG  # the first step picks from one beam: all beams are the same
        return cls(alive, running, running_scores, finished=running.clone(),
                   finished_scores=torch.full((B, K), NEG, device=device),
                   finished_flags=torch.zeros((B, K), dtype=torch.bool, device=device),
                   may_improve=torch.ones((B, 1), dtype=torch.bool, device=device),
                   top_k_mask=torch.arange(2 * K, device=device) < K)

    def advance(self, log_probs: torch.Tensor, cur_len: int, eos: int, lenpen: float, max_length: int):
        """One step of transformers' beam search, the token at ``cur_len`` chosen: (each new running hypothesis's
        parent, as a row of the batch before the step; which sentences are done)."""
        B, K = self.running_scores.shape
        vocab = log_probs.shape[-1]
        scores = (log_probs.view(B, K, vocab) + self.running_scores[:, :, None]).view(B, K * vocab)
        top_scores, top_index = torch.topk(scores, 2 * K)
        parent = top_index // vocab
        candidates = _gather(self.running, parent)
        candidates[:, :, cur_len] = top_index % vocab
        hits = (candidates[:, :, cur_len] == eos) | (cur_len + 1 >= max_length)

        continuing = top_scores + hits.float() * NEG
        keep = torch.topk(continuing, K)[1]
        self.running, self.running_scores = _gather(candidates, keep), _gather(continuing, keep)
        beam_index = _gather(parent, keep) + torch.arange(B, device=log_probs.device)[:, None] * K

        final_scores = top_scores / (cur_len ** lenpen)  # cur_len - 1 tokens generated, and this one
        final_scores = final_scores + self.finished_flags.all(-1, keepdim=True).float() * NEG  # early stopping
        final_scores = final_scores + (~self.may_improve).float() * NEG
        final_scores = final_scores + (~(hits & self.top_k_mask)).float() * NEG
        merged = torch.topk(torch.cat((self.finished_scores, final_scores), 1), K)[1]
        self.finished = _gather(torch.cat((self.finished, candidates), 1), merged)
        self.finished_scores = _gather(torch.cat((self.finished_scores, final_scores), 1), merged)
        self.finished_flags = _gather(torch.cat((self.finished_flags, hits & self.top_k_mask), 1), merged)
        worst = torch.where(self.finished_flags, self.finished_scores.min(1, keepdim=True)[0], NEG)
        self.may_improve = self.may_improve & (self.running_scores[:, :1] / (cur_len ** lenpen) > worst).any(
            -1, keepdim=True)
        done = self.finished_flags.all(-1) | ~self.may_improve[:, 0] | (cur_len + 1 >= max_length)
        return beam_index, done

    def keep(self, kept: torch.Tensor) -> None:
        """Only the sentences ``kept`` (batch rows) stay."""
        self.alive, self.running, self.running_scores = self.alive[kept], self.running[kept], self.running_scores[kept]
        self.finished, self.finished_scores = self.finished[kept], self.finished_scores[kept]
        self.finished_flags, self.may_improve = self.finished_flags[kept], self.may_improve[kept]
