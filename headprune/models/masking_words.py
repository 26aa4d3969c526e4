"""The masking modes' config words (``headprune.models.masking``: one class each), importable without torch: the
config schema, the study object and ``EvalSettings`` check words against this list."""

MASKING_WORDS = ("zero", "uniform", "streaming", "mean", "optimal", "resample")
# the data each word needs beside it: a study's file computed by the head_constants job
DATA_FILE = {"mean": "constants", "optimal": "constants", "resample": "pool"}
# the words that take gates 0 or 1 only (their classes' ``real_gates`` is False): not for learned real gates
BINARY_WORDS = ("uniform", "streaming")
