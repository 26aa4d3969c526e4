"""Train the training-dynamics model (Figure 5) and write a fairseq tarball at each checkpoint epoch."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from pathlib import Path

from headprune.io import atomic
from headprune.models.loading import pick_device
from headprune.training.train import train_translation_model, write_translation_tarball
from headprune.workflow import logged

with logged(snakemake) as log:
    settings, train = snakemake.params.settings, dict(snakemake.params.train)
    src, tgt = settings["src_lang"], settings["tgt_lang"]
    corpus = Path(snakemake.input.bpecodes).parent
    tarballs = dict(zip(train["checkpoint_epochs"], snakemake.output.checkpoints))
    device = pick_device(settings["device"])

    def save(epoch, model, record):
        write_translation_tarball(model, corpus, tarballs[epoch], f"{settings['name']}.epoch{epoch}", src, tgt)
        log.info("epoch %d: train loss %.4f, valid nll %s -> %s", epoch, record["train_loss"], record["valid_nll"],
                 tarballs[epoch])

    run = train_translation_model(
        corpus, layers=settings["layers"], heads=settings["heads"], d_model=settings["d_model"], ffn=settings["ffn"],
        src_lang=src, tgt_lang=tgt, valid=(snakemake.input.valid_src, snakemake.input.valid_tgt), on_checkpoint=save,
        device=device, num_threads=snakemake.threads, progress=True, **train,
    )
    atomic.write_csv(run.history_frame().assign(study=settings["name"]), snakemake.output.history, index=False)
    log.info("trained %d epochs on %s", len(run.history), device)
