"""Every encoder-decoder of transformers through one adapter: ``Seq2SeqAdapter`` (M2M100 and headprune's
``PreNormTransformer``, BART, mBART, Marian, T5, mT5, umT5, Pegasus, ...; FSMT has an adapter of its own, ``fsmt.py``).

Where the heads are, how a layer loses some and what a layer left without heads runs travel with an exported model
(``headprune/models/portable/modeling_headprune_seq2seq.py``: the encoder and decoder transformers' get_encoder() and
get_decoder() give, each one's layers, per layer its self-attention and the decoder's cross-attention, each a
``headprune_decoder.DecoderLayout``); the attention function a pruned T5 runs is ``headprune_attention.py``'s.
This adapter adds what headprune needs on top: the sites of the three attention types and the translation batch
and loss (``Seq2SeqBatch``, which FSMT's adapter shares: batch-major tensors, summed token cross entropy, padding and
causal masks). Its family is the model type. M2M100, BART, mBART and Marian had adapters of their own until issue
#45; this one computes what they did (tests/data/hand_written_families_reference.pt).

What a family cannot do is refused in one line: a head's query where the scores add a relative position bias (T5's:
a zero query does not attend uniformly, ``query_problem``), a head's attention mask where a module does not hand its
``attention_mask`` to transformers' attention interface, a window over the past (streaming masking: a causal-LM idea;
``attention_problem``), pruning a layer that reads a
position bias of every head without calling transformers' attention interface, where its kept heads' bias is
picked.
"""
from __future__ import annotations

from torch import nn

from headprune.models.attention_types import ATTENTION_TYPES, DEC_SELF, ENC_DEC, ENC_SELF
from headprune.models.families.causal_lm import ValueView
from headprune.models.portable import headprune_attention as attention_of
from headprune.models.portable import modeling_headprune_seq2seq as stacks_of
from headprune.models.sites import AttentionSite, HeadAdapter, _causal, mask_argument_problem


# Attention classes whose own forward (not transformers' attention interface) shapes its tensors by the attributes
# keep_heads sets (num_heads, head_dim, embed_dim), never by its input's width: MVP's (its prompts off, the default)
OWN_FORWARDS = ("MvpAttention",)
# Config flags that add per-head keys and values from outside the attention modules (MVP's prompts)
PROMPT_FLAGS = ("use_prompt",)


class Seq2SeqBatch(HeadAdapter):
    """The translation batch of every encoder-decoder adapter: ``input_ids``/``attention_mask`` (source),
    ``decoder_input_ids``/``decoder_attention_mask`` (target, shifted) and ``labels``, batch-first."""

    attention_types = ATTENTION_TYPES

    def loss_and_outputs(self, model, batch, output_attentions=False):
        outputs = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
            decoder_input_ids=batch["decoder_input_ids"], decoder_attention_mask=batch["decoder_attention_mask"],
            output_attentions=output_attentions, use_cache=False,
        )
        # Plain token cross entropy summed over target tokens: no label smoothing (the authors' choice).
        logits = outputs.logits
        loss = nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1),
            ignore_index=model.config.pad_token_id, reduction="sum",
        )
        return loss, outputs

    def query_mask(self, batch, attn_type):
        return (batch["attention_mask"] if attn_type == ENC_SELF else batch["decoder_attention_mask"]).bool()

    def key_mask(self, batch, attn_type):
        source = batch["attention_mask"].bool()
        target = batch["decoder_attention_mask"].bool()
        if attn_type == ENC_SELF:
            return source[:, None, :].expand(-1, source.shape[1], -1)
        if attn_type == ENC_DEC:
            return source[:, None, :].expand(-1, target.shape[1], -1)
        return _causal(target)

    def eos_keys(self, model, batch, attn_type):
        keys = batch["decoder_input_ids"] if attn_type == DEC_SELF else batch["input_ids"]
        return keys == model.config.eos_token_id

    def attention_weights(self, outputs, attn_type):
        return list({ENC_SELF: outputs.encoder_attentions, ENC_DEC: outputs.cross_attentions,
                     DEC_SELF: outputs.decoder_attentions}[attn_type])

    def num_tokens(self, batch):
        # fairseq's ntokens: target tokens, EOS included.
        return int(batch["decoder_attention_mask"].sum())


