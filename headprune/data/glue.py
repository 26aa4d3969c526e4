"""GLUE tasks: each task is a plain dict (see ``GLUE_TASKS`` for the shape and the study's tasks), so a user adds
a task in the config without code. ``prepare_glue_task`` downloads it with ``download.fetch`` (sha256 checked),
extracts only the files it needs, and writes ``{split}.tsv`` files with the columns text_a, text_b, label (an
index into the task's labels); ``read_glue_split`` reads one back.
"""

from __future__ import annotations

import csv
import os
import shutil
import urllib.parse
import zipfile
from pathlib import Path, PurePosixPath
from typing import Iterable, NamedTuple

from headprune.data.datasets import DataFormatError, _atomic_text_writer, read_lines
from headprune.io.atomic import atomic_dir, atomic_path
from headprune.io.download import fetch

__all__ = ["GLUE_COLUMNS", "GLUE_TASKS", "extract_zip_members", "glue_task_spec", "prepare_glue_task",
           "read_glue_split"]

# The columns of every normalised split file written by prepare_glue_task.
GLUE_COLUMNS = ("text_a", "text_b", "label")

# A task is a dict with these keys:
#   name          the task's name, used in messages.
#   url, sha256   a zip archive holding the split files (sha256 optional but recommended).
#   files         optional {key: {"url": ..., "sha256": ...}}: plain files downloaded as they
#                 are, for tasks not shipped as one archive (MRPC).
#   splits        {split: where}. `where` is a member path inside the archive ("MNLI/train.tsv")
#                 or a dict: {"member": path} or {"file": key of `files`}, optionally with
#                 "rows_with_ids_in" / "rows_without_ids_in": key of `files`, a TSV of id tuples
#                 (no header) selecting rows by their `id_columns`.
#   header        true if the first line of each split file names the columns.
#   text_columns  one or two columns (names if header, else 0-based indices): text_a[, text_b].
#   label_column  the label's column (name or index).
#   labels        the label values; the output label is the value's index in this list.
#   id_columns    only with rows_with(out)_ids_in: the columns that form a row's id tuple.
#
# Label orders follow pytorch-pretrained-BERT's run_classifier.py processors (get_labels), which
# the authors' experiments/BERT scripts run, so label indices match their classifiers.
GLUE_TASKS: dict[str, dict] = {
    "MNLI": {
        "name": "MNLI",
        # URL: the GLUE archives moved from Firebase to dl.fbaipublicfiles.com; this is the URL in
        # Hugging Face's glue.py (_MNLI_BASE_KWARGS data_url). sha256: Transformers.jl
        # src/datasets/glue/mnli.jl, and the same value in an unrelated project's pinned
        # ARCHIVE_SHA256 for this URL.
        "url": "https://dl.fbaipublicfiles.com/glue/data/MNLI.zip",
        "sha256": "e7c1d896d26ed6caf700110645df426cc2d8ebf02a5ab743d5a5c68ac1c83633",
        "splits": {
            "train": "MNLI/train.tsv",
            "dev": "MNLI/dev_matched.tsv",
            "dev_mismatched": "MNLI/dev_mismatched.tsv",
        },
        "header": True,
        # Hugging Face glue.py: text_features sentence1/sentence2, label_column gold_label.
        "text_columns": ["sentence1", "sentence2"],
        "label_column": "gold_label",
        "labels": ["contradiction", "entailment", "neutral"],
    },
    "SST-2": {
        "name": "SST-2",
        # URL: Hugging Face glue.py; sha256: its dataset_infos download_checksums for this URL
        # (also Transformers.jl sst.jl).
        "url": "https://dl.fbaipublicfiles.com/glue/data/SST-2.zip",
        "sha256": "d67e16fb55739c1b32cdce9877596db1c127dc322d93c082281f64057c16deaa",
        "splits": {"train": "SST-2/train.tsv", "dev": "SST-2/dev.tsv"},
        "header": True,
        "text_columns": ["sentence"],
        "label_column": "label",
        "labels": ["0", "1"],
    },
    "CoLA": {
        "name": "CoLA",
        # URL: Hugging Face glue.py; sha256: its dataset_infos download_checksums (also
        # Transformers.jl cola.jl).
        "url": "https://dl.fbaipublicfiles.com/glue/data/CoLA.zip",
        "sha256": "f212fcd832b8f7b435fb991f101abf89f96b933ab400603bf198960dfc32cbff",
        "splits": {"train": "CoLA/train.tsv", "dev": "CoLA/dev.tsv"},
        # CoLA's train and dev files have no header; their columns are
        # [source, label, label_notes, sentence] (glue.py reads row[3] and row[1]).
        "header": False,
        "text_columns": [3],
        "label_column": 1,
        "labels": ["0", "1"],
    },
    "MRPC": {
        "name": "MRPC",
        # GLUE does not host MRPC. The classic download_glue_data.py (W4ngatang's gist, copied
        # into transformers/utils) downloads SentEval's copies of the Microsoft corpus files,
        # then makes GLUE's dev split from the training file: the rows whose (#1 ID, #2 ID)
        # pair is listed in mrpc_dev_ids.tsv; the rest is train. Hugging Face glue.py does the
        # same with these three URLs; the sha256 values are its download_checksums.
        "files": {
            "msr_paraphrase_train": {
                "url": "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_train.txt",
                "sha256": "60a9b09084528f0673eedee2b69cb941920f0b8cd0eeccefc464a98768457f89",
            },
            "msr_paraphrase_test": {
                "url": "https://dl.fbaipublicfiles.com/senteval/senteval_data/msr_paraphrase_test.txt",
                "sha256": "a04e271090879aaba6423d65b94950c089298587d9c084bf9cd7439bd785f784",
            },
            "mrpc_dev_ids": {
                "url": "https://dl.fbaipublicfiles.com/glue/data/mrpc_dev_ids.tsv",
                "sha256": "971d7767d81b997fd9060ade0ec23c4fc31cbb226a55d1bd4a1bac474eb81dc7",
            },
        },
        "splits": {
            "train": {"file": "msr_paraphrase_train", "rows_without_ids_in": "mrpc_dev_ids"},
            "dev": {"file": "msr_paraphrase_train", "rows_with_ids_in": "mrpc_dev_ids"},
            # GLUE's MRPC test set is this file with the labels hidden; the corpus has them.
            "test": {"file": "msr_paraphrase_test"},
        },
        # Header: Quality, #1 ID, #2 ID, #1 String, #2 String (the files start with a UTF-8
        # byte order mark, which reading as utf-8-sig removes).
        "header": True,
        "text_columns": ["#1 String", "#2 String"],
        "label_column": "Quality",
        "labels": ["0", "1"],
        "id_columns": ["#1 ID", "#2 ID"],
    },
    "RTE": {
        "name": "RTE",
        # URL: Hugging Face glue.py; sha256: Transformers.jl src/datasets/glue/rte.jl.
        "url": "https://dl.fbaipublicfiles.com/glue/data/RTE.zip",
        "sha256": "6bf86de103ecd335f3441bd43574d23fef87ecc695977a63b82d5efb206556ee",
        "splits": {"train": "RTE/train.tsv", "dev": "RTE/dev.tsv"},
        "header": True,
        "text_columns": ["sentence1", "sentence2"],
        "label_column": "label",
        "labels": ["entailment", "not_entailment"],
    },
    "QNLI": {
        "name": "QNLI",
        # GLUE's current QNLI is "QNLIv2"; the archive's folder is still QNLI/. URL: Hugging
        # Face glue.py; sha256: Transformers.jl qnli.jl (same value in another project's list).
        "url": "https://dl.fbaipublicfiles.com/glue/data/QNLIv2.zip",
        "sha256": "e634e78627a29adaecd4f955359b22bf5e70f2cbd93b493f2d624138a0c0e5f5",
        "splits": {"train": "QNLI/train.tsv", "dev": "QNLI/dev.tsv"},
        "header": True,
        "text_columns": ["question", "sentence"],
        "label_column": "label",
        "labels": ["entailment", "not_entailment"],
    },
}

