"""Recovery after pruning (issue #59, headprune.training.recovery): each method wins back held-out loss, never
trains on a test item, LoRA merged computes what LoRA unmerged does, the distillation loss is the KL worked by hand,
a recovered uniform model exports stock and loads with headprune blocked, and bad input is one line naming the key.

The model: a tiny Llama (grouped-query attention, float64) trained 60 steps on a small grammar's text, so that
pruning it costs held-out loss; the test windows are cut from other sentences of the same grammar."""
from __future__ import annotations

import copy
import math
import os
import random
import re
import subprocess
import sys

import pytest
import torch

from headprune.evaluation.runs import EvalSet
from headprune.analyses.sweeps import evalset_batches, evalset_from_text, remove_heads
from headprune.training import recovery
from headprune.training.recovery import RecoveryError, RecoverySettings, distillation_loss, recover

WORDS = {"det": ["the", "a"], "noun": ["cat", "dog", "bird", "fox"], "verb": ["sat", "ran", "slept"],
         "place": ["mat", "log", "rug", "hill"]}


def sentences(seed: int, count: int) -> str:
    rng = random.Random(seed)
    pick = lambda part: rng.choice(WORDS[part])  # noqa: E731
    return " ".join(f"{pick('det')} {pick('noun')} {pick('verb')} on {pick('det')} {pick('place')} ."
                    for _ in range(count))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """(trained full model, tokenizer, training windows, test windows)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = ["<unk>", "on", ".", *sorted(w for words in WORDS.values() for w in words)]
    words = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, "<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         initializer_range=0.1)).double()
    train = evalset_from_text(tokenizer, sentences(1, 300), window=16)
    test = evalset_from_text(tokenizer, sentences(2, 60), window=16)
    model = recover(model, tokenizer, train, "full", steps=60, lr=1e-2, batch_size=16, progress=False)
    return model, tokenizer, train, test


def held_out_loss(model, tokenizer, test: EvalSet) -> float:
    batches = evalset_batches(tokenizer, test, 64)
    with torch.no_grad():
        return sum(model(**batch).loss.item() * len(batch["input_ids"]) for batch in batches) / len(test)


@pytest.mark.parametrize("removed", [[("dec_self", 0, 1), ("dec_self", 1, 2)],
                                     [("dec_self", 0, 0), ("dec_self", 0, 1), ("dec_self", 1, 2), ("dec_self", 1, 3)]],
                         ids=["25%", "50%"])
@pytest.mark.parametrize("method", ["lora", "full", "distill"])
def test_each_method_lowers_the_held_out_loss(world, method, removed):
    full, tokenizer, train, test = world
    pruned = remove_heads(copy.deepcopy(full), removed)
    before = held_out_loss(pruned, tokenizer, test)
    assert before > held_out_loss(full, tokenizer, test)  # pruning cost something to win back
    recovered = recover(pruned, tokenizer, train, method, steps=20, teacher=full, test_items=test, lr=3e-3,
                        batch_size=8, seed=0, progress=False)
    after = held_out_loss(recovered, tokenizer, test)
    assert after < before
    assert recovered.model.layers[0].self_attn.q_proj.out_features == 8 * (4 - sum(h[1] == 0 for h in removed))
    record = recovered.config.headprune_recovery
    assert (record["method"], record["steps"], record["train_items"]) == (method, 20, len(train))


def test_recovery_never_sees_a_test_item(world, monkeypatch):
    full, tokenizer, train, test = world
    planted = EvalSet(train.kind, [*train.references, test.references[3]], [*train.sources, test.sources[3]],
                      train.metric)
    seen = []
    batches_of = recovery.training_batches
    monkeypatch.setattr(recovery, "training_batches", lambda tok, items, settings: (
        seen.extend(map(tuple, items.sources)), batches_of(tok, items, settings))[1])
    recovered = recover(copy.deepcopy(full), tokenizer, planted, "full", steps=1, test_items=test, progress=False)
    assert tuple(test.sources[3]) not in seen and len(seen) == len(train)
    assert recovered.config.headprune_recovery["dropped_test_items"] == 1
    with pytest.raises(RecoveryError, match="^train_items: all 3 training items are test items"):
        recover(copy.deepcopy(full), tokenizer, EvalSet(test.kind, test.references[:3], test.sources[:3],
                                                          test.metric), "full", steps=1, test_items=test)


def test_lora_merged_equals_unmerged(world):
    full, tokenizer, train, test = world
    pruned = remove_heads(copy.deepcopy(full), [("dec_self", 0, 1), ("dec_self", 1, 2)])
    base = copy.deepcopy(pruned)
    settings = RecoverySettings(steps=1, lora_rank=4, lora_alpha=8)
    method = recovery.Lora()
    adapted = method.prepare(pruned, settings)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # adapters away from their zero start, as training leaves them
        for name, parameter in adapted.named_parameters():
            if "lora_" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype) * 0.1)
    batch = evalset_batches(tokenizer, test, 8)[0]
    adapted.eval()
    with torch.no_grad():
        unmerged = adapted(**batch).logits
    merged = method.finish(adapted, pruned)
    assert not any("lora" in name for name, _ in merged.named_parameters())
    with torch.no_grad():
        logits = merged(**batch).logits
    assert torch.allclose(logits, unmerged, atol=1e-10, rtol=0)
    assert not torch.allclose(logits, base(**batch).logits, atol=1e-3)  # the adapters did act


def test_the_distillation_loss_is_the_kl_worked_by_hand():
    student = [[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]]
    teacher = [[2.0, 0.0, 1.0], [1.0, 1.0, 1.0]]
    temperature = 2.0

    def softmax(row):
        exps = [math.exp(x / temperature) for x in row]
        return [e / sum(exps) for e in exps]

    kls = [sum(p * math.log(p / q) for p, q in zip(softmax(t), softmax(s))) for s, t in zip(student, teacher)]
    expected = sum(kls) / len(kls) * temperature ** 2
    got = distillation_loss(torch.tensor(student, dtype=torch.float64), torch.tensor(teacher, dtype=torch.float64),
                            temperature)
    assert got.item() == pytest.approx(expected, rel=1e-12)
    # a position the mask leaves out counts for nothing
    masked = distillation_loss(torch.tensor([student]), torch.tensor([teacher]), temperature, torch.tensor([[1, 0]]))
    assert masked.item() == pytest.approx(kls[0] * temperature ** 2, rel=1e-6)


BLOCKED = """
import sys, torch
sys.modules["headprune"] = None  # headprune blocked from import: transformers' own class only
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float64)
ids = torch.tensor([[int(i) for i in sys.argv[2].split(",")]])
with torch.no_grad():
    print(" ".join(repr(x) for x in model(input_ids=ids).logits.flatten().tolist()))
