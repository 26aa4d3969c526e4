"""Input and output below everything else: downloads, atomic and resumable, with checksums (``download``);
progress lines for the logs of long loops (``progress``); every output file written to a temporary name and
renamed, so a killed job leaves the old file or none, never a partial one (``atomic``); a full disk or a read-only
or forbidden folder said in one line naming the path (``machine_failures``); the error of a config that cannot be
run, which names its key (``config_error.ConfigError``).

Imports nothing of headprune: every other room may import it.
"""
