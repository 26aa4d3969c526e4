"""fairseq checkpoints as fairseq-train writes them, and fairseq's pre-norm transformer.

A checkpoint written by fairseq-train holds its training state next to the weights: 0.6-0.9
pickle their meter objects (``fairseq.meters.AverageMeter`` ...) under
``extra_state["train_meters"]``; 0.10 stores ``extra_state["metrics"]`` as lists of (priority,
name, meter class name, meter state); 0.12 sets ``args`` to None and keeps the options under
``cfg`` (``OmegaConf.to_container``: plain dicts, with ``cfg["model"]`` an argparse Namespace for
legacy architectures or the nested dict of the dataclass TransformerConfig). The layouts below
follow fairseq's trainer.py / checkpoint_utils.py / logging/meters.py of each release.

The meter classes are stand-ins registered as ``fairseq.meters`` while a checkpoint is written,
so torch.save pickles them exactly as fairseq-train does (module, class name, __dict__). Their
__setstate__ records that it ran: the loader must never run it.
"""

import argparse
import contextlib
import sys
import types
from collections import OrderedDict

import pytest
import torch

from fairseq_reference import (BPECODES_TEXT, EN_TOKENS, EOS, JOINED_TOKENS, PAD, SPECIALS, assert_matches_reference,
                               fairseq_args, padded_batch, random_fairseq_state, reference_forward,
                               write_fairseq_folder)
from headprune.models import fairseq as fs
from headprune.models.heads import adapter_for

RAN = []  # what the stand-in meters' code did while being unpickled


def _meter_class(name, fields):
    def __init__(self):
        for field, value in fields.items():
            setattr(self, field, value)

    def __setstate__(self, state):  # what unpickling the real class would run
        RAN.append(name)
        self.__dict__.update(state)

    return type(name, (), {"__init__": __init__, "__setstate__": __setstate__})


@contextlib.contextmanager
def fairseq_modules():
    """`fairseq.meters` and `fairseq.logging.meters` stand-ins, importable while the block runs."""
    fairseq = types.ModuleType("fairseq")
    modules = {"fairseq": fairseq}
    for module_name in ("fairseq.meters", "fairseq.logging.meters"):
        module = types.ModuleType(module_name)
        for name, fields in {"AverageMeter": {"val": 0, "avg": 0, "sum": 0, "count": 0},
                             "TimeMeter": {"init": 0, "start": 1.7e9, "n": 0},
                             "StopwatchMeter": {"sum": 0, "n": 0, "start_time": None}}.items():
            cls = _meter_class(name, fields)
            cls.__module__ = module_name
            setattr(module, name, cls)
        modules[module_name] = module
    modules["fairseq.logging"] = types.ModuleType("fairseq.logging")
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield modules["fairseq.meters"]
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def adam_state(state):
    """fairseq's saved optimizer state: Adam moments per parameter."""
    params = list(range(3))
    return {"state": {i: {"step": 100, "exp_avg": torch.randn(4), "exp_avg_sq": torch.rand(4)} for i in params},
            "param_groups": [{"lr": 0.0005, "betas": (0.9, 0.98), "eps": 1e-8, "weight_decay": 0.0, "params": params}]}


def fairseq09_checkpoint(args, state, meters):
    """checkpoint_utils.save_state of fairseq 0.6-0.9, extra_state from save_checkpoint + trainer."""
    train_meters = OrderedDict()
    for name in ("train_loss", "train_nll_loss", "valid_loss", "wpb", "bsz", "gnorm", "clip", "oom"):
        meter = meters.AverageMeter()
        meter.val, meter.sum, meter.count, meter.avg = 3.5, 350.0, 100, 3.5
        train_meters[name] = meter
    for name in ("wps", "ups", "wall"):
        train_meters[name] = meters.TimeMeter()
    train_meters["train_wall"] = meters.StopwatchMeter()
    return {
        "args": args, "model": state,
        "optimizer_history": [{"criterion_name": "LabelSmoothedCrossEntropyCriterion", "optimizer_name": "FairseqAdam",
                               "lr_scheduler_state": {"best": 3.25}, "num_updates": 100}],
        "extra_state": {"train_iterator": {"epoch": 3, "iterations_in_epoch": 0}, "val_loss": 3.25, "best": 3.25,
                        "train_meters": train_meters},
        "last_optimizer_state": adam_state(state),
    }


