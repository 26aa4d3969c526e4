"""Each stage of the workflow owns its jobs: one module per rules file (``rules/<stage>.smk`` beside
``headprune/stages/<stage>.py``), holding what that stage's jobs read (inputs), are asked (params) and write
(paths), as functions of a study (``headprune.studies.Study``: a study's identity, its model, its evaluation
sets). The rules call these functions directly through ``rules/common.smk``'s ``of_study``; a study never
asks a stage, so a stage changes in its one module.

Torch-free, as the studies: Snakemake imports it to plan the run.
"""
from headprune.stages import (ablation, checkpoints, concrete, constants, data, figures, finetune,  # noqa: F401
                              importance, masking_modes, pruning, report, retrieval, roles, speed)
