"""The error of a config that cannot be run, raised where the config is read and checked (the schema, the study
resolution, each stage's and kind's checks) and caught by the command line and Snakemake's plan. Imports nothing,
so that every room may raise it and the plan needs no torch."""


class ConfigError(ValueError):
    """A config that cannot be run; the message names the key."""
