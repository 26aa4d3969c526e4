"""Figure 5 (rules/dynamics.smk): the IWSLT model the pipeline trains itself, whose checkpoints go through the same
importance and pruning scripts as the studies (config section ``dynamics``), and its share of the scorecard (C5)."""
from __future__ import annotations

import functools
from pathlib import Path

from headprune.io.config_error import ConfigError
from headprune.io.download import local_source

SPLITS = ("train", "valid", "test")  # what prepare_iwslt writes; the importance and eval sets are two of them


class Dynamics:
    """Figure 5: the IWSLT model the pipeline trains itself, whose checkpoints go through the same
    importance and pruning scripts as the studies (config section ``dynamics``)."""

    def __init__(self, pipeline, section: dict):
        self.pipeline, self.section = pipeline, section
        self.name = section["name"]
        self.folder = f"{pipeline.data_dir}/{self.name}"

    def split_files(self, split):
        """[source, reference] of a prepared IWSLT split."""
        return [f"{self.folder}/{split}.{self.section[lang]}" for lang in ("src_lang", "tgt_lang")]

    @property
    def prepared_files(self):
        """What prepare_iwslt writes (named outputs; train_dynamics takes them all as inputs)."""
        section = self.section
        files = {f"{split}_{side}": path for split in SPLITS
                 for side, path in zip(("src", "tgt"), self.split_files(split))}
        files.update(bpecodes=f"{self.folder}/bpecodes", summary=f"{self.folder}/prepare.json",
                     **{f"dict_{side}": f"{self.folder}/dict.{section[lang]}.txt"
                        for side, lang in (("src", "src_lang"), ("tgt", "tgt_lang"))})
        return files

    @property
    def archive_path(self):
        return f"{self.pipeline.data_dir}/raw/{self.name}/{Path(self.section['data']['url']).name}"

    @property
    def local_sources(self):
        return local_source(self.section["data"])

    @property
    def prepare_settings(self):
        keys = ("src_lang", "tgt_lang", "lowercase", "bpe_merges", "valid_every", "test_sets", "clean", "expected_sizes")
        return {key: self.section.get(key) for key in keys}

    @property
    def model_settings(self):
        keys = ("name", "src_lang", "tgt_lang", "layers", "heads", "d_model", "ffn")
        return {**{key: self.section[key] for key in keys}, "device": self.pipeline.config["device"]}

    @property
    def epochs(self):
        return list(self.section["train"]["checkpoint_epochs"])

    def checkpoint(self, epoch):
        return f"{self.pipeline.results_dir}/{self.name}/checkpoints/epoch{epoch}.tar.bz2"

    @property
    def checkpoints(self):
        return [self.checkpoint(epoch) for epoch in self.epochs]

    def study_params(self, epoch):
        """The study dict scripts/importance.py and scripts/prune.py read, for one checkpoint epoch."""
        section = self.section
        return {"name": self.name, "kind": "translation", "section": "dynamics", "model": self.checkpoint(epoch),
                "src_lang": section["src_lang"], "tgt_lang": section["tgt_lang"], "layers": section["layers"],
                "heads": section["heads"], "device": self.pipeline.config["device"]}

    @property
    def importance_data(self):
        return self.split_files(self.section["importance_set"])

    @property
    def eval_data(self):
        return self.split_files(self.section["eval_set"])

    def importance_params(self):
        source, reference = self.importance_data
        section = self.section
        return {"kind": "translation", "sets": [{"source": source, "reference": reference}],
                "batch_size": section["importance_batch_size"], "max_items": section.get("max_sentences")}

    def pruning_params(self):
        section, pruning = self.section, self.pipeline.config["pruning"]
        source, reference = self.eval_data
        return {"eval": {"kind": "translation", "source": source, "reference": reference, "lang": section["tgt_lang"],
                         "max_items": section.get("max_sentences"), "name": section["eval_set"]},
                "settings": {"batch_size": section["batch_size"], "beam": section["beam"], "lenpen": section["lenpen"],
                             "bleu": pruning["bleu"]},
                "step_percent": section.get("step_percent", pruning["step_percent"]),
                "layouts": ["free"],  # Figure 5 follows the paper's layout
                "random_seed": pruning["random_seed"]}

    @property
    def pruning_tables(self):
        results = self.pipeline.results_dir
        return [f"{results}/{self.name}/epoch{epoch}/pruning_importance.csv" for epoch in self.epochs]

    @property
    def figures(self):
        """Figure 5 and the CSV it is drawn from."""
        return [f"{self.pipeline.figures_dir}/{self.name}/figure5.{ext}" for ext in ("png", "pdf", "csv")]


@functools.cache
def of(pipeline) -> Dynamics | None:
    """The config's dynamics section resolved, or None without one (no Figure 5)."""
    return Dynamics(pipeline, pipeline.config["dynamics"]) if pipeline.config.get("dynamics") else None


def epochs(pipeline) -> list[int]:
    """The checkpoint epochs, in the order of its pruning tables (the scorecard's C5 reads them so)."""
    dynamics = of(pipeline)
    return dynamics.epochs if dynamics else []


def targets(pipeline) -> list[str]:
    dynamics = of(pipeline)
    return dynamics.figures if dynamics else []


def report_inputs(pipeline) -> dict[str, list[str]]:
    dynamics = of(pipeline)
    return {"dynamics": dynamics.pruning_tables if dynamics else []}  # in the order of epochs()


def scorecard_models(pipeline) -> dict[str, str]:
    dynamics = of(pipeline)
    return {dynamics.name: "IWSLT"} if dynamics else {}


def check(pipeline):
    dynamics = of(pipeline)
    if dynamics is None:
        return
    section, train = dynamics.section, dynamics.section["train"]
    kept = train["checkpoint_epochs"]
    if kept != sorted(set(kept)) or not all(1 <= e <= train["epochs"] for e in kept):
        raise ConfigError(f"config: dynamics.train.checkpoint_epochs {kept} must be increasing epochs "
                          f"within 1..dynamics.train.epochs ({train['epochs']})")
    if dynamics.name in pipeline.study_names:
        raise ConfigError(f"config: dynamics.name '{dynamics.name}' is also a study name "
                          "(translation.name or a glue task)")
    for key in ("importance_set", "eval_set"):
        if section[key] not in SPLITS:
            raise ConfigError(f"config: dynamics.{key} is '{section[key]}', not one of {list(SPLITS)}")
    if train.get("lr_schedule") == "inverse_sqrt" and not train.get("warmup_updates"):
        raise ConfigError("config: dynamics.train.lr_schedule inverse_sqrt needs dynamics.train.warmup_updates")
