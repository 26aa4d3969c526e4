"""Model access: where each family's attention heads live and how they are gated (``heads``, one file
per family in ``families/``), loading (``loading``), physical removal (``prune``), fairseq checkpoints
without fairseq (``fairseq``, ``prenorm``), training and fine-tuning (``train``, ``finetune``), GPUs."""