_TASK_KEYS = {
    "name", "url", "sha256", "files", "splits", "header",
    "text_columns", "label_column", "labels", "id_columns",
}  # fmt: skip
_SPLIT_KEYS = {"member", "file", "rows_with_ids_in", "rows_without_ids_in"}


def prepare_glue_task(
    task: dict | str, raw_dir: str | os.PathLike, out_dir: str | os.PathLike
) -> dict[str, int]:
    """Download one GLUE-style task and write `out_dir/{split}.tsv` for each of its splits.

    `task` is a dict shaped like the values of GLUE_TASKS (or the name of one of them).
    `raw_dir` is this task's download folder: the archive or files land there, and the archive
    members used are extracted under it at their archive paths. Each output file has the
    header text_a, text_b, label; text_b is empty for single-sentence tasks and label is the
    index of the row's label in task["labels"]. Returns the number of rows per split.
    """
    if isinstance(task, str):
        task = GLUE_TASKS[task]
    splits = _check_task(task)
    raw_dir, out_dir = Path(raw_dir), Path(out_dir)

    downloaded = _download_task_files(task, raw_dir)
    members = [where["member"] for where in splits.values() if "member" in where]
    extracted = {}
    if members:
        archive = fetch(task["url"], raw_dir / _file_name_from_url(task["url"]), task.get("sha256"))
        extracted = extract_zip_members(archive, members, raw_dir)

    rows_per_split = {}
    with atomic_dir(out_dir) as staging:  # the folder appears with all its splits, or not at all
        for split, where in splits.items():
            path = extracted[where["member"]] if "member" in where else downloaded[where["file"]]
            examples = _read_examples(path, task)
            if "rows_with_ids_in" in where:
                ids_path = downloaded[where["rows_with_ids_in"]]
                examples = _select_by_ids(examples, _read_id_tuples(ids_path, task), keep=True)
                if not examples:
                    raise DataFormatError(
                        f"task {task['name']}, split {split}: no row of {path} has an id listed in "
                        f"{ids_path}"
                    )
            if "rows_without_ids_in" in where:
                ids_path = downloaded[where["rows_without_ids_in"]]
                examples = _select_by_ids(examples, _read_id_tuples(ids_path, task), keep=False)
            rows_per_split[split] = _write_glue_split(staging / f"{split}.tsv", examples)
    return rows_per_split


