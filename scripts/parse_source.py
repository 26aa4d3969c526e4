"""Parse the eval set's source sentences (translation) or first texts (GLUE) into CoNLL-U."""
from headprune import warm

warm.start(snakemake)  # local runs: fork from a Python that has imported torch (headprune.warm)

from headprune.io import atomic
from headprune.workflow import load_evalset, logged

with logged(snakemake) as log:
    p = snakemake.params.parse
    evalset = load_evalset(p["eval"])
    sentences = [s if isinstance(s, str) else s[0] for s in evalset.sources]
    if p["parser"] == "demo":
        from headprune.demo.parses import demo_conllu

        conllu = demo_conllu(sentences)
    else:
        from headprune.data.parsing import parse_stanza

        conllu = parse_stanza(sentences, snakemake.input.parser[0], p["stanza"]["lang"], p["stanza"]["package"])
    atomic.write_text(snakemake.output[0], conllu, encoding="utf-8")
    log.info("%d sentences of %s parsed by %s", len(sentences), p["eval"]["name"], p["parser"])
