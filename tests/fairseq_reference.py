"""fairseq's side of the checkpoint tests: a tiny BPE world, fairseq-named random weights, and
an independent plain-torch forward pass written from fairseq's transformer equations (post-norm
and pre-norm), used by tests/test_fairseq.py and tests/test_fairseq_checkpoints.py."""

import argparse
import math

import sacremoses
import torch
import torch.nn.functional as F

from tolerances import assert_within_rounding

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
PAD, EOS, UNK = 1, 2, 3

# ----------------------------------------------------------------------------------------------
# A tiny BPE world: subword-nmt 0.2 codes, and dictionaries holding every symbol they can make.

MERGES = [
    "t h", "th e</w>", "c a", "ca t</w>", "s a", "sa t</w>", "o n</w>", "m a", "ma t</w>",
    "l e</w>", "c h", "ch a", "cha t</w>", "t a", "ta p", "tap i", "tapi s</w>", "e s", "es t</w>",
    "s u", "su r</w>", "& a", "&a p", "&ap o", "&apo s", "&apos ;", "&apos; s</w>", "&apos; t</w>",
    "d o", "do g</w>", "h a", "ha t</w>", "r e", "re d</w>", "i s", "is n</w>", "h o", "ho m",
    "hom m", "homm e</w>", "l &apos;", "u n</w>",
    "t h",  # a repeated merge: subword-nmt keeps the first rank
]
BPECODES_TEXT = "#version: 0.2\n" + "\n".join(MERGES) + "\n"
# No "!", "q", "z" anywhere: words with them hit <unk>.
CHARACTERS = list("abcdefghijklmnoprstuvwxyTDHL.,?;&'")


def dict_tokens_for(merges, extra=()):
    """fairseq dict tokens covering every character and every merge result, deterministic order."""
    tokens = []
    for char in CHARACTERS:
        tokens += [char, char + "@@"]
    for merge in merges:
        merged = merge.replace(" ", "")
        tokens.append(merged[:-4] if merged.endswith("</w>") else merged + "@@")
    tokens += list(extra)
    return list(dict.fromkeys(tokens))  # unique, first occurrence kept


JOINED_TOKENS = dict_tokens_for(MERGES)
EN_TOKENS = dict_tokens_for(MERGES[:20])
FR_TOKENS = dict_tokens_for(MERGES[8:], extra=["madeupword0000"])


# ----------------------------------------------------------------------------------------------
# Independent references

def reference_bpe(word, merges):
    """subword-nmt 0.2 apply_bpe on one word, naively: returns the "@@"-marked pieces."""
    ranks = {}
    for rank, merge in enumerate(merges):
        ranks.setdefault(tuple(merge.split()), rank)
    symbols = list(word[:-1]) + [word[-1] + "</w>"]
    while len(symbols) > 1:
        candidates = [(ranks[pair], pair) for pair in zip(symbols, symbols[1:]) if pair in ranks]
        if not candidates:
            break
        _, best = min(candidates)
        merged, i = [], 0
        while i < len(symbols):
            if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                merged.append(symbols[i] + symbols[i + 1])
                i += 2
            else:
                merged.append(symbols[i])
                i += 1
        symbols = merged
    symbols[-1] = symbols[-1][: -len("</w>")]
    return [s + "@@" for s in symbols[:-1]] + [symbols[-1]]


def reference_ids(text, lang, dict_tokens, merges=MERGES):
    """fairseq's pipeline: Moses (normalize + tokenize, escaped) -> BPE -> dictionary, + </s>."""
    text = sacremoses.MosesPunctNormalizer(lang=lang).normalize(text)
    words = sacremoses.MosesTokenizer(lang=lang).tokenize(text, aggressive_dash_splits=True, escape=True)
    index = {token: i for i, token in enumerate(SPECIALS + list(dict_tokens))}
    pieces = [piece for word in words for piece in reference_bpe(word, merges)]
    return [index.get(piece, UNK) for piece in pieces] + [EOS]