"""


def test_a_recovered_uniform_model_exports_stock_and_loads_without_headprune(world, tmp_path):
    from headprune.models.stock import save_stock

    full, tokenizer, train, test = world
    uniform = [("dec_self", 0, 0), ("dec_self", 0, 1), ("dec_self", 1, 0), ("dec_self", 1, 1)]  # a kv group a layer
    recovered = recover(remove_heads(copy.deepcopy(full), uniform), tokenizer, train, "lora", steps=5,
                        test_items=test, progress=False)
    folder = save_stock(recovered, tokenizer, tmp_path / "recovered", recovery=recovered.config.headprune_recovery)
    assert not list(folder.glob("*.py"))
    card = (folder / "README.md").read_text()
    assert "recovered: lora, 5 steps" in card
    ids = test.sources[0]
    run = subprocess.run([sys.executable, "-c", BLOCKED, str(folder), ",".join(map(str, ids))], capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONPATH": "", "OMP_NUM_THREADS": "1"})
    plain = torch.tensor([float(x) for x in run.stdout.split()], dtype=torch.float64)
    with torch.no_grad():
        want = recovered(input_ids=torch.tensor([ids])).logits.flatten()
    assert torch.allclose(plain, want, atol=1e-10, rtol=0)


@pytest.mark.parametrize("arguments, key", [
    ({"method": "lorax"}, "method: unknown recovery method 'lorax'; did you mean 'lora'"),
    ({"steps": 0}, "steps: 0: the step budget must be an integer of at least 1"),
    ({"lora_targets": ("q_proj", "nothing_here")}, "lora_targets: 'nothing_here' names no linear projection"),
    ({"method": "distill"}, "teacher: method 'distill' distils from the unpruned model"),
])
def test_bad_input_is_one_line_naming_the_key(world, arguments, key):
    full, tokenizer, train, _ = world
    with pytest.raises(RecoveryError) as error:
        recover(copy.deepcopy(full), tokenizer, train, **{"method": "lora", "steps": 1, **arguments})
    assert str(error.value).startswith(key) and "\n" not in str(error.value)


@pytest.fixture(scope="module")
def pruned_folder(world, tmp_path_factory):
    """The world's model, a free layout pruned (remote code), saved with its test and training texts."""
    from headprune.models.export import save_pruned

    full, tokenizer, _, _ = world
    where = tmp_path_factory.mktemp("cli")
    save_pruned(remove_heads(copy.deepcopy(full).float(), [("dec_self", 0, 1), ("dec_self", 0, 2)]), tokenizer,
                where / "pruned")
    copy.deepcopy(full).float().save_pretrained(where / "full")
    tokenizer.save_pretrained(where / "full")
    (where / "train.txt").write_text(sentences(1, 300))
    (where / "test.txt").write_text(sentences(2, 60))
    return where


