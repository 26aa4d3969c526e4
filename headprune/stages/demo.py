"""The offline demo's stand-ins for the internet (rules/demo.smk): synthetic data and tiny models written where
demo/config.yaml's URLs point."""
from __future__ import annotations


def testset_files(pipeline) -> list[str]:
    """Where the demo writes its test sets: the URLs the config gives them."""
    return [spec[key]["url"] for spec in pipeline.config["translation"]["testsets"].values()
            for key in ("source", "reference")]