def sinusoidal_table(num_positions, dim, padding_idx):
    """fairseq's SinusoidalPositionalEmbedding.get_embedding."""
    half = dim // 2
    step = math.log(10000) / (half - 1)
    frequencies = torch.exp(torch.arange(half, dtype=torch.float) * -step)
    angles = torch.arange(num_positions, dtype=torch.float)[:, None] * frequencies[None, :]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    table[padding_idx] = 0
    return table


def fairseq_positions(tokens):
    """fairseq's make_positions: non-pad tokens count from padding_idx + 1."""
    mask = tokens.ne(PAD).long()
    return torch.cumsum(mask, dim=1) * mask + PAD


def reference_forward(state, args, src_tokens, prev_output_tokens):
    """Decoder logits from fairseq's transformer equations, on fairseq-named weights.

    Post-norm (x = LN(x + f(x))) or, with args.encoder/decoder_normalize_before, pre-norm
    (x = x + f(LN(x)), then a final layer norm per stack). Works with either naming: fused in_proj
    or separate q/k/v; layer_norms.N or named norms. Separate source and target vocabularies,
    shared or separate output projection.
    """
    w = {name: tensor.float() for name, tensor in state.items()}
    d = args.encoder_embed_dim
    activation = {"relu": F.relu, "gelu": F.gelu}[getattr(args, "activation_fn", "relu")]
    pre_norm = getattr(args, "encoder_normalize_before", False)
    scale = 1.0 if getattr(args, "no_scale_embedding", False) else math.sqrt(d)

    def norm(name, x):
        return F.layer_norm(x, (d,), w[name + ".weight"], w[name + ".bias"], eps=1e-5)

    def sublayer(prefix, old_index, new_name, x, f):
        name = f"{prefix}.layer_norms.{old_index}" if f"{prefix}.layer_norms.{old_index}.weight" in w else f"{prefix}.{new_name}"
        return x + f(norm(name, x)) if pre_norm else norm(name, x + f(x))

    def projections(prefix):
        if prefix + ".in_proj_weight" in w:
            weight, bias = w[prefix + ".in_proj_weight"], w[prefix + ".in_proj_bias"]
            return [(weight[i * d:(i + 1) * d], bias[i * d:(i + 1) * d]) for i in range(3)]
        return [(w[f"{prefix}.{p}.weight"], w[f"{prefix}.{p}.bias"]) for p in ("q_proj", "k_proj", "v_proj")]

    def attention(prefix, query, key, heads, key_padding_mask, causal):
        (wq, bq), (wk, bk), (wv, bv) = projections(prefix)
        head_dim = d // heads
        q = (query @ wq.T + bq) * head_dim ** -0.5
        k, v = key @ wk.T + bk, key @ wv.T + bv
        split = lambda t: t.view(t.shape[0], t.shape[1], heads, head_dim).transpose(1, 2)  # B H T hd
        scores = split(q) @ split(k).transpose(-1, -2)
        if causal:
            future = torch.triu(torch.ones(query.shape[1], key.shape[1], dtype=torch.bool), diagonal=1)
            scores = scores.masked_fill(future, float("-inf"))
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        out = (scores.softmax(-1) @ split(v)).transpose(1, 2).reshape(query.shape)
        return out @ w[prefix + ".out_proj.weight"].T + w[prefix + ".out_proj.bias"]

    def feed_forward(prefix, x):
        hidden = activation(x @ w[prefix + ".fc1.weight"].T + w[prefix + ".fc1.bias"])
        return hidden @ w[prefix + ".fc2.weight"].T + w[prefix + ".fc2.bias"]

    table = sinusoidal_table(64, d, PAD)
    src_pad = src_tokens.eq(PAD)
    x = scale * w["encoder.embed_tokens.weight"][src_tokens] + table[fairseq_positions(src_tokens)]
    for i in range(args.encoder_layers):
        p = f"encoder.layers.{i}"
        x = sublayer(p, 0, "self_attn_layer_norm", x,
                     lambda h: attention(p + ".self_attn", h, h, args.encoder_attention_heads, src_pad, False))
        x = sublayer(p, 1, "final_layer_norm", x, lambda h: feed_forward(p, h))
    if pre_norm:
        x = norm("encoder.layer_norm", x)

    decoder_embed = w.get("decoder.embed_tokens.weight", w["encoder.embed_tokens.weight"])
    tgt_pad = prev_output_tokens.eq(PAD)
    y = scale * decoder_embed[prev_output_tokens] + table[fairseq_positions(prev_output_tokens)]
    for i in range(args.decoder_layers):
        p = f"decoder.layers.{i}"
        heads = args.decoder_attention_heads
        y = sublayer(p, 0, "self_attn_layer_norm", y, lambda h: attention(p + ".self_attn", h, h, heads, tgt_pad, True))
        y = sublayer(p, 1, "encoder_attn_layer_norm", y,
                     lambda h: attention(p + ".encoder_attn", h, x, heads, src_pad, False))
        y = sublayer(p, 2, "final_layer_norm", y, lambda h: feed_forward(p, h))
    if pre_norm:
        y = norm("decoder.layer_norm", y)
    output = w.get("decoder.output_projection.weight", w.get("decoder.embed_out", decoder_embed))
    return y @ output.T


