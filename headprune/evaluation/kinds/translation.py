"""Translation: an encoder-decoder scored by BLEU of its beam-search translations (the paper's WMT and
IWSLT models); significance by compare-mt's paired bootstrap over sentences."""
from __future__ import annotations

from headprune.evaluation import metrics, stats
from headprune.evaluation.kinds import base


class Plan(base.VoitaRoles, base.Plan):
    """The configured test sets by role; the importance sets and training bitext named in the translation section."""

    config_properties = {
        "src_code": {"type": "string", "description": "the tokenizer's source language code (mBART, NLLB: eng_Latn)"},
        "tgt_code": {"type": "string", "description": "the target language code, forced as the first token"},
        "source_prefix": {"type": "string", "description": "text put before every source sentence (T5: 'translate "
                          "English to French: '); default: the one the checkpoint's config declares for the languages "
                          "(task_specific_params)"}}

    def evalset_name(self, study, role):
        key = {"eval": "eval_set", "ood": "ood_set", "selection": "selection_set", "test": "test_set"}[role]
        return study.named_set(role, "translation", key, study.config["translation"].get(key))

    def evalset_spec(self, study, role, name):
        t = study.config["translation"]
        source, reference = study.pipeline.testset_files(name)
        return {"kind": "translation", "source": source, "reference": reference, "lang": t["tgt_lang"],
                "max_items": t.get("max_sentences"), "name": name}

    def eval_data(self, study, roles):
        return sorted({f for role in roles for f in study.pipeline.testset_files(study.evalset_name(role))})

    def eval_settings(self, study, bleu, rows):
        t = study.config["translation"]
        return {"batch_size": study.entry.get("batch_size", t["batch_size"]), "beam": t["beam"],
                "lenpen": t["lenpen"], "bleu": bleu, "variant_batch_size": rows}

    def _sets(self, study, names):
        return [dict(zip(("source", "reference"), study.pipeline.testset_files(name))) for name in names]

    def importance_data(self, study):
        return [f for name in study.config["translation"]["importance_sets"] for f in study.pipeline.testset_files(name)]

    def importance_spec(self, study):
        t = study.config["translation"]
        return {"kind": "translation", "sets": self._sets(study, t["importance_sets"]),
                "batch_size": t["importance_batch_size"], "max_items": t.get("max_sentences")}

    def screen_evalset_spec(self, study, items):
        # the first ``items`` sentences of the first importance set (newstest2009 in the paper's config)
        t = study.config["translation"]
        name = t["importance_sets"][0]
        source, reference = study.pipeline.testset_files(name)
        return {"kind": "translation", "source": source, "reference": reference, "lang": t["tgt_lang"],
                "max_items": items, "name": f"{name} (screen)"}

    def train_data(self, study):
        return [f for name in study.pipeline.translation_train_sets for f in study.pipeline.testset_files(name)]

    def recovery_evalset_spec(self, study, items):
        # the first ``items`` sentence pairs of the training bitext (translation.train_sets; the importance sets
        # where it names none)
        name = study.pipeline.translation_train_sets[0]
        source, reference = study.pipeline.testset_files(name)
        return {"kind": "translation", "source": source, "reference": reference,
                "lang": study.config["translation"]["tgt_lang"], "max_items": items, "name": f"{name} (recovery)"}

    def train_spec(self, study, batch_size):
        concrete = study.config["concrete"]
        return {"kind": "translation", "sets": self._sets(study, study.pipeline.translation_train_sets),
                "batch_size": batch_size, "max_items": concrete["max_items"], "seed": concrete["seed"]}

    def training_texts(self, train):
        from headprune.data.datasets import read_lines

        return [line for s in train["sets"] for line in read_lines(s["source"])[:train["max_items"]]]

    def speed_data(self, study):
        return study.pipeline.testset_files(study.evalset_name("eval"))

    def speed_settings(self, study, speed):
        return {"beam": study.config["translation"]["beam"], "lenpen": study.config["translation"]["lenpen"]}

    def parse_text(self, study):
        return study.pipeline.testset_files(study.evalset_name("eval"))[:1]


