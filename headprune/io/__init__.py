"""Input and output below everything else: downloads, atomic and resumable, with checksums (``download``).

Imports nothing of headprune: every other room may import it.
"""