# ----------------------------------------------------------------------------------------------
# Building fairseq-format checkpoints

D_MODEL, HEADS, FFN, LAYERS = 16, 4, 32, 2


def fairseq_args(**overrides):
    args = argparse.Namespace(
        arch="transformer_wmt_en_de", task="translation", source_lang="en", target_lang="fr",
        encoder_embed_dim=D_MODEL, encoder_ffn_embed_dim=FFN, encoder_layers=LAYERS,
        encoder_attention_heads=HEADS, encoder_normalize_before=False, encoder_learned_pos=False,
        decoder_embed_dim=D_MODEL, decoder_ffn_embed_dim=FFN, decoder_layers=LAYERS,
        decoder_attention_heads=HEADS, decoder_normalize_before=False, decoder_learned_pos=False,
        dropout=0.1, attention_dropout=0.0, relu_dropout=0.0, share_all_embeddings=True,
        share_decoder_input_output_embed=True, max_source_positions=1024, max_target_positions=1024,
        adaptive_softmax_cutoff=None, no_token_positional_embeddings=False, left_pad_source="True",
    )
    for name, value in overrides.items():
        setattr(args, name, value)
    return args


def random_fairseq_state(src_vocab, tgt_vocab, naming, share_all, seed=0, dtype=torch.float32, pre_norm=False,
                         share_output=None):
    """A random state dict in fairseq names.

    naming "old": fused in_proj, encoder layer_norms.0/1, decoder layer_norms.0/1/2 (2018).
    naming "new": q_proj/k_proj/v_proj, named norms, decoder.output_projection when not shared.
    pre_norm: the final encoder.layer_norm and decoder.layer_norm too. share_output (default:
    share_all): no separate output projection (--share-decoder-input-output-embed).
    """
    share_output = share_all if share_output is None else share_output
    generator = torch.Generator().manual_seed(seed)
    randn = lambda *shape, scale=1.0: (torch.randn(*shape, generator=generator) * scale).to(dtype)
    state = {}

    def attention(prefix):
        if naming == "old":
            state[prefix + ".in_proj_weight"] = randn(3 * D_MODEL, D_MODEL, scale=D_MODEL ** -0.5)
            state[prefix + ".in_proj_bias"] = randn(3 * D_MODEL, scale=0.1)
        else:
            for p in ("q_proj", "k_proj", "v_proj"):
                state[f"{prefix}.{p}.weight"] = randn(D_MODEL, D_MODEL, scale=D_MODEL ** -0.5)
                state[f"{prefix}.{p}.bias"] = randn(D_MODEL, scale=0.1)
        state[prefix + ".out_proj.weight"] = randn(D_MODEL, D_MODEL, scale=D_MODEL ** -0.5)
        state[prefix + ".out_proj.bias"] = randn(D_MODEL, scale=0.1)

    def layer_norm(name):
        state[name + ".weight"] = 1 + randn(D_MODEL, scale=0.2)
        state[name + ".bias"] = randn(D_MODEL, scale=0.2)

    def feed_forward(prefix):
        state[prefix + ".fc1.weight"] = randn(FFN, D_MODEL, scale=D_MODEL ** -0.5)
        state[prefix + ".fc1.bias"] = randn(FFN, scale=0.1)
        state[prefix + ".fc2.weight"] = randn(D_MODEL, FFN, scale=FFN ** -0.5)
        state[prefix + ".fc2.bias"] = randn(D_MODEL, scale=0.1)

    encoder_embed = randn(src_vocab, D_MODEL, scale=D_MODEL ** -0.5)
    state["encoder.embed_tokens.weight"] = encoder_embed
    state["encoder.embed_positions._float_tensor"] = torch.zeros(1)
    state["encoder.version"] = torch.tensor([2.0])
    for i in range(LAYERS):
        p = f"encoder.layers.{i}"
        attention(p + ".self_attn")
        layer_norm(f"{p}.layer_norms.0" if naming == "old" else f"{p}.self_attn_layer_norm")
        feed_forward(p)
        layer_norm(f"{p}.layer_norms.1" if naming == "old" else f"{p}.final_layer_norm")
    state["decoder.embed_tokens.weight"] = encoder_embed if share_all else randn(tgt_vocab, D_MODEL, scale=D_MODEL ** -0.5)
    state["decoder.embed_positions._float_tensor"] = torch.zeros(1)
    state["decoder.version"] = torch.tensor([2.0])
    for i in range(LAYERS):
        p = f"decoder.layers.{i}"
        attention(p + ".self_attn")
        layer_norm(f"{p}.layer_norms.0" if naming == "old" else f"{p}.self_attn_layer_norm")
        attention(p + ".encoder_attn")
        layer_norm(f"{p}.layer_norms.1" if naming == "old" else f"{p}.encoder_attn_layer_norm")
        feed_forward(p)
        layer_norm(f"{p}.layer_norms.2" if naming == "old" else f"{p}.final_layer_norm")
    if pre_norm:
        layer_norm("encoder.layer_norm")
        layer_norm("decoder.layer_norm")
    if not share_output:
        name = "decoder.embed_out" if naming == "old" else "decoder.output_projection.weight"
        state[name] = randn(tgt_vocab, D_MODEL, scale=D_MODEL ** -0.5)
    return state