def test_the_command_recovers_a_model_folder(pruned_folder, caplog):
    from headprune.cli import main
    from headprune.models.loading import load_model

    where = pruned_folder
    with caplog.at_level("INFO", logger="headprune"):
        main(["recover", str(where / "pruned"), "--data", str(where / "train.txt"), "--test", str(where / "test.txt"),
              "--window", "16", "--method", "distill", "--teacher", str(where / "full"), "--steps", "15", "--lr", "3e-3",
              "--out", str(where / "recovered")])
    card = (where / "recovered" / "README.md").read_text()
    before, after = map(float, re.search(r"perplexity (\S+) pruned, (\S+) recovered", card).groups())
    assert after < before and "recovered: distill, 15 steps" in card and "custom_code" in card  # a free layout
    model, _ = load_model(where / "recovered")
    assert model.model.layers[0].self_attn.q_proj.out_features == 16


@pytest.mark.parametrize("options, line", [
    (["--steps", "0"], "headprune: error: --steps: 0: the step budget must be an integer of at least 1\n"),
    (["--steps", "2", "--method", "lorra"], "headprune: error: --method: unknown recovery method 'lorra'; did you mean "
                                            "'lora'? (known: lora, full, distill)\n"),
    (["--steps", "2", "--lora-targets", "q_proj,zz"], "headprune: error: --lora-targets: 'zz' names no linear projection"),
])
def test_the_command_refuses_bad_input_in_one_line(pruned_folder, options, line, capsys):
    from headprune.cli import main

    where = pruned_folder
    with pytest.raises(SystemExit) as stop:
        main(["recover", str(where / "pruned"), "--data", str(where / "train.txt"), "--window", "16", *options,
              "--out", str(where / "nothing")])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith(line) and error.count("\n") == 1
    assert not (where / "nothing").exists()


# --- the stage: config, its checks, the scorecard's R1, Figure 3's markers --------------------------------------


def demo_with(tmp_path, edit):
    from dry_run import write_config

    from headprune.studies import Pipeline

    return Pipeline.from_file(write_config(tmp_path / "config.yaml", edit))


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["recovery"].update(methods=["lora", "lorax"]), "['recovery']['properties']['methods']"),
    (lambda c: c["recovery"].update(steps=0), "['recovery']['properties']['steps']"),
    (lambda c: c["recovery"].update(export="distill", methods=["lora"]),
     "config: recovery.export is 'distill', not one of recovery.methods ['lora']"),
    (lambda c: c["recovery"]["per_study"].update(nope={"lr": 1.0}),
     "config: recovery.per_study names 'nope', which is no study"),
    (lambda c: c["experiments"]["recovery"].append("tiny_llama_streaming"),
     "config: experiments.recovery names 'tiny_llama_streaming', which has no pruning curve in the importance order"),
    (lambda c: c["experiments"]["recovery"].append("tiny_llama_passkey"),
     "config: experiments.recovery names 'tiny_llama_passkey', a lm_eval study, which has no training data"),
])
def test_a_bad_recovery_section_is_refused_naming_the_key(tmp_path, edit, message):
    from headprune.io.config_error import ConfigError

    with pytest.raises(Exception) as error:  # the schema's (Snakemake's validator) or the stage's check
        demo_with(tmp_path, edit)
    assert message in str(error.value), str(error.value)
    if isinstance(error.value, ConfigError):
        assert "\n" not in str(error.value)