def fairseq_metrics_state():
    """fairseq.logging.metrics.state_dict() of 0.10-0.12: per aggregator, MetersDict.state_dict()."""
    return OrderedDict([
        ("default", [(100, "loss", "AverageMeter", {"val": torch.tensor(3.5), "sum": torch.tensor(350.0), "count": 100,
                                                    "round": 3}),
                     (300, "wps", "TimeMeter", {"init": 12.5, "n": 1000, "round": 1}),
                     (500, "train_wall", "StopwatchMeter", {"sum": 10.0, "n": 100, "round": 0})]),
        ("train", [(100, "loss", "AverageMeter", {"val": 3.5, "sum": 350.0, "count": 100, "round": 3})]),
    ])


def fairseq010_checkpoint(args, state):
    """fairseq 0.10: args, and extra_state["metrics"] from trainer.save_checkpoint."""
    return {
        "args": args, "model": state,
        "optimizer_history": [{"criterion_name": "LabelSmoothedCrossEntropyCriterion", "optimizer_name": "FairseqAdam",
                               "lr_scheduler_state": {"best": 3.25}, "num_updates": 100}],
        "extra_state": {"metrics": fairseq_metrics_state(), "previous_training_time": 12.5,
                        "train_iterator": {"epoch": 3, "iterations_in_epoch": 0, "shuffle": True}, "val_loss": 3.25},
        "last_optimizer_state": adam_state(state),
    }


def dataclass_model_cfg(args):
    """cfg["model"] as 0.12's TransformerConfig serializes: nested encoder/decoder/quant_noise groups."""
    a = vars(args)
    side = lambda s: {"embed_path": None, "embed_dim": a[f"{s}_embed_dim"], "ffn_embed_dim": a[f"{s}_ffn_embed_dim"],
                      "layers": a[f"{s}_layers"], "attention_heads": a[f"{s}_attention_heads"],
                      "normalize_before": a[f"{s}_normalize_before"], "learned_pos": a[f"{s}_learned_pos"],
                      "layerdrop": 0.0, "layers_to_keep": None, "xformers_att_config": None}
    return {
        "_name": "transformer", "activation_fn": a.get("activation_fn", "relu"), "dropout": a["dropout"],
        "attention_dropout": a["attention_dropout"], "activation_dropout": 0.0, "adaptive_input": False,
        "encoder": side("encoder"), "max_source_positions": 1024,
        "decoder": {**side("decoder"), "input_dim": a["decoder_embed_dim"], "output_dim": a["decoder_embed_dim"]},
        "max_target_positions": 1024, "share_decoder_input_output_embed": a["share_decoder_input_output_embed"],
        "share_all_embeddings": a["share_all_embeddings"], "no_token_positional_embeddings": False,
        "adaptive_softmax_cutoff": None, "adaptive_softmax_dropout": 0.0, "adaptive_softmax_factor": 4.0,
        "layernorm_embedding": False, "tie_adaptive_weights": False, "tie_adaptive_proj": False,
        "no_scale_embedding": False, "checkpoint_activations": False, "offload_activations": False,
        "no_cross_attention": False, "cross_self_attention": False,
        "quant_noise": {"pq": 0.0, "pq_block_size": 8, "scalar": 0.0}, "min_params_to_wrap": 100000000,
        "char_inputs": False, "relu_dropout": 0.0, "base_layers": 0, "base_sublayers": 1, "base_shuffle": 1,
        "export": False, "no_decoder_final_norm": False,
    }


