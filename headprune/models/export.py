"""Save a pruned model so that plain transformers loads it, without headprune (issue #24).

``save_pruned(model, tokenizer, folder)`` writes what ``save_pretrained`` writes (config.json with
``headprune_pruned_heads``, model.safetensors), the tokenizer's files, and beside them a modeling file of
ours (``headprune/models/remote/modeling_headprune_<family>.py``, copied as it is: static text that imports
only torch and transformers) named in config.json's ``auto_map``. Then, on a machine without headprune,

    AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)               # Llama, Mistral, Qwen2, GPT-2
    AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)  # BERT family
    AutoModel.from_pretrained(folder, trust_remote_code=True)                           # the base model of either

builds transformers' own class with each layer's attention cut to the heads the config keeps, so the saved
shapes load, and gives the pruned model's outputs. The config stays transformers' own (no ``AutoConfig``
entry): headprune's ``load_pruned_weights`` reads the same folder as before, and ``from_config`` without
``trust_remote_code`` still builds transformers' class. Weights are safetensors only.

Families exported: ``llama`` (llama, mistral, qwen2: grouped-query attention, uneven kv groups after
pruning, layers with no heads), ``gpt2``, and the classification encoders ``bert``, ``roberta`` (roberta,
xlm-roberta), ``electra``, ``distilbert``, ``deberta_v2`` (their ``*ForSequenceClassification`` and base
``*Model``). Not exported, refused with a ValueError (``load_pruned_weights`` still reads them): the
translation models, FSMT (fairseq's post-norm transformer), headprune's pre-norm ``PreNormTransformer``
(a class of headprune's own, ``headprune.models.prenorm``, that plain transformers does not have), and
transformers' Marian, BART, mBART and M2M100/NLLB. Their pruned attentions run with the encoder-decoder
cache, cross-attention and (FSMT) time-major layouts, and each would need a modeling file of its own; the
study loads them with headprune anyway (``headprune.models.loading``).
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from headprune.io.atomic import atomic_dir

REMOTE = Path(__file__).resolve().parent / "remote"  # the modeling files (package data)

# config.model_type -> the modeling file that serves it
REMOTE_FILES = {
    "llama": "modeling_headprune_llama.py", "mistral": "modeling_headprune_llama.py",
    "qwen2": "modeling_headprune_llama.py",
    "gpt2": "modeling_headprune_gpt2.py",
    "bert": "modeling_headprune_bert.py", "roberta": "modeling_headprune_bert.py",
    "xlm-roberta": "modeling_headprune_bert.py", "electra": "modeling_headprune_bert.py",
    "distilbert": "modeling_headprune_bert.py", "deberta-v2": "modeling_headprune_bert.py",
}

# How a class name ends -> the Auto class that loads it (most specific first)
AUTO_CLASSES = (("ForCausalLM", "AutoModelForCausalLM"), ("LMHeadModel", "AutoModelForCausalLM"),
                ("ForSequenceClassification", "AutoModelForSequenceClassification"), ("Model", "AutoModel"))


def remote_file(model) -> Path:
    """Our modeling file for ``model``'s type; a ValueError for a family that is not exported."""
    model_type = getattr(model.config, "model_type", None)
    if model_type not in REMOTE_FILES:
        raise ValueError(f"a pruned {type(model).__name__} (model type {model_type!r}) cannot be exported for plain "
                         f"transformers; exported model types: {', '.join(sorted(REMOTE_FILES))}")
    return REMOTE / REMOTE_FILES[model_type]


def auto_map(model, source: str) -> dict[str, str]:
    """config.json's ``auto_map``: the Auto class of ``model``'s class, and AutoModel for its base model,
    each pointing at our subclass ``Pruned<class>`` in the modeling file whose text is ``source``."""
    module = REMOTE_FILES[model.config.model_type].removesuffix(".py")
    entries = {}
    for cls in (type(model), type(model.base_model)):
        name = cls.__name__
        auto = next((a for suffix, a in AUTO_CLASSES if name.endswith(suffix)), None)
        if auto is None or auto in entries:
            continue
        if not re.search(rf"^class Pruned{name}\(", source, re.MULTILINE):
            raise ValueError(f"{module}.py has no Pruned{name}: a pruned {name} cannot be exported")
        entries[auto] = f"{module}.Pruned{name}"
    if not entries:
        raise ValueError(f"no Auto class loads a {type(model).__name__}")
    return entries


def save_pruned(model, tokenizer, folder) -> Path:
    """Write ``model`` (pruned or not) and ``tokenizer`` (or None) to ``folder`` so that plain transformers loads
    it with ``trust_remote_code=True`` (see the module docstring); headprune's ``load_pruned_weights`` reads it
    too. Written to a temporary sibling and renamed, so a half-written folder is never seen. Returns the folder.

    >>> from transformers import AutoModelForCausalLM
    >>> _ = remove_heads(model, [("dec_self", 0, 1)])
    >>> folder = save_pruned(model, tokenizer, "tiny-shared")
    >>> sorted(p.name for p in folder.glob("*.py"))
    ['modeling_headprune_llama.py']
    >>> plain = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)  # no headprune needed
    >>> plain.model.layers[0].self_attn.q_proj.out_features  # 3 of 4 heads of 8 dims
    24
    """
    folder = Path(folder)
    source_file = remote_file(model)
    source = source_file.read_text()
    entries = auto_map(model, source)
    with atomic_dir(folder) as staging:
        model.save_pretrained(staging)  # safetensors: transformers 5 writes nothing else
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        shutil.copyfile(source_file, staging / source_file.name)
        config_path = staging / "config.json"
        config = json.loads(config_path.read_text())
        config["auto_map"] = entries
        config.setdefault("headprune_pruned_heads", {})
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return folder
