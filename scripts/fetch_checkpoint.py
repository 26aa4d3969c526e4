"""Download the fairseq translation tarball (resumable, checksum verified, atomic) and check it loads."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from headprune.io.download import fetch
from headprune.models.fairseq import fairseq_model_folder
from headprune.workflow import logged

with logged(snakemake) as log:
    checkpoint = snakemake.params.checkpoint
    path = fetch(checkpoint["url"], snakemake.output[0], checkpoint.get("sha256"))
    # Extract now (safely: no member may leave its folder) so a broken archive fails here.
    log.info("extracted %s to %s", path, fairseq_model_folder(path))