def write_fairseq_folder(folder, args, state, src_tokens, tgt_tokens, legacy_format=False, extra_state=None):
    folder.mkdir(parents=True, exist_ok=True)
    checkpoint = {
        "args": args, "model": state,
        "optimizer_history": [{"criterion_name": "LabelSmoothedCrossEntropyCriterion", "num_updates": 10}],
        "extra_state": extra_state or {},
    }
    torch.save(checkpoint, folder / "model.pt", _use_new_zipfile_serialization=not legacy_format)
    for lang, tokens in (("en", src_tokens), ("fr", tgt_tokens)):
        (folder / f"dict.{lang}.txt").write_text("".join(f"{t} {100 - i % 50}\n" for i, t in enumerate(tokens)))
    (folder / "bpecodes").write_text(BPECODES_TEXT)
    return folder


def padded_batch(sequences):
    width = max(len(s) for s in sequences)
    return torch.tensor([s + [PAD] * (width - len(s)) for s in sequences])


def assert_matches_reference(folder, model, state=None, args=None):
    """The model's logits equal reference_forward's on the weights and args of folder/model.pt
    (or on ``state`` and ``args`` when given)."""
    if state is None:
        checkpoint = torch.load(folder / "model.pt", weights_only=False)
        state, args = checkpoint["model"], checkpoint["args"]
    src = padded_batch([[9, 14, 30, 22, 7, EOS], [40, 11, EOS]])
    tgt = padded_batch([[9, 5, 17, 23, 8, EOS], [60, 6, EOS]])
    prev = padded_batch([[EOS, 9, 5, 17, 23, 8], [EOS, 60, 6]])  # fairseq: </s> then the target
    expected = reference_forward(state, args, src, prev)
    with torch.no_grad():
        # No use_cache argument on purpose: the loader must make plain forward passes causal.
        logits = model(input_ids=src, attention_mask=src.ne(PAD), decoder_input_ids=prev).logits
    real = tgt.ne(PAD)
    assert logits.shape == expected.shape
    assert_within_rounding(logits[real], expected[real])
