"""What the Snakemake scripts share: logging to the rule's log, loading a study's model and data.

Each script in scripts/ is a thin entry point: it reads ``snakemake.input``,
``snakemake.params`` and ``snakemake.output`` and calls the package.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from pathlib import Path

from headprune.evaluation.kinds import kind_of
from headprune.evaluation.runs import EvalSet
from headprune.io import atomic
from headprune.io.machine_failures import machine_failure, out_of_memory
from headprune.models.attention_types import TOWER_TYPES
from headprune.models.memory import limit_job_to


def keep_freed_memory():
    """Let glibc keep the memory of freed tensors for the next ones, up to 1 GB each.

    By default glibc maps an allocation over its threshold (128 kB, rising with freed blocks to at most
    32 MB) anew and hands it back to the kernel when it is freed, so each batch's activations fault their
    pages in again: a demo job's first evaluation ran a quarter slower than its second, and a BERT-base
    job evaluating 144 variants on 2 CPU cores spent 67 s of 163 in the kernel. Kept, it evaluates them
    24% faster (64 MB: 8%) for 0.8 GB more peak memory (64 MB: 0.5 GB), as freed blocks wait for reuse.
    Model weights are memory-mapped from safetensors, not allocated. No-op where the C library is not
    glibc."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
        libc.mallopt(m_mmap_threshold, 1 << 30)  # glibc's default rises to at most 32 MB
        libc.mallopt(m_trim_threshold, 1 << 30)


def quiet_library_progress_bars():
    """No tqdm bars from transformers, huggingface_hub and datasets: their switch is read when they are imported,
    so set the environment for a later import and, where one already happened, turn the bars off directly."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    if "datasets" in sys.modules:
        sys.modules["datasets"].disable_progress_bars()
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


# What a job that ran out of memory lowers (the rule's own config keys are the stage's; these hold for every job)
LOWER_IN_CONFIG = ("lower ablation.variant_batch_size or the study's batch_size (or leave them unset: sized from "
                   "the memory there is), or give the rule more memory (resources)")


def failure_line(error: Exception) -> str | None:
    """The one line a job's failure of the machine (a full disk, ..., out of memory) is told in; None: a bug."""
    failure = machine_failure(error)
    if failure is not None:
        return str(failure)
    memory = out_of_memory(error)
    return None if memory is None else f"{memory}: {LOWER_IN_CONFIG}"


@contextlib.contextmanager
def logged(snakemake):
    """Send stdout, stderr (tqdm, warnings) and logging of the script to the rule's log file."""
    keep_freed_memory()  # every job: the rule runs in this process from here on
    # its evaluations size their batches within the memory its rule asked for (SLURM's --mem)
    limit_job_to(getattr(getattr(snakemake, "resources", None), "mem_mb", None))
    # Progress goes to the log as plain lines (headprune.io.progress); the carriage-return bars of
    # transformers and huggingface_hub ("Loading weights", "Writing model shards") would only add noise.
    quiet_library_progress_bars()
    log_path = Path(snakemake.log[0])
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "w", buffering=1) as log, contextlib.redirect_stdout(log), \
                contextlib.redirect_stderr(log):
            logging.basicConfig(stream=log, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                                force=True)
            try:
                yield logging.getLogger(snakemake.rule)
            except BaseException as error:
                failure = failure_line(error) if isinstance(error, Exception) else None
                if failure is None:
                    logging.exception("rule %s failed", snakemake.rule)
                else:
                    logging.error("rule %s failed: %s", snakemake.rule, failure)
                raise
    except Exception as error:
        # A full disk, a read-only or forbidden folder: one line on the job's own stderr (the log may be on that
        # disk), exit status 1; the atomic writers have left nothing half-written (headprune.io.machine_failures)
        failure = failure_line(error)
        if failure is None:
            raise
        print(f"rule {snakemake.rule} failed: {failure}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    if "SLURM_JOB_ID" in os.environ:  # a cluster job: what it wrote survives its job group failing
        from headprune.io import commits

        commits.commit(snakemake.output)


def load_evalset(spec: dict) -> EvalSet:
    """An EvalSet from the dict rules/common.smk builds (evalset_spec)."""
    return kind_of(spec["kind"]).load_evalset(spec)


def load_study_model(study: dict, device):
    """(model, tokenizer) of a study, checked against the architecture its config declares.

    A study's ``kind`` says how it is loaded: translation (a fairseq checkpoint or its converted folder,
    or transformers' own encoder-decoders), classification, language_modeling. On a GPU job with
    several GPUs (models.<study>.resources) the model's layers are spread over them.
    Logs the load time (the model and tokenizer; the imports before it are not counted)."""
    started = time.perf_counter()
    import torch

    from headprune.models.heads import head_shape

    device = torch.device(device)
    options = {"dtype": study.get("dtype", "float32"),
               "gpus": torch.cuda.device_count() if device.type == "cuda" else 1,
               **({"towers": list(study["towers"])} if study.get("towers") else {})}
    model, tokenizer = kind_of(study["kind"]).load_model(Path(study["model"]), device, study, options)
    section = study.get("section", study["kind"])
    declared = {TOWER_TYPES[tower]: (f"{section}.towers.{tower}", shape)
                for tower, shape in study.get("towers", {}).items()}
    for attn_type, (layers, heads) in head_shape(model).items():
        where, shape = declared.get(attn_type, (section, study))
        if (layers, heads) != (shape["layers"], shape["heads"]):
            raise ValueError(f"{study['model']}: {attn_type} has {layers} layers x {heads} heads, but config "
                             f"{where}.layers/{where}.heads say {shape['layers']} x {shape['heads']}")
    config = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
    kv_heads = getattr(config, "num_key_value_heads", None)  # a multimodal model's (Gemma 3's) text config
    if study.get("kv_heads") is not None and kv_heads != study["kv_heads"]:
        raise ValueError(f"{study['model']}: {kv_heads} key/value heads per layer, but config {section}.kv_heads "
                         f"says {study['kv_heads']}")
    logging.getLogger(__name__).info("load time %.2f s: %s (%s) on %s", time.perf_counter() - started,
                                     study["model"], type(model).__name__, device)
    return model, tokenizer


def importance_batches(tokenizer, data: dict, model=None) -> list[dict]:
    """The batches I_h is estimated on (rules/common.smk importance_spec): the translation importance
    sets, a seeded subset of a GLUE task's training split, or the first windows of a corpus split."""
    return kind_of(data["kind"]).importance_batches(tokenizer, data, model)


def write_json(path, payload):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(path, payload, indent=1, ensure_ascii=False)


def read_json(path):
    return json.loads(Path(path).read_text())


def model_families(full_jsons) -> dict:
    """study -> model family (config.json model_type) from full.json files, for figure titles;
    a full.json written before evaluate_full recorded the family gives none."""
    return {result["study"]: result.get("family") for result in map(read_json, full_jsons)}


def threads_for_torch(snakemake):
    import torch

    torch.set_num_threads(max(1, int(getattr(snakemake, "threads", 1) or 1)))