def test_the_demo_recovers_two_studies_at_two_points(tmp_path):
    from headprune import stages
    from headprune.studies import Pipeline

    demo = Pipeline.from_file(stages.__file__.rsplit("/headprune/", 1)[0] + "/demo/config.yaml")
    assert [s.name for s in demo.experiment_studies("recovery")] == ["tiny_llama", "mnli"]
    llama = demo.study("tiny_llama")
    params = stages.recovery.params(llama)
    assert params["percents"] == [30, 50] and params["methods"] == ["lora", "full", "distill"]
    # training windows from the train split, the test windows from the test split
    assert params["train"]["windows"].endswith("/train.npy") and params["eval"]["windows"].endswith("/test.npy")
    assert stages.recovery.curve(llama)["curve"].endswith("pruning/all/importance+random.csv")
    assert f"{demo.results_dir}/tiny_llama/recovered" in demo.targets()
    assert stages.figures.figure3_recovery(demo.study("demo_en_fr")) == []
    assert stages.figures.figure3_recovery(llama) == [stages.recovery.table(llama)]
    mnli = stages.recovery.params(demo.study("mnli"))  # its own points and learning rate (recovery.per_study)
    assert mnli["percents"] == [60, 70] and mnli["settings"]["lr"] == demo.config["bert"]["finetune"]["lr"]
    assert mnli["train"]["tsv"].endswith("/train.tsv") and mnli["settings"]["steps"] == 2 * params["settings"]["steps"]


def test_r1_says_how_much_of_the_loss_each_method_wins_back():
    import pandas as pd

    from headprune.report.claims import REPRODUCED
    from headprune.report.claims.ours import won_back
    from headprune.report.scorecard import judged

    # perplexity: unpruned 10, pruned 20, recovered 12 -> (20 - 12) / (20 - 10) = 80% won back
    assert won_back(10.0, 20.0, 12.0, "perplexity") == pytest.approx(80.0)
    assert won_back(0.80, 0.60, 0.65, "accuracy") == pytest.approx(25.0)
    table = pd.DataFrame([{"study": "s", "percent_pruned": p, "method": m, "metric": "accuracy", "score_unpruned": 0.8,
                           "score_pruned": 0.6, "score_recovered": r, "steps": steps}
                          for p in (30, 50) for m, r, steps in (("lora", 0.75, 40), ("bias_compensation", 0.62, 0))])
    (row,) = judged("R1", recovery=table)
    assert row["verdict"] == REPRODUCED and "lora 75%" in row["this_run"] and "bias_compensation 10%" in row["this_run"]
    assert judged("R1", recovery=table.assign(score_recovered=0.62))[0]["verdict"] != REPRODUCED
    # bias compensation trains nothing (steps 0): it alone winning back the loss does not reproduce R1
    only_bias = table.assign(score_recovered=table["method"].map({"lora": 0.62, "bias_compensation": 0.79}))
    assert judged("R1", recovery=only_bias)[0]["verdict"] != REPRODUCED
    assert judged("R1", recovery=pd.DataFrame()) == []


def test_figure3_draws_a_marker_per_method_at_the_recovered_points():
    import pandas as pd

    from headprune.report.figures.pruning import build_figure3

    curve = pd.DataFrame([{"study": "s", "order": "importance", "scope": "all", "layout": "free", "step": i,
                           "percent_pruned": 10.0 * i, "score": 10.0 + i, "metric": "perplexity"} for i in range(11)])
    recovery = pd.DataFrame([{"study": "s", "percent_pruned": p, "method": m, "score_recovered": 10.5 + p / 100}
                             for p in (30.0, 50.0) for m in ("lora", "full", "distill", "bias_compensation")])
    figure = build_figure3(curve, recovery=recovery)
    points = {tuple(map(tuple, c.get_offsets())) for c in figure.axes[0].collections}
    assert points == {((30.0, 10.8), (50.0, 11.0))}  # the four methods' markers, each at both points
    assert len(figure.axes[0].collections) == 4
    assert "recovered: LoRA" in [t.get_text() for t in figure.axes[0].get_legend().get_texts()]


def test_the_real_model_config_plans_one_recover_job_on_a_gpu():
    from dry_run import job_stats, planned_jobs

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    run = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", "configs/llama_recovery.yaml"],
                         capture_output=True, text=True, cwd=root, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert job_stats(run.stdout)["recover"] == 1
    (resources,) = [r for rule, r in planned_jobs(run.stdout, "resources") if rule == "recover"]
    assert resources["gpu"] == "1"


def test_a_percent_between_the_curves_steps_takes_the_step_below():
    import pandas as pd

    from headprune.training.recovery import curve_points

    curve = pd.DataFrame([{"order": "importance", "layout": "free", "percent_pruned": p, "score": 10.0 + p,
                           "metric": "perplexity"} for p in (0.0, 20.0, 40.0)])
    steps = {"orders": {"importance": [{"percent_pruned": 0.0, "removed": []},
                                       {"percent_pruned": 20.0, "removed": ["dec_self-0-1"]},
                                       {"percent_pruned": 40.0, "removed": ["dec_self-0-1", "dec_self-1-3"]}]}}
    (at30, at40) = curve_points(curve, steps, [30, 40])
    assert (at30["percent_pruned"], at30["heads"], at30["score_pruned"]) == (20.0, [("dec_self", 0, 1)], 30.0)
    assert (at40["heads"], at40["score_pruned"], at40["score_unpruned"]) == ([("dec_self", 0, 1), ("dec_self", 1, 3)],
                                                                             50.0, 10.0)


