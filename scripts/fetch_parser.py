"""Download Stanza's dependency-parser model (roles.stanza) for the head-role analysis."""
from headprune.data.parsing import fetch_stanza
from headprune.workflow import logged

with logged(snakemake) as log:
    s = snakemake.params.stanza
    fetch_stanza(snakemake.output[0], s["lang"], s["package"], s["resources_url"])
    log.info("stanza %s (%s) in %s", s["lang"], s["package"], snakemake.output[0])
