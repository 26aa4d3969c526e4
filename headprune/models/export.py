"""Save a pruned model so that plain transformers loads it, without headprune (issues #24, #33).

``save_pruned(model, tokenizer, folder)`` writes what ``save_pretrained`` writes (config.json with
``headprune_pruned_heads``, model.safetensors, generation_config.json), the tokenizer's files, a model card
(README.md) and beside them a modeling file of ours (``headprune/models/portable/modeling_headprune_<family>.py``)
with the helper module it imports (``headprune_common.py``), copied as they are: static text that imports only
torch and transformers, named in config.json's ``auto_map``. Then, on a machine without headprune,

    AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)                # every decoder-only family
    AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)   # the encoders
    AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)               # the translation models
    AutoModelForSpeechSeq2Seq.from_pretrained(folder, trust_remote_code=True)           # Whisper, Moonshine, ...
    AutoModel.from_pretrained(folder, trust_remote_code=True)                            # the base model (not pre-norm)

(``auto_map`` names every Auto class whose table lists the model's class, e.g. a multimodal wrapper's
AutoModelForMultimodalLM and AutoModelForImageTextToText) builds transformers' own class with each layer's
attentions cut to the heads the config keeps, so the saved shapes load, and gives the pruned model's outputs.
transformers copies the helper module with the modeling file (``dynamic_module_utils.get_relative_import_files``
follows ``from .headprune_common import``). The
config stays transformers' own (no ``AutoConfig`` entry): headprune's ``load_pruned_weights`` reads the same
folder as before, and ``from_config`` without ``trust_remote_code`` still builds transformers' class. Weights
are safetensors only.

Families exported (config.model_type -> modeling file): every decoder-only family the generic adapter serves
(``modeling_headprune_decoder.py`` with ``headprune_decoder.py`` and ``headprune_attention.py``: llama, mistral,
qwen2/3, gemma 2/3, gpt2, gpt_neox, ...; grouped-query attention, uneven kv groups after pruning, layers with no
heads), every encoder the generic encoder adapter serves (``modeling_headprune_encoder.py`` with
``headprune_encoder.py`` beside the decoder's files: bert, roberta, xlm-roberta, electra, distilbert, deberta-v2,
modernbert, camembert, mpnet, ...), every encoder-decoder the generic seq2seq adapter serves
(``modeling_headprune_seq2seq.py`` with the decoder's helper files: m2m_100, bart, mbart, marian, t5, mt5, umt5,
pegasus, ..., and headprune's ``PreNormTransformer``, fairseq's pre-norm transformer, rebuilt there from its config)
and ``fsmt`` (fairseq's post-norm transformer, ``modeling_headprune_fsmt.py``). The encoder-decoders are pruned in
all three attention types, each layer on its own.

Folders saved before issue #45 name ``modeling_headprune_bert.py`` or ``modeling_headprune_bart.py`` in their
``auto_map``: they carry their own copies of those files, so plain transformers still loads them, and headprune's
``load_pruned_weights`` builds transformers' class and prunes it by the config, never reading the folder's code.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from headprune.io.atomic import atomic_dir
from headprune.io.registry import Registry
from headprune.models.attention_types import AUDIO_SELF, DEC_SELF, ENC_DEC, ENC_SELF, TOWER_TYPES, VISION_SELF
from headprune.models.portable.headprune_common import AUTO_CLASSES

PORTABLE = Path(__file__).resolve().parent / "portable"  # the modeling files (package data)

# config.model_type -> the modeling file that serves it, for the families with an adapter of their own
REMOTE_FILES: Registry[Path] = Registry("exported model type", base=Path)
REMOTE_FILES.add("fsmt", PORTABLE / "modeling_headprune_fsmt.py")

# What the hub calls each Auto class's task (the card's pipeline_tag); AUTO_CLASSES: the Auto classes, in order
PIPELINE_TAGS = {"AutoModelForCausalLM": "text-generation", "AutoModelForMultimodalLM": "image-text-to-text",
                 "AutoModelForImageTextToText": "image-text-to-text",
                 "AutoModelForSequenceClassification": "text-classification",
                 "AutoModelForSeq2SeqLM": "translation", "AutoModelForSpeechSeq2Seq": "automatic-speech-recognition",
                 "AutoModel": "feature-extraction"}
ATTENTION_NAMES = {ENC_SELF: "encoder self-attention", ENC_DEC: "cross-attention",
                   DEC_SELF: "decoder self-attention", VISION_SELF: "vision tower self-attention",
                   AUDIO_SELF: "audio tower self-attention"}

DECODER_FILE = "modeling_headprune_decoder.py"  # every decoder-only family the generic adapter serves
SEQ2SEQ_FILE = "modeling_headprune_seq2seq.py"  # every encoder-decoder the generic seq2seq adapter serves
ENCODER_FILE = "modeling_headprune_encoder.py"  # every encoder the generic encoder adapter serves


def _modeling_name(model) -> str | None:
    """The modeling file of the adapter that serves ``model`` (it rebuilds what that adapter cut), None if none does
    or its family is not exported."""
    from headprune.models.families.decoder import DecoderAdapter
    from headprune.models.families.encoder import EncoderAdapter
    from headprune.models.families.seq2seq import Seq2SeqAdapter
    from headprune.models.heads import adapter_for

    try:
        adapter = adapter_for(model)
    except ValueError:  # no adapter at all
        return None
    generic = ((DecoderAdapter, DECODER_FILE), (EncoderAdapter, ENCODER_FILE), (Seq2SeqAdapter, SEQ2SEQ_FILE))
    for adapter_class, name in generic:
        if isinstance(adapter, adapter_class):
            return name
    return getattr(REMOTE_FILES.get(getattr(model.config, "model_type", None), None), "name", None)


def remote_file(model) -> Path:
    """Our modeling file for ``model``'s type; a ValueError for a family that is not exported."""
    model_type = getattr(model.config, "model_type", None)
    if _modeling_name(model) is None:
        raise ValueError(f"a pruned {type(model).__name__} (model type {model_type!r}) cannot be exported for plain "
                         "transformers; exported: the model types the generic decoder, encoder and encoder-decoder "
                         f"adapters serve (docs/models.md) and {', '.join(sorted(REMOTE_FILES))}")
    return PORTABLE / _modeling_name(model)