def fairseq012_checkpoint(args, state, model_cfg):
    """fairseq 0.12's trainer.state_dict() + checkpoint_utils.save_checkpoint's extra_state."""
    return {
        "args": None,
        "cfg": {"_name": None,
                "common": {"_name": None, "seed": 1, "fp16": False, "log_interval": 100},
                "model": model_cfg,
                "task": argparse.Namespace(_name="translation", source_lang="en", target_lang="fr", data="data-bin"),
                "criterion": {"_name": "label_smoothed_cross_entropy", "label_smoothing": 0.1},
                "optimizer": {"_name": "adam", "adam_betas": "(0.9, 0.98)", "lr": [0.0005]},
                "lr_scheduler": {"_name": "inverse_sqrt", "warmup_updates": 4000},
                "checkpoint": {"_name": None, "save_dir": "checkpoints", "no_save_optimizer_state": False}},
        "model": state, "criterion": None,
        "optimizer_history": [{"criterion_name": "LabelSmoothedCrossEntropyCriterion", "optimizer_name": "FairseqAdam",
                               "lr_scheduler_state": {"best": 3.25}, "num_updates": 100}],
        "task_state": {},
        "extra_state": {"metrics": fairseq_metrics_state(), "previous_training_time": 12.5,
                        "train_iterator": {"epoch": 3, "iterations_in_epoch": 0, "shuffle": True, "version": 2},
                        "val_loss": 3.25, "best": 3.25},
        "last_optimizer_state": adam_state(state),
    }


def write_checkpoint_folder(folder, checkpoint, legacy_format=False, src_tokens=JOINED_TOKENS,
                            tgt_tokens=JOINED_TOKENS):
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, folder / "model.pt", _use_new_zipfile_serialization=not legacy_format)
    for lang, tokens in (("en", src_tokens), ("fr", tgt_tokens)):
        (folder / f"dict.{lang}.txt").write_text("".join(f"{t} {100 - i % 50}\n" for i, t in enumerate(tokens)))
    (folder / "bpecodes").write_text(BPECODES_TEXT)
    return folder