def read_glue_split(path: str | os.PathLike) -> tuple[list[tuple[str, str]], list[int]]:
    """Read a split written by prepare_glue_task: ([(text_a, text_b), ...], [label, ...])."""
    lines = read_lines(path)
    if not lines or lines[0] != "\t".join(GLUE_COLUMNS):
        raise DataFormatError(f"{path}: expected the header {chr(9).join(GLUE_COLUMNS)!r}")
    texts, labels = [], []
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split("\t")
        if len(fields) != 3:
            raise DataFormatError(f"{path}, line {number}: {len(fields)} fields, expected 3")
        text_a, text_b, label = fields
        try:
            labels.append(int(label))
        except ValueError:
            message = f"{path}, line {number}: label {label!r} is not an integer"
            raise DataFormatError(message) from None
        texts.append((text_a, text_b))
    return texts, labels


def extract_zip_members(
    archive: str | os.PathLike, members: Iterable[str], dest_dir: str | os.PathLike
) -> dict[str, Path]:
    """Extract only `members` of a zip archive under `dest_dir`, at their archive paths.

    A member name that would land outside `dest_dir` (absolute, "..", a drive) is refused:
    names come from a downloaded archive and from the config, neither of which is trusted
    to pick where files are written. Each file is written to a temporary name and renamed.
    Returns {member: extracted path}.
    """
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    root = dest_dir.resolve()
    extracted = {}
    with zipfile.ZipFile(archive) as zip_file:
        available = set(zip_file.namelist())
        for member in members:
            target = _safe_member_target(root, member, archive)
            if member not in available:
                listing = ", ".join(sorted(available)[:20])
                raise DataFormatError(f"{archive} has no member {member!r}; it has: {listing}")
            info = zip_file.getinfo(member)
            if info.is_dir():
                raise DataFormatError(f"{archive}: member {member!r} is a folder, not a file")
            target.parent.mkdir(parents=True, exist_ok=True)
            # zipfile checks the member's CRC as it reads it.
            with atomic_path(target) as temporary, zip_file.open(info) as source, open(temporary, "wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
            extracted[member] = target
    return extracted


def _safe_member_target(root: Path, member: str, archive) -> Path:
    refusal = f"refusing to extract {member!r} from {archive}: it would be written outside {root}"
    # Zip names use "/", but a hostile one may use "\\" for Windows.
    parts = PurePosixPath(member.replace("\\", "/")).parts
    if (
        not parts
        or member.startswith(("/", "\\"))
        or ".." in parts
        or ":" in parts[0]  # a Windows drive, "C:..."
    ):
        raise DataFormatError(refusal)
    target = root.joinpath(*parts).resolve()  # resolve() also follows symlinks inside root
    if not target.is_relative_to(root):
        raise DataFormatError(refusal)
    return target


def _check_task(task: dict) -> dict[str, dict]:
    """Check a task dict's shape; return its splits with each `where` as a dict."""
    name = task.get("name", "<unnamed>")
    missing = {"name", "splits", "text_columns", "label_column", "labels"} - task.keys()
    if missing:
        raise ValueError(f"GLUE task {name}: missing keys {sorted(missing)}")
    unknown = task.keys() - _TASK_KEYS
    if unknown:
        raise ValueError(f"GLUE task {name}: unknown keys {sorted(unknown)}")
    if not 1 <= len(task["text_columns"]) <= 2:
        raise ValueError(f"GLUE task {name}: text_columns must name one or two columns")
    labels = task["labels"]
    if not labels or len(set(labels)) != len(labels):
        raise ValueError(f"GLUE task {name}: labels must be a non-empty list without repeats")
    columns = [*task["text_columns"], task["label_column"], *task.get("id_columns", [])]
    if not task.get("header", True) and not all(isinstance(c, int) for c in columns):
        raise ValueError(f"GLUE task {name}: without a header, columns must be 0-based indices")

    files = task.get("files", {})
    for key, spec in files.items():
        if "url" not in spec:
            raise ValueError(f"GLUE task {name}: file {key!r} has no url")
    splits = {}
    for split, where in task["splits"].items():
        where = {"member": where} if isinstance(where, str) else dict(where)
        problem = None
        if where.keys() - _SPLIT_KEYS:
            problem = f"unknown keys {sorted(where.keys() - _SPLIT_KEYS)}"
        elif ("member" in where) == ("file" in where):
            problem = "give exactly one of 'member' (in the archive) and 'file' (a key of files)"
        elif "member" in where and not task.get("url"):
            problem = "names an archive member but the task has no archive url"
        elif "file" in where and where["file"] not in files:
            problem = f"file {where['file']!r} is not a key of the task's files"
        for key in ("rows_with_ids_in", "rows_without_ids_in"):
            if key in where and where[key] not in files:
                problem = f"{key} {where[key]!r} is not a key of the task's files"
            elif key in where and not task.get("id_columns"):
                problem = f"{key} needs the task's id_columns"
        if problem:
            raise ValueError(f"GLUE task {name}, split {split}: {problem}")
        splits[split] = where
    return splits


def _file_name_from_url(url: str) -> str:
    name = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path)).name
    if not name:
        raise ValueError(f"cannot name a download after {url}: its path has no file name")
    return name


