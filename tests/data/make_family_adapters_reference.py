import sys, copy, torch
sys.path.insert(0, "tests")
from decoder_zoo import tiny_model
from headprune.models.heads import full_gates, gated
from headprune.models.prune import prune_heads
from headprune.scoring.importance import head_importance
torch.set_num_threads(int(sys.argv[1])); dtype = getattr(torch, sys.argv[3])
VOCAB = int(sys.argv[4]) if len(sys.argv) > 4 else 64
REMOVE = {0: [0, 1, 3], 1: [0, 1, 2, 3, 4, 5], 2: [0, 1, 2]}
COLUMNS = ("importance_token", "importance_example", "importance_batch", "fisher")
def _batch():
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, VOCAB, (2, 9), generator=generator)
    mask = torch.ones_like(ids); mask[1, :3] = 0
    return ids, mask
def _logits(model, ids, mask):
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits
def _gates(model, masked):
    gates = full_gates(model)
    for layer, heads in masked.items():
        gates["dec_self"][layer, heads] = 0
    return gates
out = {}
for mt in ["llama", "mistral", "qwen2", "gpt2"]:
    torch.manual_seed(0)
    model = tiny_model(mt)
    first = next(model.parameters()).detach().flatten()[:8].clone()
    model = model.to(dtype)
    ids, mask = _batch()
    with gated(model, _gates(model, REMOVE)):
        masked = _logits(model, ids, mask)
    pruned = _logits(prune_heads(copy.deepcopy(model), {"dec_self": REMOVE}), ids, mask)
    scores = head_importance(model, [{"input_ids": ids, "attention_mask": mask}], normalize=False, progress=False)
    out[mt] = {"first_weights": first, "masked": masked, "pruned": pruned,
               "scores": {c: torch.tensor(scores[c].to_numpy()) for c in COLUMNS}}
torch.save(out, sys.argv[2])
