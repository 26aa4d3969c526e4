"""Demo: synthetic tasks as GLUE's MNLI.zip, SST-2.zip and CoLA.zip and SentEval's MRPC files, and a
tiny "pretrained" BERT and RoBERTa as model-folder tarballs."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from pathlib import Path

from headprune.data.glue import read_glue_split
from headprune.demo.classification import make_classification_task
from headprune.demo.grammar import demo_vocabulary
from headprune.demo.models import make_tiny_bert, make_tiny_roberta
from headprune.io import atomic
from headprune.workflow import logged

with logged(snakemake) as log:
    s, bert, seed = snakemake.params.settings, snakemake.params.bert, snakemake.params.seed
    workdir = Path(snakemake.params.workdir)
    out = snakemake.output
    task = make_classification_task(workdir / "mnli", "mnli", s["train_examples"], s["dev_examples"],
                                    s["dev_examples"], seed)
    atomic.copy_file(task["glue_zip"], out.archive)
    # RoBERTa's byte-level BPE is learned on the MNLI-like training text (as roberta-base's on its corpus)
    pairs, _ = read_glue_split(task["train"])
    roberta = make_tiny_roberta(workdir / "roberta-tiny", [text for pair in pairs for text in pair if text],
                                layers=bert["layers"], heads=bert["heads"], hidden=bert["hidden"], seed=seed)
    with atomic.tar_writer(out.roberta, "w:gz") as archive:
        archive.add(roberta, arcname="roberta-tiny")
    for kind, archive in (("sst2", out.sst2_archive), ("cola", out.cola_archive)):
        task = make_classification_task(workdir / kind, kind, s["train_examples"], s["dev_examples"], seed=seed)
        atomic.copy_file(task["glue_zip"], archive)
    # MRPC's train file holds train_examples + dev_examples rows (the ids file picks dev), its test
    # file dev_examples rows.
    mrpc = make_classification_task(workdir / "mrpc", "mrpc", s["train_examples"], s["dev_examples"], seed=seed)
    for key in ("msr_paraphrase_train", "msr_paraphrase_test", "mrpc_dev_ids"):
        atomic.copy_file(mrpc[key], out[key])
    folder = make_tiny_bert(workdir / "bert-tiny", demo_vocabulary(), layers=bert["layers"], heads=bert["heads"],
                            hidden=bert["hidden"], seed=seed, pretrain_steps=bert["pretrain_steps"])
    with atomic.tar_writer(out.pretrained, "w:gz") as archive:
        archive.add(folder, arcname="bert-tiny")
    log.info("demo tasks %s and pretrained model %s written",
             ", ".join([out.archive, out.sst2_archive, out.cola_archive, out.msr_paraphrase_train]), out.pretrained)
