"""Load the study's models: fairseq translation checkpoints, transformers encoder-decoders (Marian, BART,
M2M100/NLLB), sequence classifiers (BERT, RoBERTa, ...) and causal LMs (GPT-2, Llama, Mistral, Qwen2).

Nothing here unpickles a file from the internet: fairseq checkpoints go through the
allow-list unpickler in ``fairseq/unpickling.py``, and Hugging Face models are read from
safetensors only (``use_safetensors=True``; a folder without them is refused).
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch

from headprune.io.atomic import atomic_dir
from headprune.io.registry import Registry
from headprune.models.prune import load_pruned_weights

# What a model download needs: its config, safetensors weights (sharded ones with their index) and the
# tokenizer's files (WordPiece vocab.txt, BPE vocab.json + merges.txt, SentencePiece *.model / *.spm);
# never *.bin / *.pt / *.ckpt pickles.
HUB_ALLOW_PATTERNS = ["config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
                      "vocab.txt", "vocab.json", "merges.txt", "tokenizer.json", "tokenizer_config.json",
                      "special_tokens_map.json", "added_tokens.json", "*.model", "*.spm"]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device(requested: str = "auto") -> torch.device:
    """"auto" is the job's GPU, else the CPU; "cuda" is the job's GPU; "cpu", "cuda:1" are taken as given.

    Which GPU is the job's: under SLURM (or with CUDA_VISIBLE_DEVICES set) the one visible;
    on a workstation one free GPU that this process claims (headprune.models.gpus: a file lock per GPU,
    CUDA_VISIBLE_DEVICES set before CUDA starts), so parallel jobs never share a device.
    """
    if requested in ("auto", "cuda"):
        from headprune.models.gpus import claim_gpus, job_gpus

        claim_gpus(max(job_gpus(), 1) if requested == "cuda" else None)
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def load_translation(path, src_lang: str = "en", tgt_lang: str = "fr", device="cpu"):
    """(model, tokenizer) from a fairseq tarball/folder or a saved Hugging Face folder of a converted one
    (FSMT for fairseq's post-norm transformer, headprune.models.prenorm's M2M100 for the pre-norm one)."""
    from transformers import AutoConfig, FSMTTokenizer

    from headprune.models.fairseq import is_pre_norm, load_fairseq_translation_model, model_class_for

    path = Path(path)
    if path.is_dir() and (path / "config.json").exists():
        model = load_pruned_weights(model_class_for(AutoConfig.from_pretrained(path)), path)
        tokenizer = FSMTTokenizer.from_pretrained(path)
        if not is_pre_norm(model.config):
            model.config.use_cache = False  # see fairseq.load_fairseq_translation_model
    else:
        model, tokenizer = load_fairseq_translation_model(path, src_lang=src_lang, tgt_lang=tgt_lang)
    return model.to(device).eval(), tokenizer


def convert_translation_checkpoint(source, dest, src_lang: str = "en", tgt_lang: str = "fr") -> Path:
    """Convert a fairseq tarball/folder ONCE into a transformers model folder (config.json,
    model.safetensors, the tokenizer's files) that every later job loads in a fraction of a second:
    no unpickling, checking or converting per job, and no random initialization (load_translation).
    Written to a temporary sibling and renamed, so a half-written folder is never seen."""
    from headprune.models.fairseq import load_fairseq_translation_model

    dest = Path(dest)
    model, tokenizer = load_fairseq_translation_model(source, src_lang=src_lang, tgt_lang=tgt_lang)
    with atomic_dir(dest) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
    return dest


def _require_safetensors(path: Path):
    if not any(path.glob("*.safetensors")):
        raise FileNotFoundError(f"{path}: no *.safetensors weights (pickled weights are not loaded)")


def converted_from_fairseq(path) -> bool:
    """A fairseq tarball/folder, or a model folder converted from one (FSMT or headprune's pre-norm M2M100,
    both with FSMT's tokenizer files), rather than a transformers model of its own."""
    import json

    path = Path(path)
    if not (path / "config.json").exists():
        return True
    return json.loads((path / "config.json").read_text()).get("model_type") == "fsmt" or (path / "vocab-src.json").exists()


def load_tokenizer(path):
    from transformers import AutoTokenizer, FSMTTokenizer

    return (FSMTTokenizer if converted_from_fairseq(path) else AutoTokenizer).from_pretrained(path)


def placement(device, gpus: int = 1) -> dict:
    """from_pretrained's arguments that put a model on ``device``, or with ``gpus`` > 1 spread its layers
    over that many GPUs (the job's: CUDA_VISIBLE_DEVICES), balanced by memory (accelerate's "balanced")."""
    device = torch.device(device)
    if gpus > 1 and device.type == "cuda":
        if torch.cuda.device_count() < gpus:
            raise RuntimeError(f"the model asks for {gpus} GPUs (models.<study>.resources) but the job sees "
                               f"{torch.cuda.device_count()}")
        return {"device_map": "balanced"}
    return {"device_map": {"": device}}


def language_model_class(path):
    """The Auto class that loads the folder's language model: AutoModelForCausalLM for the types of transformers'
    causal-LM table (Gemma 3's multimodal class among them), AutoModelForMultimodalLM for the other wrappers of a
    language model (LLaVA, Qwen2.5-VL, Mistral 3, Qwen2-Audio, Voxtral: headprune studies their language model), the
    seq2seq Auto classes for the audio wrappers only their tables list (AudioFlamingo 3)."""
    import json

    import transformers
    from transformers.models.auto import modeling_auto

    model_type = json.loads((Path(path) / "config.json").read_text()).get("model_type")
    # the first table that lists the type: the seq2seq tables hold audio wrappers no other table lists (AudioFlamingo 3)
    for table, auto_class in (("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "AutoModelForCausalLM"),
                              ("MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES", "AutoModelForMultimodalLM"),
                              ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "AutoModelForSeq2SeqLM"),
                              ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "AutoModelForSpeechSeq2Seq")):
        if model_type in getattr(modeling_auto, table):
            return getattr(transformers, auto_class)
    return transformers.AutoModelForCausalLM


def load_causal_lm(path, device="cpu", dtype: str = "float32", gpus: int = 1, towers=None):
    """(causal LM, tokenizer) from a model folder with safetensors weights; eager attention (the backend that
    returns attention weights: entropy, confidence). A multimodal wrapper loads in its own class
    (``language_model_class``); its language model's heads are the ones studied, and with ``towers``
    (("vision",), ("audio",)) its towers' heads too (``headprune.models.families.decoder.study_towers``; None: as
    the folder's config says, which a model saved with pruned tower heads keeps)."""
    from transformers import AutoTokenizer

    path = Path(path)
    _require_safetensors(path)
    model = load_pruned_weights(language_model_class(path), path, use_safetensors=True, attn_implementation="eager",
                                dtype=DTYPES[dtype], **placement(device, gpus))
    if towers is not None:
        from headprune.models.families.decoder import study_towers

        study_towers(model, towers)
    return model.eval(), AutoTokenizer.from_pretrained(path)


@contextlib.contextmanager
def attention_backend(model, name: str):
    """Run the model in attention backend ``name`` ("eager", "sdpa") while the context is open, then switch
    back. The loaders load eager attention (the backend that returns attention weights); an evaluation
    that needs none runs faster in sdpa: on a CPU a Llama-layout LM decodes 2-6 times as fast (eager
    attention copies every key/value head once per query head at every step). A model whose class has no
    sdpa (``_supports_sdpa`` false) stays as it is."""
    from headprune.models.portable.headprune_attention import backend_of, set_backend

    before = backend_of(model)  # a pruned decoder stays under headprune_attention in either backend
    supported = name == "eager" or getattr(model, f"_supports_{name}", False)
    switch = before != name and supported and hasattr(model, "set_attn_implementation")
    if switch:
        set_backend(model, name)
    try:
        yield
    finally:
        if switch:
            set_backend(model, before)


def load_seq2seq(path, device="cpu", dtype: str = "float32", gpus: int = 1, src_code=None, tgt_code=None,
                 source_prefix: str | None = None, languages: tuple[str, str] | None = None):
    """(encoder-decoder, tokenizer) of transformers' own translation models (Marian, BART/mBART, M2M100/NLLB, T5).

    ``src_code``/``tgt_code`` are the tokenizer's language codes of the multilingual ones (NLLB:
    eng_Latn, fra_Latn): the source side is tagged with the first, the target forced to start with the second.
    ``source_prefix`` is put before every source sentence (T5's "translate English to French: "); None: the one the
    checkpoint's config declares for ``languages`` (``task_specific_params["translation_en_to_fr"]["prefix"]``, as
    transformers' translation pipeline reads it), else none.
    """
    from transformers import AutoTokenizer

    path = Path(path)
    _require_safetensors(path)
    model = load_pruned_weights(seq2seq_class(path), path, use_safetensors=True, attn_implementation="eager",
                                dtype=DTYPES[dtype], **placement(device, gpus))
    tokenizer = AutoTokenizer.from_pretrained(path, **({"src_lang": src_code} if src_code else {}))
    if tgt_code:
        model.generation_config.forced_bos_token_id = tokenizer.convert_tokens_to_ids(tgt_code)
    if source_prefix is None and languages is not None:
        task = (getattr(model.config, "task_specific_params", None) or {}).get("translation_{}_to_{}".format(*languages))
        source_prefix = (task or {}).get("prefix")
    if source_prefix:
        tokenizer = PrefixedSources(tokenizer, source_prefix)
    return model.eval(), tokenizer


class PrefixedSources:
    """A tokenizer that puts ``prefix`` before every source text it is called with (its first argument; targets come
    as ``text_target``) and is the wrapped tokenizer in everything else (decoding, saving, special tokens)."""

    def __init__(self, tokenizer, prefix: str):
        self.__dict__["tokenizer"], self.__dict__["prefix"] = tokenizer, prefix

    def __call__(self, text=None, *args, **kwargs):
        if isinstance(text, str):
            text = self.prefix + text
        elif text is not None:
            text = [self.prefix + t for t in text]
        return self.tokenizer(text, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.__dict__["tokenizer"], name)

    def __len__(self):
        return len(self.tokenizer)


def seq2seq_class(path):
    """The Auto class an encoder-decoder folder loads with: AutoModelForSpeechSeq2Seq for a speech-to-text model
    (Whisper), else AutoModelForSeq2SeqLM."""
    import json

    import transformers
    from transformers.models.auto import modeling_auto

    config = json.loads((Path(path) / "config.json").read_text())
    speech = config.get("model_type") in modeling_auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES and \
        config.get("model_type") not in modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
    return transformers.AutoModelForSpeechSeq2Seq if speech else transformers.AutoModelForSeq2SeqLM


def load_classifier(path, device="cpu"):
    """(sequence classifier, tokenizer) from a Hugging Face folder with safetensors weights."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = Path(path)
    _require_safetensors(path)
    # eager attention: the only backend that returns attention weights (entropy, confidence)
    model = load_pruned_weights(AutoModelForSequenceClassification, path, use_safetensors=True,
                                attn_implementation="eager")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model.config.sep_token_id = tokenizer.sep_token_id  # [SEP] keys are left out of head confidence
    return model.to(device).eval(), tokenizer


def fetch_pretrained(source: dict, dest) -> Path:
    """Put a pretrained encoder (bert-base-uncased) in ``dest``.

    ``{"hub": "bert-base-uncased", "revision": ...}`` downloads safetensors and
    tokenizer files from the Hugging Face hub; ``{"url": ..., "sha256": ...}``
    fetches a .tar.gz of a model folder (the demo's tiny BERT) and extracts it safely.
    """
    from headprune.io.download import fetch
    from headprune.models.fairseq import safe_extract

    dest = Path(dest)
    if "hub" in source:
        from huggingface_hub import snapshot_download

        with atomic_dir(dest) as staging:  # a download cut short leaves no half-filled folder
            snapshot_download(repo_id=source["hub"], revision=source.get("revision"), local_dir=staging,
                              allow_patterns=HUB_ALLOW_PATTERNS)
    else:
        archive = fetch(source["url"], dest.with_name(dest.name + ".tar.gz"), source.get("sha256"))
        with atomic_dir(dest) as staging:
            extracted = safe_extract(archive, staging)
            if extracted != staging:  # the archive's single top-level folder is the model folder: its files go up
                top = extracted.rename(staging / f".top-level-{os.getpid()}")  # whatever names it holds
                for item in top.iterdir():
                    item.rename(staging / item.name)
                top.rmdir()
    if not any(dest.glob("*.safetensors")):
        raise FileNotFoundError(f"{dest}: the pretrained model has no *.safetensors weights")
    return dest


# --- one model by name, for the public API and the command line ------------------------------------------

# A kind of model (``guess_kind``'s answer, or a study kind's ``model_kind``) -> how ``load_model`` loads it:
# loader(path, device, dtype=, src_lang=, tgt_lang=, towers=) -> (model, tokenizer)
LOADERS = Registry("model kind", check=callable)


def model_folder(source, revision: str | None = None) -> Path:
    """A local model folder or fairseq tarball as it is; anything else is taken for a Hugging Face hub id
    ("gpt2", "org/name") and its safetensors, config and tokenizer files downloaded to the hub cache."""
    path = Path(source).expanduser()
    if path.exists():
        return path
    name = str(source)
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".pt")):
        raise FileNotFoundError(f"{source}: no such file or folder")
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id=name, revision=revision, allow_patterns=HUB_ALLOW_PATTERNS))


def guess_kind(path) -> str:
    """What a model folder holds: "language_modeling" (a causal LM), "classification" (a sequence
    classifier or another encoder) or "translation" (an encoder-decoder, a fairseq tarball/folder or a
    folder converted from one), from its config.json's architectures and model_type.

    >>> guess_kind("tiny")  # the README's tiny Llama
    'language_modeling'
    """
    import json

    path = Path(path)
    if converted_from_fairseq(path):
        return "translation"
    from transformers.models.auto import modeling_auto

    config = json.loads((path / "config.json").read_text())
    encoder_decoder = bool(config.get("is_encoder_decoder"))
    for architecture in config.get("architectures") or []:
        kind = _kind_of_architecture(architecture, encoder_decoder)
        if kind is not None:
            return kind
    model_type = config.get("model_type")
    if encoder_decoder:
        return "translation"
    # transformers' tables: a causal LM (not an encoder that can also decode: those are masked LMs too), or a
    # language model wrapped with a vision or audio tower
    causal = model_type in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and \
        model_type not in modeling_auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES
    if causal or model_type in modeling_auto.MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES:
        return "language_modeling"
    if model_type in modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES or \
            model_type in modeling_auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES:
        return "language_modeling"  # listed there, yet not an encoder-decoder: a language model with an audio tower
    return "classification"


# transformers' class tables, in the order an architecture is looked up: a class several list takes the first.
# The seq2seq tables also list decoder-only LMs with an audio tower (Qwen2-Audio, Voxtral, AudioFlamingo 3): a
# generating class (GENERATES) is a translation model where its config says it is an encoder-decoder, else a
# language model.
GENERATES = None
_ARCHITECTURE_TABLES = (
    ("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES", "classification"),
    ("MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES", GENERATES),
    ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", GENERATES),
    ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", GENERATES),
    ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", GENERATES),
    ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "classification"),
    ("MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES", "classification"),
)


def _kind_of_architecture(architecture: str, encoder_decoder: bool) -> str | None:
    """The kind of model a config.json's architecture (a transformers class name) is, from transformers' tables;
    None for a class no table lists (a base model: then the model type decides)."""
    from transformers.models.auto import modeling_auto

    for table, kind in _ARCHITECTURE_TABLES:
        if any(architecture in _names(value) for value in getattr(modeling_auto, table, {}).values()):
            if kind is GENERATES:  # the config says which of the two a generating model is
                return "translation" if encoder_decoder else "language_modeling"
            return kind
    if architecture.endswith("ForSequenceClassification"):  # a class of remote code
        return "classification"
    if architecture.endswith(("ForCausalLM", "LMHeadModel")):
        return "language_modeling"
    return None


def _names(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


# Config entries of an encoder-decoder's layer and head counts per stack, the first found first (BART's, T5's)
STACK_COUNTS = {"encoder": (("encoder_layers", "num_layers"), ("encoder_attention_heads", "num_heads")),
                "decoder": (("decoder_layers", "num_decoder_layers", "num_layers"),
                            ("decoder_attention_heads", "num_heads"))}


def dropped_heads(source, kind: str) -> str | None:
    """Why loading ``source`` (a model folder or hub id) as ``kind`` would study part of its model, in one line, or
    None: an encoder-decoder (Whisper, BART, T5) loaded by the causal-LM loader (a text corpus's kind) is its
    decoder alone (WhisperForCausalLM), without its encoder and cross-attention heads. None where it cannot tell
    (``load_model`` says what is wrong with the folder)."""
    import json

    from transformers.models.auto import modeling_auto

    try:
        config = json.loads((model_folder(source) / "config.json").read_text())
    except Exception:  # noqa: BLE001  no folder, no network, a fairseq tarball: load_model says which
        return None
    if LOADERS.get(kind, None) is not _causal_lm or not config.get("is_encoder_decoder"):
        return None
    model_type = config.get("model_type")
    name = (config.get("architectures") or [model_type])[0]
    what = ("a speech encoder-decoder (its encoder reads audio)"
            if model_type in modeling_auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES else "an encoder-decoder")
    causal = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type) or "a causal LM"
    count = {stack: [next((config[n] for n in names if config.get(n)), 0) for names in entries]
             for stack, entries in STACK_COUNTS.items()}  # {stack: [layers, heads]}
    decoder = count["decoder"][0] * count["decoder"][1]
    total = count["encoder"][0] * count["encoder"][1] + 2 * decoder
    heads = f"{decoder} of its {total} heads: " if decoder else ""
    return (f"{name} is {what}: a text corpus would score it as {causal}, its decoder alone ({heads}decoder "
            "self-attention only, not its encoder's or cross-attention's); the command scores causal LMs on text and "
            "classifiers on a GLUE-format TSV")


def load_model(source, kind: str | None = None, *, device="cpu", dtype: str = "float32", src_lang: str = "en",
               tgt_lang: str = "fr", revision: str | None = None, towers=None):
    """(model, tokenizer) from a hub id, a model folder (pruned or not) or a fairseq tarball, loaded as
    the pipeline loads its studies' models (safetensors only, eager attention). ``kind`` (a kind of model, one of
    ``LOADERS``; ``headprune.load_model`` takes any kind of study) defaults to ``guess_kind``'s; ``src_lang``/``tgt_lang`` are a fairseq model's languages;
    ``towers`` (("vision",), ("audio",)) adds a multimodal language model's towers to its heads (``load_causal_lm``).

    >>> model, tokenizer = load_model("tiny")  # the README's tiny Llama folder
    >>> type(model).__name__, guess_kind("tiny")
    ('LlamaForCausalLM', 'language_modeling')
    """
    path = model_folder(source, revision)
    kind = kind or guess_kind(path)
    if kind not in LOADERS:
        raise ValueError(LOADERS.unknown(kind))
    return LOADERS[kind](path, torch.device(device), kind=kind, dtype=dtype, src_lang=src_lang, tgt_lang=tgt_lang,
                         towers=towers)


@LOADERS.register("language_modeling")
def _causal_lm(path, device, *, kind, dtype, src_lang, tgt_lang, towers):
    return load_causal_lm(path, device, dtype=dtype, towers=towers)


def _no_towers(kind: str, towers) -> None:
    if towers:
        raise ValueError(f"towers={tuple(towers)}: only a language model's wrapper has towers, not a {kind} model")


@LOADERS.register("classification")
def _classifier(path, device, *, kind, dtype, src_lang, tgt_lang, towers):
    _no_towers(kind, towers)
    return load_classifier(path, device)


@LOADERS.register("translation")
def _translation(path, device, *, kind, dtype, src_lang, tgt_lang, towers):
    _no_towers(kind, towers)
    if converted_from_fairseq(path):
        return load_translation(path, src_lang, tgt_lang, device)
    return load_seq2seq(path, device, dtype=dtype)
