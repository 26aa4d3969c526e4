"""Dependency parses for head roles: Stanza (the real run) or the demo's gold parses; word counts.

Stanza (Qi et al., 2020; Stanford NLP) is the parser: it installs from PyPI with the rest of the
package, predicts Universal Dependencies v2 relations (nsubj, obj, amod, advmod: exactly the ones
Voita et al.'s syntactic heads are scored on), has models for the languages of the paper's studies
(English, French, German), and loads them with torch.load(weights_only=True), so a fetched model
cannot run code. ``fetch_stanza`` downloads its model once (rule fetch_parser); ``parse_stanza``
then parses offline, never downloading.

Word counts for the rare-word role come from raw training text, split into words the way the
parses are: runs of word characters, and every other non-space character alone ("lisk." -> "lisk",
".") -- Stanza's English tokenization and the demo's gold parses both split this way on plain text.
"""
from __future__ import annotations

import collections
import re
from collections.abc import Iterable
from pathlib import Path

from headprune.io.atomic import atomic_dir

STANZA_PROCESSORS = "tokenize,pos,lemma,depparse"
_WORD = re.compile(r"\w+|[^\w\s]")


def text_words(line: str) -> list[str]:
    return _WORD.findall(line)


def text_frequencies(lines: Iterable[str]) -> collections.Counter:
    """Word counts of raw text (``text_words``)."""
    counts = collections.Counter()
    for line in lines:
        counts.update(text_words(line))
    return counts


def fetch_stanza(model_dir, lang: str = "en", package: str = "default",
                 resources_url: str = "https://raw.githubusercontent.com/stanfordnlp/stanza-resources/main") -> Path:
    """Download Stanza's model for ``lang`` into ``model_dir`` (md5-checked by Stanza); returns the folder."""
    import stanza

    model_dir = Path(model_dir)
    with atomic_dir(model_dir) as staging:  # a download cut short leaves no half-filled folder
        stanza.download(lang, model_dir=str(staging), package=package, resources_url=resources_url,
                        logging_level="INFO")
    return model_dir


def parse_stanza(sentences: list[str], model_dir, lang: str = "en", package: str = "default",
                 device: str = "cpu") -> str:
    """CoNLL-U of ``sentences`` (one sentence each: Stanza tokenizes, but does not split sentences)."""
    import stanza

    pipeline = stanza.Pipeline(lang, dir=str(model_dir), package=package, processors=STANZA_PROCESSORS,
                               download_method=None, tokenize_no_ssplit=True, device=device, logging_level="WARN")
    return stanza_conllu(pipeline("\n\n".join(sentence.replace("\n", " ") for sentence in sentences)))


def stanza_conllu(document) -> str:
    """A Stanza Document as CoNLL-U text (one block per sentence, sent_id from 1)."""
    from stanza.utils.conll import CoNLL

    blocks = []
    for number, sentence in enumerate(document.sentences, 1):
        lines = [f"# sent_id = {number}", f"# text = {sentence.text}"] if sentence.text else [f"# sent_id = {number}"]
        lines += ["\t".join(fields) for fields in CoNLL.convert_dict([sentence.to_dict()])[0]]
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks) + ("\n" if blocks else "")