def sibling_imports(source: str) -> list[str]:
    """The module files a modeling file imports from its own folder (``from .headprune_common import ...``), found
    as transformers' dynamic module loader finds them, which copies them with it."""
    return sorted({f"{name}.py" for name in re.findall(r"^\s*from\s+\.(\S+)\s+import", source, re.MULTILINE)})


def auto_classes(cls) -> list[str]:
    """Every Auto class that builds ``cls`` or (headprune's own classes, e.g. PreNormTransformer) the transformers
    class it extends, as transformers' Auto tables say, in ``AUTO_CLASSES``' order."""
    from transformers.models.auto import modeling_auto

    for klass in cls.__mro__:
        autos = [auto for auto, table in AUTO_CLASSES.items()
                 if klass.__name__ in getattr(modeling_auto, table).values()]
        if autos:
            return autos
    return []


def auto_class(cls) -> str | None:
    """The first of ``auto_classes(cls)``, None where no Auto class builds it."""
    return next(iter(auto_classes(cls)), None)


def auto_map(model, source: str) -> dict[str, str]:
    """config.json's ``auto_map``: every Auto class of ``model``'s class (the task's: AutoModelForSpeechSeq2Seq for
    Whisper's, ...), then AutoModel for its base model, each pointing at our subclass ``Pruned<class>`` in the
    modeling file whose text is ``source``."""
    module = _modeling_name(model).removesuffix(".py")
    made_on_demand = module == DECODER_FILE.removesuffix(".py")  # Pruned<class> for every class of the registry
    made_on_demand = made_on_demand or module == SEQ2SEQ_FILE.removesuffix(".py")
    made_on_demand = made_on_demand or module == ENCODER_FILE.removesuffix(".py")
    classes = [type(model)]
    # The base model only of transformers' own classes: headprune's PreNormTransformer keeps its source
    # vocabulary above M2M100's base model, which would not load alone.
    if type(model).__module__.startswith("transformers."):
        classes.append(type(model.base_model))
    entries = {}
    for cls in classes:
        name = cls.__name__
        autos = [auto for auto in auto_classes(cls) if auto not in entries]
        if autos and not made_on_demand and not re.search(rf"^class Pruned{name}\(", source, re.MULTILINE):
            raise ValueError(f"{module}.py has no Pruned{name}: a pruned {name} cannot be exported")
        entries.update({auto: f"{module}.Pruned{name}" for auto in autos})
    if not entries:
        raise ValueError(f"no Auto class loads a {type(model).__name__}")
    return entries


