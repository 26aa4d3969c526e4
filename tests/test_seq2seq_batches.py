"""Teacher-forcing batches of transformers' own translation models (Marian, BART, NLLB): the target
encoded by their tokenizer, decoding started from the model's decoder_start_token_id, so the adapter's
summed loss equals the model's own (mean) loss times the target tokens."""
import pytest
import torch

from conftest import EOS, PAD
from test_adapter_contract import tiny_bart, tiny_marian, tiny_nllb
from headprune.data.batching import translation_batches
from headprune.models.heads import adapter_for


class WordTokenizer:
    """A transformers-style tokenizer (no FSMT Moses pipeline): one id per word, </s> at the end."""

    pad_token_id = PAD

    def __call__(self, texts=None, padding=False, truncation=False, max_length=None, return_tensors=None,
                 text_target=None):
        rows = [[5 + (sum(map(ord, w)) % 30) for w in t.split()] + [EOS] for t in (text_target or texts)]
        if return_tensors is None:
            return {"input_ids": rows}
        width = max(map(len, rows))
        ids = torch.tensor([r + [PAD] * (width - len(r)) for r in rows])
        return {"input_ids": ids, "attention_mask": (ids != PAD).long()}


@pytest.mark.parametrize("make", [tiny_marian, tiny_bart, tiny_nllb], ids=["marian", "bart", "nllb"])
def test_loss_equals_the_models_own(make):
    model = make()
    sources = ["a b c", "d e", "f g h i"]
    targets = ["x y", "z", "u v w t"]
    batch = translation_batches(WordTokenizer(), sources, targets, batch_size=3,
                                decoder_start_token_id=model.config.decoder_start_token_id)[0]
    assert (batch["decoder_input_ids"][:, 0] == model.config.decoder_start_token_id).all()
    fed = batch["labels"][:, 1:] != PAD  # position t + 1 reads label t where label t + 1 is a real token
    assert (batch["decoder_input_ids"][:, 1:] == batch["labels"][:, :-1])[fed].all()
    summed, _ = adapter_for(model).loss_and_outputs(model, batch)
    labels = batch["labels"].masked_fill(batch["labels"] == PAD, -100)
    with torch.no_grad():
        own = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss
    assert float(summed) == pytest.approx(float(own) * int((labels != -100).sum()), rel=1e-5)


def test_the_decoder_start_is_required():
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        translation_batches(WordTokenizer(), ["a"], ["b"])


def test_a_transformers_translation_model_is_a_study(tmp_path):
    """A model folder of transformers' BART (byte-level BPE tokenizer) loads as a translation study
    (kind translation, not a fairseq layout), translates with beam search under gates, and a gated
    head translates as the pruned model does; a wrong head count is refused naming the config key."""
    import copy

    from tokenizers import ByteLevelBPETokenizer
    from transformers import BartConfig, BartForConditionalGeneration, BartTokenizerFast

    from headprune.evaluation.runs import EvalSet, EvalSettings, gates_without, run_variants
    from headprune.models.prune import prune_heads
    from headprune.workflow import load_study_model

    text = ["the cat sat on the mat", "a dog ran in the park", "le chat est sur le tapis", "un chien court"]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(text * 20, vocab_size=300, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                            show_progress=False)
    bpe.save_model(str(tmp_path))
    tokenizer = BartTokenizerFast(vocab=str(tmp_path / "vocab.json"), merges=str(tmp_path / "merges.txt"))
    torch.manual_seed(0)
    config = BartConfig(vocab_size=len(tokenizer), d_model=16, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=32,
                        decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id,
                        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                        decoder_start_token_id=tokenizer.eos_token_id, forced_bos_token_id=None)
    BartForConditionalGeneration(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    study = {"kind": "translation", "model": str(tmp_path), "section": "models.bart", "layers": 2, "heads": 4,
             "src_lang": "en", "tgt_lang": "fr"}
    model, loaded = load_study_model(study, "cpu")
    assert type(model).__name__ == "BartForConditionalGeneration"
    evalset = EvalSet("translation", ["le chat", "un chien"], ["the cat", "a dog ran"], "bleu", "fr")
    settings = EvalSettings(batch_size=2, beam=2)
    head = ("enc_dec", 1, 2)
    full, gated = run_variants(model, loaded, evalset, [None, gates_without(model, [head])], settings)
    assert all(isinstance(t, str) for t in full + gated)
    pruned = prune_heads(copy.deepcopy(model), {"enc_dec": {1: [2]}})
    assert run_variants(pruned, loaded, evalset, [None], settings)[0] == gated
    with pytest.raises(ValueError, match="models.bart.layers/models.bart.heads say 2 x 8"):
        load_study_model({**study, "heads": 8}, "cpu")


def test_placement_spreads_a_model_only_over_the_jobs_gpus(monkeypatch):
    """One device: the whole model there. Several GPUs (models.<study>.resources.gpu > 1): accelerate's
    balanced map over the GPUs the job sees; asking for more than it sees is an error that says so."""
    from headprune.models import loading

    assert loading.placement("cpu", 4) == {"device_map": {"": torch.device("cpu")}}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert loading.placement("cuda", 1) == {"device_map": {"": torch.device("cuda")}}
    assert loading.placement("cuda", 2)["device_map"] == "balanced"
    with pytest.raises(RuntimeError, match="asks for 4 GPUs .* sees 2"):
        loading.placement("cuda", 4)


def test_a_pruned_model_is_placed_where_asked(tmp_path):
    """load_pruned_weights builds a pruned folder itself: dtype and a one-device map are applied to it."""
    from headprune.models.prune import load_pruned_weights, prune_heads
    from test_adapter_contract import tiny_llama_gqa
    from transformers import AutoModelForCausalLM

    model = prune_heads(tiny_llama_gqa(), {"dec_self": {0: [1]}})
    model.save_pretrained(tmp_path)
    loaded = load_pruned_weights(AutoModelForCausalLM, tmp_path, dtype=torch.bfloat16,
                                 device_map={"": torch.device("cpu")})
    assert next(loaded.parameters()).dtype == torch.bfloat16
    assert loaded.model.layers[0].self_attn.q_proj.out_features == 3 * model.config.head_dim
