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