def save_pruned(model, tokenizer, folder, *, base_model: str | None = None, criterion: str | None = None,
                masking=None, curve_point: dict | None = None, layout_line: str | None = None,
                recovery: dict | None = None) -> Path:
    """Write ``model`` (pruned or not) and ``tokenizer`` (or None) to ``folder`` so that plain transformers loads
    it with ``trust_remote_code=True`` (see the module docstring); headprune's ``load_pruned_weights`` reads it
    too. Written to a temporary sibling and renamed, so a half-written folder is never seen. Returns the folder.

    The model card (README.md) says which heads were removed and, where the caller gives them, from which model
    (``base_model``: a hub id or a path; default the model's ``name_or_path``), by which ``criterion`` and
    ``masking`` (a config word or a mode of ``headprune.models.masking``) they were chosen, and the pruning
    curve's point it was cut at (``curve_point``: its row of pruning.csv, with ``percent_pruned``,
    ``heads_pruned``, ``score`` and ``metric``, and where known ``unpruned_score`` and ``data``, what it was scored
    on); ``layout_line``: what it says of the pruning layout (``headprune.analyses.layouts``: a layout's
    ``card_line``); ``recovery``: how it was trained after pruning (``headprune.training.recovery``'s record, with
    the scores before and after where the caller adds them).

    >>> from transformers import AutoModelForCausalLM
    >>> _ = remove_heads(model, [("dec_self", 0, 1)])
    >>> folder = save_pruned(model, tokenizer, "tiny-shared", criterion="importance")
    >>> sorted(p.name for p in folder.glob("*.py"))
    ['headprune_attention.py', 'headprune_common.py', 'headprune_decoder.py', 'modeling_headprune_decoder.py']
    >>> plain = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)  # no headprune needed
    >>> plain.model.layers[0].self_attn.q_proj.out_features  # 3 of 4 heads of 8 dims
    24
    """
    from headprune.models.prune import pruned_heads

    folder = Path(folder)
    modeling_file = remote_file(model)
    towers_cut = [t for t, layers in pruned_heads(model).items() if t in TOWER_TYPES.values() and any(layers.values())]
    if towers_cut:  # the modeling file rebuilds the language model's shapes only: plain transformers would not load
        raise ValueError(f"heads of {', '.join(towers_cut)} were removed: the exported modeling file rebuilds pruned "
                         "language-model heads only (headprune's load_model loads this model; save_pretrained it)")
    source = modeling_file.read_text()
    entries = auto_map(model, source)
    code_files = [modeling_file.name, *sibling_imports(source)]
    card = model_card(model, entries, folder.name, code_files, base_model=base_model, criterion=criterion,
                      masking=masking, curve_point=curve_point, layout_line=layout_line, recovery=recovery)
    with atomic_dir(folder) as staging:
        # safetensors (transformers 5 writes nothing else), in the names the model has: a pruned folder loads by
        # load_state_dict or as remote code, neither of which renames legacy checkpoint keys (GPT-NeoX embed_out)
        model.save_pretrained(staging, save_original_format=False)
        if tokenizer is not None:
            tokenizer.save_pretrained(staging)
        for name in code_files:
            shutil.copyfile(PORTABLE / name, staging / name)
        config_path = staging / "config.json"
        config = json.loads(config_path.read_text())
        config["auto_map"] = entries
        config.setdefault("headprune_pruned_heads", {})
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        (staging / "README.md").write_text(card)
    return folder


# --- The model card ------------------------------------------------------------------------------------

