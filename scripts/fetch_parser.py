"""Download Stanza's dependency-parser model (roles.stanza) for the head-role analysis."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from headprune.data.parsing import fetch_stanza
from headprune.workflow import logged

with logged(snakemake) as log:
    s = snakemake.params.stanza
    fetch_stanza(snakemake.output[0], s["lang"], s["package"], s["resources_url"])
    log.info("stanza %s (%s) in %s", s["lang"], s["package"], snakemake.output[0])