VOCAB = len(SPECIALS) + len(JOINED_TOKENS)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The layout read since the first release: args and weights only."""
    state = random_fairseq_state(VOCAB, VOCAB, naming="old", share_all=True)
    args = fairseq_args()
    folder = write_fairseq_folder(tmp_path_factory.mktemp("plain") / "m", args, state, JOINED_TOKENS, JOINED_TOKENS)
    return state, args, fs.load_fairseq_translation_model(folder)[0]


def assert_same_ties(model, expected):
    """The same names share one tensor in both models (tied embeddings stay tied)."""
    def groups(m):
        by_tensor = {}
        for name, tensor in m.state_dict(keep_vars=True).items():
            by_tensor.setdefault(id(tensor), []).append(name)
        return sorted(by_tensor.values())
    assert groups(model) == groups(expected)


def assert_same_model(model, expected):
    got, want = model.state_dict(), expected.state_dict()
    assert list(got) == list(want)
    for name in want:
        assert torch.equal(got[name], want[name]), name  # bit for bit


# ----------------------------------------------------------------------------------------------
# Training state: read into inert placeholders, the weights bit for bit


@pytest.mark.parametrize("legacy_format", [False, True], ids=["zip", "legacy"])
def test_fairseq_09_checkpoint_with_meters_loads_and_runs_nothing(tmp_path, plain, legacy_format):
    state, args, expected = plain
    with fairseq_modules() as meters:
        checkpoint = fairseq09_checkpoint(args, state, meters)
        folder = write_checkpoint_folder(tmp_path / "m", checkpoint, legacy_format)
        # The stand-in modules stay importable during the load: the loader must not use them anyway.
        RAN.clear()
        model, _ = fs.load_fairseq_translation_model(folder)
        loaded = fs.safe_load_checkpoint(folder / "model.pt")
        assert RAN == []
        # ... whereas a plain unpickling of the same file does run the meters' code (the test can fail)
        torch.load(folder / "model.pt", weights_only=False)
        assert "AverageMeter" in RAN
    assert_same_model(model, expected)
    meter = loaded["extra_state"]["train_meters"]["train_loss"]
    assert isinstance(meter, fs.TrainingStatePlaceholder)
    assert meter.fairseq_global == "fairseq.meters.AverageMeter" and meter.state["sum"] == 350.0
    assert loaded["extra_state"]["train_meters"]["train_wall"].fairseq_global == "fairseq.meters.StopwatchMeter"
    assert torch.equal(loaded["last_optimizer_state"]["state"][0]["exp_avg"],
                       checkpoint["last_optimizer_state"]["state"][0]["exp_avg"])


def test_fairseq_010_checkpoint_with_metrics_loads(tmp_path, plain):
    state, args, expected = plain
    folder = write_checkpoint_folder(tmp_path / "m", fairseq010_checkpoint(args, state))
    model, _ = fs.load_fairseq_translation_model(folder)
    assert_same_model(model, expected)
    # --share-all-embeddings: one matrix, as fairseq has it
    assert model.model.encoder.embed_tokens.weight is model.model.decoder.output_projection.weight


@pytest.mark.parametrize("model_cfg", ["namespace", "dataclass"])
@pytest.mark.parametrize("legacy_format", [False, True], ids=["zip", "legacy"])
def test_fairseq_012_cfg_checkpoint_loads(tmp_path, plain, model_cfg, legacy_format):
    state, args, expected = plain
    # 0.12's convert_namespace_to_omegaconf: a legacy arch's cfg.model is the whole Namespace + _name.
    cfg_model = argparse.Namespace(**vars(args), _name=args.arch) if model_cfg == "namespace" \
        else dataclass_model_cfg(args)
    folder = write_checkpoint_folder(tmp_path / "m", fairseq012_checkpoint(args, state, cfg_model), legacy_format)
    model, _ = fs.load_fairseq_translation_model(folder)
    assert_same_model(model, expected)


def test_dataclass_options_flatten_to_argument_names():
    options = fs.fairseq_model_options({"args": None, "cfg": {"model": dataclass_model_cfg(fairseq_args())}})
    assert options["encoder_embed_dim"] == 16 and options["decoder_output_dim"] == 16
    assert options["quant_noise_pq"] == 0.0 and options["arch"] == "transformer"
    assert "encoder" not in options


def test_checkpoint_without_options_is_named(tmp_path, plain):
    state, _, _ = plain
    folder = write_checkpoint_folder(tmp_path / "m", {"args": None, "cfg": {"model": None}, "model": state})
    with pytest.raises(ValueError, match=r"model\.pt: no model options.*cfg\['model'\]"):
        fs.load_fairseq_translation_model(folder)


@pytest.mark.parametrize("where", ["args option", "weight", "cfg model", "cfg nested option"])
def test_placeholders_never_reach_the_model(tmp_path, plain, where):
    """A crafted file puts an allowed training-state object where the model is built from."""
    state, args, _ = plain
    with fairseq_modules() as meters:
        if where == "args option":
            checkpoint = fairseq09_checkpoint(argparse.Namespace(**{**vars(args), "encoder_layers": meters.AverageMeter()}),
                                              state, meters)
            expected = r"option 'encoder_layers' holds <placeholder for fairseq\.meters\.AverageMeter>"
        elif where == "weight":
            checkpoint = fairseq09_checkpoint(args, {**state, "encoder.layers.0.fc1.weight": meters.TimeMeter()}, meters)
            expected = r"'model' entry 'encoder\.layers\.0\.fc1\.weight' holds TimeMeter, not a tensor"
        elif where == "cfg model":
            checkpoint = fairseq012_checkpoint(args, state, meters.AverageMeter())
            expected = r"cfg\['model'\] is a AverageMeter, not an argparse Namespace or a dict"
        else:
            model_cfg = dataclass_model_cfg(args)
            model_cfg["encoder"]["embed_dim"] = meters.StopwatchMeter()
            checkpoint = fairseq012_checkpoint(args, state, model_cfg)
            expected = r"option 'encoder_embed_dim' holds <placeholder"
        folder = write_checkpoint_folder(tmp_path / "m", checkpoint)
        RAN.clear()
        with pytest.raises((fs.UnsafeCheckpointError, ValueError), match=expected):
            fs.load_fairseq_translation_model(folder)
        assert RAN == []


# ----------------------------------------------------------------------------------------------
# Pre-norm models: M2M100 (headprune.models.prenorm) against the reference forward


PRE_NORM_LAYOUTS = {
    # name: (naming, share_all, share_output, source tokens, target tokens)
    "shared-all": ("old", True, True, JOINED_TOKENS, JOINED_TOKENS),
    # the authors' IWSLT setting: separate dictionaries (the source one larger), output = target embeddings
    "share-decoder-io": ("new", False, True, JOINED_TOKENS, EN_TOKENS),
    "untied-output": ("new", False, False, EN_TOKENS, JOINED_TOKENS),
    "untied-output-old-name": ("old", False, False, JOINED_TOKENS, JOINED_TOKENS),
}


def pre_norm_folder(tmp_path, layout, **overrides):
    naming, share_all, share_output, src_tokens, tgt_tokens = PRE_NORM_LAYOUTS[layout]
    src_vocab, tgt_vocab = len(SPECIALS) + len(src_tokens), len(SPECIALS) + len(tgt_tokens)
    state = random_fairseq_state(src_vocab, tgt_vocab, naming=naming, share_all=share_all, pre_norm=True,
                                 share_output=share_output, seed=3)
    args = fairseq_args(encoder_normalize_before=True, decoder_normalize_before=True,
                        share_all_embeddings=share_all, share_decoder_input_output_embed=share_output, **overrides)
    return write_fairseq_folder(tmp_path / layout, args, state, src_tokens, tgt_tokens), state, args


@pytest.mark.parametrize("layout", list(PRE_NORM_LAYOUTS))
def test_pre_norm_checkpoint_matches_reference(tmp_path, layout):
    folder, state, args = pre_norm_folder(tmp_path, layout)
    model, _ = fs.load_fairseq_translation_model(folder)
    assert model.config.model_type == "m2m_100" and adapter_for(model).family == "m2m_100"
    assert_matches_reference(folder, model, state, args)
    shares_output = PRE_NORM_LAYOUTS[layout][2]
    assert (model.lm_head.weight is model.model.decoder.embed_tokens.weight) == shares_output


def test_pre_norm_gelu_unscaled_embeddings_match_reference(tmp_path):
    folder, state, args = pre_norm_folder(tmp_path, "share-decoder-io", activation_fn="gelu", no_scale_embedding=True)
    assert_matches_reference(folder, fs.load_fairseq_translation_model(folder)[0], state, args)


def test_pre_norm_greedy_generate_matches_reference_decoding(tmp_path):
    """generate() (key/value cache, positions one step at a time) against step-by-step argmax of
    the reference forward recomputed over the whole prefix."""
    folder, state, args = pre_norm_folder(tmp_path, "share-decoder-io")
    model, _ = fs.load_fairseq_translation_model(folder)
    with torch.no_grad():
        model.lm_head.weight[EOS] *= -1  # random weights end at once; keep decoding
        state = {**state, "decoder.embed_tokens.weight": model.model.decoder.embed_tokens.weight.clone()}
    src = padded_batch([[9, 14, 30, 22, 7, EOS], [40, 11, EOS]])
    steps = 7
    with torch.no_grad():
        generated = model.generate(src, attention_mask=src.ne(PAD), num_beams=1, do_sample=False, max_new_tokens=steps,
                                   max_length=None, min_new_tokens=steps, forced_eos_token_id=None)
    prefix = torch.full((2, 1), EOS)
    for _ in range(steps):
        logits = reference_forward(state, args, src, prefix)[:, -1]
        logits[:, EOS] = float("-inf")  # min_new_tokens
        prefix = torch.cat([prefix, logits.argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(generated, prefix)


def test_pre_norm_model_round_trips_through_the_writer(tmp_path):
    folder, _, _ = pre_norm_folder(tmp_path, "share-decoder-io")
    model, _ = fs.load_fairseq_translation_model(folder)
    written = fs.write_fairseq_checkpoint_dir(model, JOINED_TOKENS, EN_TOKENS, folder / "bpecodes", tmp_path / "out")
    args = fs.safe_load_checkpoint(written / "model.pt")["args"]
    assert args.encoder_normalize_before and args.decoder_normalize_before and args.share_decoder_input_output_embed
    assert not args.share_all_embeddings
    assert_same_model(fs.load_fairseq_translation_model(written)[0], model)


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"encoder_normalize_before": True}, "mixes pre-norm and post-norm"),
        ({"encoder_normalize_before": True, "decoder_normalize_before": True, "no_decoder_final_norm": True},
         "no_decoder_final_norm"),
        ({"decoder_learned_pos": True}, "decoder_learned_pos"),
        ({"layernorm_embedding": True}, "layernorm_embedding"),
        ({"adaptive_softmax_cutoff": "5000,20000"}, "adaptive_softmax_cutoff"),
        ({"activation_fn": "swish"}, "activation_fn='swish'"),
        ({"cross_self_attention": True}, "cross_self_attention"),
    ],
)
def test_options_the_model_cannot_represent_are_refused_by_the_loader(tmp_path, plain, overrides, expected):
    state, _, _ = plain
    folder = write_fairseq_folder(tmp_path / "m", fairseq_args(**overrides), state, JOINED_TOKENS, JOINED_TOKENS)
    with pytest.raises(ValueError, match=r"model\.pt: .*" + expected):
        fs.load_fairseq_translation_model(folder)


def test_output_projection_that_contradicts_the_sharing_option_is_refused(tmp_path):
    state = random_fairseq_state(VOCAB, VOCAB, naming="new", share_all=False, pre_norm=True, share_output=False)
    args = fairseq_args(encoder_normalize_before=True, decoder_normalize_before=True, share_all_embeddings=False,
                        share_decoder_input_output_embed=True)
    folder = write_fairseq_folder(tmp_path / "m", args, state, JOINED_TOKENS, JOINED_TOKENS)
    with pytest.raises(ValueError, match="output projection differs"):
        fs.load_fairseq_translation_model(folder)


# ----------------------------------------------------------------------------------------------
# Converted once into a model folder: what every pipeline job loads


@pytest.mark.parametrize("layout", ["post-norm", "pre-norm"])
def test_converted_model_folder_loads_the_same_model_and_tokenizer(tmp_path, layout):
    from headprune.evaluation.evaluate import translate
    from headprune.models.loading import convert_translation_checkpoint, load_translation

    if layout == "pre-norm":
        folder, _, _ = pre_norm_folder(tmp_path, "share-decoder-io")
    else:
        state = random_fairseq_state(VOCAB, VOCAB, naming="old", share_all=True)
        folder = write_fairseq_folder(tmp_path / "m", fairseq_args(), state, JOINED_TOKENS, JOINED_TOKENS)
    original, original_tokenizer = load_translation(folder)
    converted = convert_translation_checkpoint(folder, tmp_path / "converted.model")
    assert sorted(p.name for p in converted.glob("*.safetensors")) == ["model.safetensors"]
    assert not any(converted.glob("*.pt")) and not list(tmp_path.glob(".converted.model.*"))
    model, tokenizer = load_translation(converted)
    assert type(model) is type(original)
    assert_same_model(model, original)
    assert_same_ties(model, original)
    if layout == "pre-norm":  # the ties survive save_pretrained dropping the duplicate matrices
        assert model.lm_head.weight is model.model.decoder.embed_tokens.weight
        assert model.model.shared is model.model.encoder.embed_tokens
    else:
        assert model.model.encoder.embed_tokens.weight is model.model.decoder.output_projection.weight
    sources = ["the cat sat on the mat.", "l'homme, the red dog isn't here?"]
    assert tokenizer(sources)["input_ids"] == original_tokenizer(sources)["input_ids"]
    with torch.no_grad():  # random weights end at once; keep decoding
        for m in (model, original):
            m.get_output_embeddings().weight[EOS] *= -1
    assert translate(model, tokenizer, sources, beam=3) == translate(original, original_tokenizer, sources, beam=3)