def hub_id(name) -> str | None:
    """``name`` if it reads as a Hugging Face hub id ("gpt2", "facebook/wmt19-en-de") and is no local path."""
    name = str(name or "")
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?", name) or Path(name).exists():
        return None
    return None if name.endswith((".tar.gz", ".tar.bz2", ".tgz")) else name


def transformers_class(cls):
    """The first of ``cls`` and its bases that is transformers' own (PreNormTransformer: M2M100's)."""
    return next(klass for klass in cls.__mro__ if klass.__module__.startswith("transformers."))


def heads_table(model) -> tuple[list[str], int, int]:
    """The card's table of heads per attention type and layer (rows of markdown), heads removed, heads in all."""
    from headprune.models.heads import head_shape
    from headprune.models.prune import pruned_heads

    removed_heads = pruned_heads(model)
    rows = ["| attention | layer | heads kept | heads removed (0-based) |", "|---|---|---|---|"]
    removed = total = 0
    for attn_type, (layers, heads) in head_shape(model).items():
        for layer in range(layers):
            gone = sorted(removed_heads.get(attn_type, {}).get(layer, []))
            removed, total = removed + len(gone), total + heads
            rows.append(f"| {ATTENTION_NAMES[attn_type]} ({attn_type}) | {layer} | {heads - len(gone)} of {heads} | "
                        f"{', '.join(map(str, gone)) or '-'} |")
    return rows, removed, total


def model_card(model, entries: dict[str, str], name: str, code_files: list[str], *, base_model=None, criterion=None,
               masking=None, curve_point=None, layout_line: str | None = None, stock: bool = False,
               same_size: str | None = None, parameters: int | None = None, recovery: dict | None = None) -> str:
    """README.md for the saved folder, as the hub's model cards are written: YAML front matter, then what the
    model is, how to load it, and what was pruned and how. ``stock``: transformers' own class and config with
    fewer heads (``headprune.models.stock``), loaded without remote code; ``layout_line``: the pruning layout's line.
    ``same_size`` (with ``stock``): a same-size stock export (every head in place, the removed heads' weights
    zeroed), the string why no smaller stock export exists ("" where one does); ``parameters``: the saved model's
    count where it is not ``model``'s."""
    import transformers

    source = base_model or getattr(model, "name_or_path", None) or getattr(model.config, "_name_or_path", None)
    hub = hub_id(source)
    auto = next(iter(entries))  # the model's own Auto class (the base model's comes second)
    table, removed, total = heads_table(model)
    if parameters is None:
        parameters = sum(p.numel() for p in model.parameters())
    zeroed = stock and same_size is not None
    built = transformers_class(type(model)).__name__

    front = ["---", "library_name: transformers"] + ([f"base_model: {hub}"] if hub else [])
    front += ["tags:", "- headprune", "- attention-head-pruning", "- pruned", f"- {model.config.model_type}",
              *([] if stock else ["- custom_code"]), f"pipeline_tag: {PIPELINE_TAGS[auto]}", "---", ""]
    how = "switched off by zeroing their weights" if zeroed else "removed physically"
    about = (f"{f'`{source}`' if source else 'A model'} ({type(model).__name__}) with {removed} of its {total} "
             f"attention heads {how} with headprune (Michel, Levy and Neubig 2019, \"Are Sixteen Heads "
             f"Really Better than One?\"): {parameters:,} parameters.")
    remote = "" if stock else ", trust_remote_code=True"
    loading = [
        "```python", f"from transformers import {auto}, AutoTokenizer", "",
        f'model = {auto}.from_pretrained("{name}"{remote})',
        f'tokenizer = AutoTokenizer.from_pretrained("{name}")', "```", ""]
    if zeroed:
        smaller = (f"No smaller stock checkpoint: {same_size}; the remote-code export (`headprune.save_pruned`; "
                   "`headprune prune --layout free` without `--stock`) is smaller." if same_size else
                   "A smaller stock checkpoint of this layout exists (`headprune prune --layout uniform`).")
        loading += [
            f"A same-size stock checkpoint: transformers' own `{built}` with its original config, no remote code and "
            "no headprune needed; it loads wherever a stock checkpoint loads (vLLM, TGI, plain transformers). The "
            "removed heads' query, key and value weights (a key/value head once no kept head reads it) and their "
            "columns of the output projection are zero, so each contributes exactly nothing and the model computes "
            f"the pruned model's outputs. It is {same_size_line(removed, total)}. {smaller}"]
    elif stock:
        loading += [
            f"A stock checkpoint: transformers' own `{built}` with fewer heads in its config (every layer keeps the "
            "same number of heads: a uniform layout), no remote code and no headprune needed."]
    else:
        loading += [
            f"`trust_remote_code=True` runs {' and '.join(f'`{f}`' for f in code_files)} from this folder: they import "
            f"only torch and transformers (saved with transformers {transformers.__version__}), build transformers' "
            f"own `{built}` and cut each attention to the heads kept, so that the weights load. Without it "
            "transformers builds its class with every head and refuses the weights (a size mismatch). headprune loads "
            "it too: `headprune.load_model(path)`."]
    pruned = [layout_line] if layout_line else []
    pruned += [f"- {'zeroed' if zeroed else 'removed'}: {removed} of {total} heads, per attention type and layer in "
               "the table below",
               f"- criterion: {_criterion_text(criterion)}"]
    if masking is not None:
        word = getattr(masking, "word", masking)  # a config word or a headprune.models.masking mode
        from headprune.models.masking import MODES

        mode = MODES.get(str(word), None)
        pruned.append(f"- masking while scoring: {mode.summary if mode is not None else word}")
    compensation = getattr(model.config, "headprune_bias_compensation", None)
    if compensation:
        count = sum(len(heads) for layers in compensation.get("heads", {}).values() for heads in layers.values())
        pruned.append(f"- bias compensation: {count} removed heads' {compensation.get('kind', 'constant')} output "
                      "vectors are kept in their layers' output-projection biases (FLAP), so the model computes what "
                      "the full one does with those heads replaced by their constants")
    if curve_point:
        pruned.append(f"- pruning curve: {_curve_point_text(curve_point, removed, total)}")
    if recovery:
        pruned.append(f"- {_recovery_text(recovery)}")
    lines = [f"# {name}", "", about, "", "## How to load", "", *loading, "", "## What was pruned", "", *pruned, "",
             *table, ""]
    return "\n".join(front + lines)