class Seq2SeqAdapter(Seq2SeqBatch):
    """``family`` is the model type ("t5", "pegasus"): it names the family in tables and logs."""

    time_major = False

    def __init__(self, family: str = "seq2seq"):
        self.family = family

    def sites(self, model):
        return [_site(attn_type, layout) for attn_type, layout in stacks_of.layouts(model)]

    def prune_site(self, site: AttentionSite, keep: list[int]):
        problem = _site_problem(site)
        if problem is not None:
            raise ValueError(f"{site.attn_type} layer {site.layer}: {problem}")
        stacks_of.prune_layout(site.layout, keep)

    def finish_pruning(self, model):
        if stacks_of.needs_headprune_attention(model):
            problem = self.pruning_problem(model)
            if problem is not None:
                raise ValueError(problem)
            stacks_of.run_through_headprune(model)

    def pruning_problem(self, model) -> str | None:
        for flag in PROMPT_FLAGS:
            if getattr(model.config, flag, False):
                return f"config.{flag}: its prompts hold keys and values of every head, outside the attention"
        for site in self.sites(model):
            problem = _site_problem(site)
            if problem is not None:
                return f"{site.attn_type} layer {site.layer}: {problem}"
        return None

    def query_problem(self, model, sites):
        for site in sites:
            if stacks_of.reads_position_bias(site.attention):
                return (f"{site.attn_type} layer {site.layer} ({type(site.attention).__name__}) adds a relative "
                        "position bias to its scores: a zero query would not attend uniformly")
        return super().query_problem(model, sites)

    def attention_problem(self, model, sites, causal_lm=False):
        if causal_lm:
            return (f"{self.family} is an encoder-decoder: a window over the past is a causal-LM idea (the decoder-only "
                    "LMs of the generic decoder adapter)")
        return next(filter(None, map(mask_argument_problem, sites)), None)


def layout_problem(model) -> str | None:
    """Why the generic encoder-decoder adapter does not serve ``model`` (None: it does)."""
    if not getattr(model.config, "is_encoder_decoder", False):
        return "not an encoder-decoder (config.is_encoder_decoder is not set)"
    try:
        stacks_of.layouts(model)
    except (ValueError, AttributeError, TypeError, NotImplementedError) as error:
        return str(error)
    return None


def match(model) -> Seq2SeqAdapter | None:
    if layout_problem(model) is not None:
        return None
    return Seq2SeqAdapter(str(getattr(model.config, "model_type", None) or "seq2seq"))


def _site_problem(site: AttentionSite) -> str | None:
    """Why removing heads of ``site`` would not leave the kept heads' function as it was (None: it would)."""
    problem = site.layout.pruning_problem()
    if problem is None and not attention_of.uses_attention_interface(site.attention) and \
            type(site.attention).__name__ not in OWN_FORWARDS and stacks_of.pruned_forward(site.attention) is None:
        # a forward of its own may shape its tensors by the embedding size (FSMT's) or mix heads (ProphetNet's
        # n-gram streams): only one that hands its heads to transformers' interface is known to run with fewer
        problem = (f"{type(site.attention).__name__} does not call transformers' attention interface: its own "
                   "forward is not known to run with fewer heads")
    return problem


def _site(attn_type: str, layout) -> AttentionSite:
    grouped = layout.fused is not None or layout.groups != 1
    values = ValueView(layout.value, layout.value_features) if grouped else layout.value
    site = AttentionSite(attn_type, layout.layer, layout.attention, layout.query, layout.key, values, layout.output,
                         head_dim=layout.head_dim, original_num_heads=layout.original_heads,
                         time_major=stacks_of.time_major(layout.attention))
    site.layout = layout
    return site