def test_a_translation_study_recovers_on_its_training_bitext(tmp_path):
    """Not the importance sets the screens read, nor a test set: translation.train_sets' first (the demo's 'train';
    the importance sets where it names none)."""
    from headprune import stages

    demo = demo_with(tmp_path, lambda c: c["experiments"]["recovery"].append(c["translation"]["name"]))
    study = demo.study(demo.translation_name)
    train = stages.recovery.params(study)["train"]
    assert demo.config["translation"]["train_sets"] == ["train"]
    assert (train["source"], train["reference"]) == tuple(demo.testset_files("train"))
    assert train["max_items"] == demo.config["recovery"]["train_items"] and train["name"] == "train (recovery)"
    assert set(stages.recovery.train_data(study)) == set(demo.testset_files("train"))
    tested = {f for role in ("eval", "ood", "selection", "test") if study.evalset_name(role)
              for f in demo.testset_files(study.evalset_name(role))}
    assert not tested & set(stages.recovery.train_data(study))

    def without_train_sets(config):
        config["experiments"]["recovery"].append(config["translation"]["name"])
        del config["translation"]["train_sets"]

    fallback = demo_with(tmp_path, without_train_sets)
    first = fallback.config["translation"]["importance_sets"][0]
    assert stages.recovery.params(fallback.study(fallback.translation_name))["train"]["source"] == \
        fallback.testset_files(first)[0]


@pytest.mark.parametrize("method", ["lora", "full", "distill"])
def test_each_method_trains_an_encoder_decoder(method):
    """A translation model (FSMT) pruned and recovered on its own batches: the loss falls, and distillation's KL
    is over the target's positions (the decoder's mask), which the source's mask does not fit."""
    from conftest import fsmt_batch, tiny_fsmt

    torch.manual_seed(0)
    full = tiny_fsmt().float()
    pruned = copy.deepcopy(full)
    remove_heads(pruned, [("enc_self", 0, 1), ("dec_self", 1, 2), ("enc_dec", 0, 0)])
    batches = [fsmt_batch(seed=s) for s in (1, 2)]
    batches[1] = {k: v for k, v in fsmt_batch(seed=2, src_len=9, tgt_len=5).items()}  # source and target differ
    settings = RecoverySettings(steps=30, lr=3e-3, batch_size=3, seed=0, lora_rank=4, lora_alpha=8)
    done = recovery.train(recovery.method_of(method), pruned, full if method == "distill" else None, batches,
                          settings, torch.device("cpu"), progress=False)
    assert done["last_loss"] < done["first_loss"]


def test_a_toy_recovery_method_is_its_class(world, monkeypatch):
    """docs/layout.md's recipe: a method is a ``Method`` class registered in ``METHODS``, reached by ``recover`` (and so
    by the stage and the command, which call it with the word). The toy trains the output projections alone."""
    full, tokenizer, train, test = world

    class OutputsOnly(recovery.Method):
        word = "outputs_only"

        def prepare(self, model, settings):
            for name, parameter in model.named_parameters():
                parameter.requires_grad_(name.endswith("o_proj.weight"))
            return model

        def finish(self, trained, model):
            for parameter in model.parameters():
                parameter.requires_grad_(True)
            return model

    monkeypatch.setitem(recovery.METHODS, "outputs_only", OutputsOnly)
    pruned = remove_heads(copy.deepcopy(full), [("dec_self", 0, 0), ("dec_self", 1, 2)])
    before = {name: p.detach().clone() for name, p in pruned.named_parameters()}
    loss_before = held_out_loss(pruned, tokenizer, test)
    recovered = recover(pruned, tokenizer, train, "outputs_only", steps=10, lr=3e-3, batch_size=8, seed=0,
                        progress=False)
    changed = {name for name, p in recovered.named_parameters() if not torch.equal(p, before[name])}
    assert changed and all(name.endswith("o_proj.weight") for name in changed)
    assert held_out_loss(recovered, tokenizer, test) < loss_before
    assert recovered.config.headprune_recovery["method"] == "outputs_only"