def _download_task_files(task: dict, raw_dir: Path) -> dict[str, Path]:
    """Fetch the task's plain files (not its archive); {key: local path}."""
    downloaded: dict[str, Path] = {}
    url_of_path: dict[Path, str] = {}
    for key, spec in task.get("files", {}).items():
        dest = raw_dir / _file_name_from_url(spec["url"])
        if url_of_path.setdefault(dest, spec["url"]) != spec["url"]:
            raise ValueError(
                f"GLUE task {task['name']}: {url_of_path[dest]} and {spec['url']} would both be "
                f"saved as {dest}"
            )
        downloaded[key] = fetch(spec["url"], dest, spec.get("sha256"))
    return downloaded


class _Example(NamedTuple):
    text_a: str
    text_b: str  # "" for single-sentence tasks
    label: int  # index into the task's labels
    ids: tuple[str, ...]  # values of the task's id_columns; () when it has none


def _read_examples(path: Path, task: dict) -> list[_Example]:
    """Rows of one split file. GLUE files contain unbalanced quotes, so they are read with
    csv.QUOTE_NONE (as GLUE's own loaders do): a tab always separates fields."""
    label_index = {label: index for index, label in enumerate(task["labels"])}
    has_header = task.get("header", True)
    # utf-8-sig: MRPC's files start with a byte order mark, which would stick to "Quality".
    with open(path, encoding="utf-8-sig", newline="") as stream:
        reader = csv.reader(stream, delimiter="\t", quoting=csv.QUOTE_NONE)
        try:
            header = next(reader, None) if has_header else None
            if has_header and header is None:
                raise DataFormatError(f"{path} is empty; task {task['name']} expects a header")
            text_columns = [_column_index(spec, header, path) for spec in task["text_columns"]]
            label_column = _column_index(task["label_column"], header, path)
            id_columns = [_column_index(spec, header, path) for spec in task.get("id_columns", [])]
            fields_needed = max([*text_columns, label_column, *id_columns]) + 1

            examples = []
            for fields in reader:
                if not fields:
                    continue  # a blank line, e.g. at the end of the file
                line = reader.line_num
                if header is not None and len(fields) != len(header):
                    raise DataFormatError(
                        f"{path}, line {line}: {len(fields)} tab-separated fields, but the "
                        f"header has {len(header)}"
                    )
                if len(fields) < fields_needed:
                    raise DataFormatError(
                        f"{path}, line {line}: {len(fields)} tab-separated fields, task "
                        f"{task['name']} reads column {fields_needed - 1}"
                    )
                label = fields[label_column]
                if label not in label_index:
                    raise DataFormatError(
                        f"{path}, line {line}: label {label!r} is not one of {task['labels']} "
                        f"(task {task['name']})"
                    )
                texts = [fields[index] for index in text_columns]
                examples.append(
                    _Example(
                        text_a=texts[0],
                        text_b=texts[1] if len(texts) == 2 else "",
                        label=label_index[label],
                        ids=tuple(fields[index].strip() for index in id_columns),
                    )
                )
        except csv.Error as error:
            raise DataFormatError(f"{path}, line {reader.line_num}: {error}") from error
    return examples