def _criterion_text(criterion) -> str:
    if criterion is None:
        return "none recorded (the heads were named by hand)"
    return f"`{criterion}` (its name in headprune: `headprune.CRITERIA`)"


def _curve_point_text(point: dict, removed: int, total: int) -> str:
    percent = point.get("percent_pruned", 100.0 * removed / total if total else 0.0)
    heads = int(point.get("heads_pruned", removed))
    text = f"cut at {round(percent, 1):g}% of the heads ({heads} of {total})"
    if point.get("score") is not None:
        text += f": {point.get('metric', 'score')} {point['score']:.4g}"
        if point.get("unpruned_score") is not None:
            text += f" (unpruned: {point['unpruned_score']:.4g})"
    if point.get("data"):
        text += f", scored on {point['data']}"
    return text + "."


def _recovery_text(record: dict) -> str:
    """The card's line on how the pruned model was trained after pruning (headprune.training.recovery)."""
    text = f"recovered: {record['method']}, {record['steps']} steps on {record.get('train_items', '?')} training items"
    text += f" ({record['data']})" if record.get("data") else ""
    if record.get("score_pruned") is not None and record.get("score_recovered") is not None:
        text += (f"; {record.get('metric', 'score')} {record['score_pruned']:.4g} pruned, {record['score_recovered']:.4g}"
                 " recovered")
        if record.get("score_unpruned") is not None:
            text += f" (unpruned: {record['score_unpruned']:.4g})"
    return text + ("; none of them a test item." if record.get("test_items_excluded") else ".")


def same_size_line(removed: int, total: int) -> str:
    """What a same-size stock export is, for the card and the command's log."""
    return (f"the same size as the original: every head kept in place, {removed} of {total} heads' weights zeroed "
            "(they contribute nothing), so it computes the pruned model but gives no speed or memory gain")
