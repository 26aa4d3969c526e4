"""Demo: a multiple-choice task in lm-evaluation-harness's YAML format over the tiny Llama's language.

Each item is a passage of the corpus's test split with a needle sentence in it ("The special magic number
is 15306.", headprune.demo.passkey), the question after it, and four numbers to end the answer with: the
needle's and three others. The model (trained on passkey documents cut from its train split) picks the
needle's number by copying it from the passage, which takes attention heads: with every head masked it
guesses. The task is a YAML file with local JSON-lines data (a test split, a validation split for few-shot
examples and a train split whose gold answers I_h is estimated on), as a user without hub access writes one for lm-evaluation-harness (docs/lm_eval.md).
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from headprune.data.wikitext import read_wikitext
from headprune.demo.passkey import ANSWER_PREFIX, NEEDLE, QUESTION, VALUE_RANGE
from headprune.io.atomic import atomic_path

TASK_YAML = """\
# lm-evaluation-harness task: which number did the passage say (a needle in a short haystack, as multiple choice)
task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {test}
    validation: {validation}
    train: {train}
test_split: test
training_split: train
fewshot_split: validation
output_type: multiple_choice
doc_to_text: "{{{{passage}}}}\\n{{{{question}}}}\\n{{{{answer_prefix}}}}"
doc_to_target: "{{{{label}}}}"
doc_to_choice: "{{{{choices}}}}"
target_delimiter: " "
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
"""


def sentences(text: str) -> list[str]:
    """The corpus's sentences, each with its full stop; headings (" = Article 3 = ") are not sentences."""
    return [f"{' '.join(sentence.split())}." for line in text.splitlines() if not line.strip().startswith("=")
            for sentence in line.split(".") if sentence.split()]


def items(text: str, count: int, rng: random.Random, *, choices: int = 4, passage: tuple = (3, 10)) -> list[dict]:
    """``count`` items: a passage of ``passage`` sentences with the needle at a sentence boundary, and
    ``choices`` values to answer with, the needle's at the index ``label``."""
    found = sentences(text)
    if len(found) < passage[1] + 1:
        raise ValueError(f"the corpus split has {len(found)} sentences; passages take up to {passage[1]}")
    made = []
    for _ in range(count):
        length = rng.randint(*passage)
        start = rng.randrange(len(found) - length)
        hay = found[start:start + length]
        values = rng.sample(range(VALUE_RANGE[0], VALUE_RANGE[1] + 1), choices)
        hay.insert(rng.randint(0, length), NEEDLE.format(value=values[0]))
        label = rng.randrange(choices)
        options = [f"{value}." for value in values[1:]]
        options.insert(label, f"{values[0]}.")
        made.append({"passage": " ".join(hay), "question": QUESTION, "answer_prefix": ANSWER_PREFIX,
                     "choices": options, "label": label})
    return made


def make_passkey_task(corpus_zip, out_yaml, *, items_per_split: dict, seed: int = 0, name: str = "demo_passkey"):
    """Write the task YAML and its test, validation and train JSON-lines files beside it (passages of the
    corpus's split of the same name; the model trained on passkey documents of its train split)."""
    out_yaml = Path(out_yaml)
    out_yaml.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    files = {}
    for split in ("test", "validation", "train"):  # in this order: a split added later leaves the others as they were
        path = out_yaml.with_name(f"{out_yaml.stem}.{split}.jsonl")
        rows = items(read_wikitext(corpus_zip, split), items_per_split[split], rng)
        with atomic_path(path) as tmp:
            tmp.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        files[split] = path
    with atomic_path(out_yaml) as tmp:
        tmp.write_text(TASK_YAML.format(name=name, test=json.dumps(str(files["test"])),
                                        validation=json.dumps(str(files["validation"])),
                                        train=json.dumps(str(files["train"]))), encoding="utf-8")
    return out_yaml
