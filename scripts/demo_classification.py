"""Demo: synthetic tasks as GLUE's MNLI.zip and SST-2.zip, and a tiny "pretrained" BERT as a model-folder tarball."""
import shutil
import tarfile
from pathlib import Path

from headprune.demo import demo_vocabulary, make_classification_task, make_tiny_bert
from headprune.workflow import logged

with logged(snakemake) as log:
    s, bert, seed = snakemake.params.settings, snakemake.params.bert, snakemake.params.seed
    workdir = Path(snakemake.params.workdir)
    task = make_classification_task(workdir / "mnli", "mnli", s["train_examples"], s["dev_examples"],
                                    s["dev_examples"], seed)
    shutil.copyfile(task["glue_zip"], snakemake.output.archive)
    sst2 = make_classification_task(workdir / "sst2", "sst2", s["train_examples"], s["dev_examples"], seed=seed)
    shutil.copyfile(sst2["glue_zip"], snakemake.output.sst2_archive)
    folder = make_tiny_bert(workdir / "bert-tiny", demo_vocabulary(), layers=bert["layers"], heads=bert["heads"],
                            hidden=bert["hidden"], seed=seed, pretrain_steps=bert["pretrain_steps"])
    with tarfile.open(snakemake.output.pretrained, "w:gz") as archive:
        archive.add(folder, arcname="bert-tiny")
    log.info("demo tasks %s, %s and pretrained model %s written", snakemake.output.archive,
             snakemake.output.sst2_archive, snakemake.output.pretrained)