class Kind(base.Kind):
    name = "translation"
    study_side = Plan
    attention_types = ["enc_self", "enc_dec", "dec_self"]
    timed_as = "translation model, beam search"
    timed_outputs = "translations"
    model_kind = "translation"
    data_help = "with --kind translation, a TSV of sentence pairs (source<TAB>reference, no header), scored by BLEU"

    def load_evalset(self, spec):
        from headprune.data.datasets import read_lines
        from headprune.evaluation.evalset import EvalSet

        limit = spec.get("max_items")
        sources, references = read_lines(spec["source"]), read_lines(spec["reference"])
        if len(sources) != len(references):
            raise ValueError(f"{spec['source']} has {len(sources)} lines but {spec['reference']} has {len(references)}")
        return EvalSet("translation", references[:limit], sources[:limit], "bleu", spec["lang"])

    def run_variants(self, model, tokenizer, evalset, gates_list, settings):
        from headprune.evaluation.evaluate import translate_variants

        return translate_variants(model, tokenizer, evalset.sources, gates_list, beam=settings.beam,
                                  lenpen=settings.lenpen, batch_size=settings.batch_size,
                                  variant_batch_size=settings.variant_batch_size, progress=settings.progress)

    def score(self, evalset, outputs, bleu="detokenized"):
        if bleu == "tokenized":
            return metrics.bleu_tokenized(outputs, evalset.references, evalset.lang)
        return metrics.bleu_detokenized(outputs, evalset.references)

    def significance(self, evalset, full_outputs, ablated_outputs, *, resamples, seed):
        boot = stats.paired_bootstrap_bleu(full_outputs, ablated_outputs, evalset.references,
                                           n_resamples=resamples, seed=seed, lang=evalset.lang)
        return base.bootstrap_only(boot.p_value)

    def scoring_batches(self, tokenizer, evalset, batch_size, max_length):
        from headprune.data.batching import translation_batches

        return translation_batches(tokenizer, evalset.sources, evalset.references, batch_size)

    def importance_batches(self, tokenizer, data, model=None):
        from headprune.data.batching import translation_batches
        from headprune.data.datasets import read_lines

        sources, references = [], []
        for testset in data["sets"]:
            sources += read_lines(testset["source"])[:data["max_items"]]
            references += read_lines(testset["reference"])[:data["max_items"]]
        start = getattr(model.config, "decoder_start_token_id", None) if model is not None else None
        return translation_batches(tokenizer, sources, references, data["batch_size"], decoder_start_token_id=start)

    def evalset_from_file(self, path, tokenizer, options):
        from pathlib import Path

        from headprune.data.datasets import read_lines
        from headprune.evaluation.evalset import EvalSet

        pairs = [line.split("\t") for line in read_lines(path)][:options["max_items"]]
        bad = next((number for number, pair in enumerate(pairs, 1) if len(pair) != 2), None)
        if bad is not None:
            raise ValueError(f"line {bad}: expected source<TAB>reference")
        evalset = EvalSet("translation", [reference for _, reference in pairs], [source for source, _ in pairs], "bleu")
        return evalset, Path(path).stem, f"{len(evalset)} sentence pairs: translation, scored by BLEU"

    def load_model(self, path, device, study, options):
        from headprune.models.loading import converted_from_fairseq, load_seq2seq, load_translation

        if converted_from_fairseq(path):
            return load_translation(path, study["src_lang"], study["tgt_lang"], device)
        return load_seq2seq(path, device, src_code=study.get("src_code"), tgt_code=study.get("tgt_code"),
                            source_prefix=study.get("source_prefix"),
                            languages=(study.get("src_lang", "en"), study.get("tgt_lang", "fr")), **options)