def _column_index(spec: str | int, header: list[str] | None, path: Path) -> int:
    if isinstance(spec, int):
        return spec
    if header is None:
        raise DataFormatError(f"{path}: column {spec!r} given by name, but the file has no header")
    try:
        return header.index(spec)
    except ValueError:
        raise DataFormatError(f"{path}: no column {spec!r}; the header is {header}") from None


def _read_id_tuples(path: Path, task: dict) -> set[tuple[str, ...]]:
    """The id tuples listed in a headerless TSV (e.g. MRPC's dev ids: '#1 ID<TAB>#2 ID')."""
    width = len(task["id_columns"])
    ids = set()
    for number, line in enumerate(read_lines(path), start=1):
        fields = [field.strip() for field in line.lstrip("\ufeff").split("\t")]
        if fields == [""]:
            continue
        if len(fields) < width:
            raise DataFormatError(f"{path}, line {number}: expected {width} tab-separated ids")
        ids.add(tuple(fields[:width]))
    return ids


def _select_by_ids(
    examples: list[_Example], ids: set[tuple[str, ...]], keep: bool
) -> list[_Example]:
    return [example for example in examples if (example.ids in ids) == keep]


def _write_glue_split(path: Path, examples: list[_Example]) -> int:
    with _atomic_text_writer(path) as stream:
        stream.write("\t".join(GLUE_COLUMNS) + "\n")
        for example in examples:
            for text in (example.text_a, example.text_b):
                # Cannot come from a tab-split line; checked so the output stays parseable.
                if any(character in text for character in "\t\n\r"):
                    raise DataFormatError(f"{path}: a text contains a tab or line break: {text!r}")
            stream.write(f"{example.text_a}\t{example.text_b}\t{example.label}\n")
    return len(examples)


def glue_task_spec(glue_entry, name):
    """The full data spec of a glue entry: a built-in GLUE task, overridden by the entry's keys."""
    entry = dict(glue_entry)
    spec = dict(GLUE_TASKS[entry.pop("task")]) if "task" in entry else {}
    for key in ("metric", "eval_split", "ood_split", "train_split", "selection_split", "test_split", "finetune"):
        entry.pop(key, None)
    spec.update(entry)
    spec.setdefault("name", name)
    return spec
