"""Download one file: atomically, resumably, with retries and a sha256 check.

`fetch(url, dest, sha256)` writes to `dest + ".part"` and renames it to `dest` only once the
bytes are complete and (when a digest is given) verified, so a half-downloaded or corrupt file
never appears under its final name, which is what Snakemake and later runs check for.

Sources: http:// and https:// (urllib only, no extra dependency), file:// URLs and plain local
paths (copied; this is how users point the pipeline at data they already have).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tqdm import tqdm

__all__ = ["DownloadError", "ChecksumError", "fetch", "file_digest", "sha256sum", "local_source"]

USER_AGENT = "headprune/0.1 (python-urllib)"

# Wait before retry n (n = 1, 2, ...): RETRY_BACKOFF_SECONDS * 2 ** (n - 1), at most
# MAX_BACKOFF_SECONDS. Tests set it to 0.
RETRY_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0

# Answers worth asking again: the server is busy or had a passing failure. Every other 4xx/5xx
# (404, 403, 410, ...) will not change on a retry, so it fails at once.
RETRYABLE_HTTP_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class DownloadError(Exception):
    """A file could not be downloaded; the message names the URL."""


class ChecksumError(DownloadError):
    """The downloaded bytes do not have the expected sha256."""

    def __init__(self, url: str, dest: Path, expected: str, actual: str):
        self.url = url
        self.dest = Path(dest)
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"sha256 mismatch for {url} (destination {dest}): expected {expected}, got {actual}; "
            "the download was deleted"
        )


class _RetryableError(Exception):
    """A failure that another attempt (resuming from the bytes kept so far) may get past.

    `restarted` says whether this attempt had already dropped the earlier .part content."""

    def __init__(self, message: str, *, restarted: bool = False):
        super().__init__(message)
        self.restarted = restarted


def local_source(download: dict) -> list[str]:
    """A config's download (its ``url``) whose URL is a path in the workflow (the demo's models): [that path], the
    input of the job that fetches it; [] for a URL."""
    url = download["url"]
    return [] if "://" in url else [url]


def file_digest(path: str | os.PathLike, algorithm: str = "sha256", chunk_size: int = 1 << 20) -> str:
    """Hex digest of a file, read in chunks so that big archives fit in memory."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as stream:
        while chunk := stream.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def sha256sum(path: str | os.PathLike) -> str:
    return file_digest(path, "sha256")


def fetch(
    url: str,
    dest: str | os.PathLike,
    sha256: str | None = None,
    *,
    timeout: float = 60,
    retries: int = 3,
    chunk_size: int = 1 << 20,
    progress: bool = True,
) -> Path:
    """Download `url` to `dest` and return `dest` as a Path.

    - If `dest` exists and matches `sha256` (or no digest is given) nothing is downloaded.
      An existing `dest` with the wrong digest is deleted and downloaded again.
    - HTTP downloads resume from a leftover `dest.part` with a Range request; a server that
      ignores the range (answers 200) is read from the start again.
    - Network failures and 408/429/5xx answers are retried `retries` times, each retry
      resuming; then DownloadError. Other HTTP errors (404, ...) raise DownloadError at once.
    - On a digest mismatch the `.part` is deleted and ChecksumError raised; `dest` then does
      not exist.
    """
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}")
    dest = Path(dest)
    expected = sha256.strip().lower() if sha256 else None

    if dest.exists():
        if expected is None or sha256sum(dest) == expected:
            return dest
        # A stale or corrupt copy must not pass for the right file, now or if this run fails.
        dest.unlink()

    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    local_source = _local_source_path(url)

    def download() -> bool:
        """Fill `part`; True if it kept bytes from a .part left by an earlier run."""
        if local_source is not None:
            _copy_local_file(url, local_source, part, chunk_size=chunk_size, progress=progress)
            return False
        return _download_http(
            url, part, timeout=timeout, retries=retries, chunk_size=chunk_size, progress=progress
        )

    kept_earlier_bytes = download()
    if expected is not None:
        actual = sha256sum(part)
        if actual != expected and kept_earlier_bytes:
            # The bytes kept from an earlier run may belong to another version of the file
            # (it changed on the server since): download it whole once before giving up.
            part.unlink()
            download()
            actual = sha256sum(part)
        if actual != expected:
            part.unlink()
            raise ChecksumError(url, dest, expected, actual)

    os.replace(part, dest)
    return dest


def _local_source_path(url: str) -> Path | None:
    """The local file a file:// URL or plain path names; None for http(s); error otherwise."""
    parsed = urllib.parse.urlsplit(url)
    scheme = parsed.scheme.lower()
    if scheme in ("http", "https"):
        return None
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise DownloadError(f"cannot read {url}: file:// URLs naming a host are not supported")
        return Path(urllib.request.url2pathname(parsed.path))
    # No scheme, or a one-letter one (a Windows drive such as C:\...): a plain local path.
    if scheme == "" or len(scheme) == 1:
        return Path(url)
    raise DownloadError(f"cannot download {url}: unsupported URL scheme {parsed.scheme!r}")


def _copy_local_file(
    url: str, source: Path, part: Path, *, chunk_size: int, progress: bool
) -> None:
    try:
        total = source.stat().st_size
        with open(source, "rb") as reader, open(part, "wb") as writer, _progress_bar(
            part, total, 0, progress
        ) as bar:
            while chunk := reader.read(chunk_size):
                writer.write(chunk)
                bar.update(len(chunk))
            writer.flush()
            os.fsync(writer.fileno())
    except OSError as error:
        part.unlink(missing_ok=True)
        raise DownloadError(f"cannot read {url}: {error}") from error


def _download_http(
    url: str, part: Path, *, timeout: float, retries: int, chunk_size: int, progress: bool
) -> bool:
    """Download into `part`, resuming it; True if bytes from a pre-existing .part were kept."""
    kept_earlier_bytes = part.exists() and part.stat().st_size > 0
    last_error: _RetryableError | None = None
    for attempt in range(retries + 1):
        if attempt > 0:
            time.sleep(min(RETRY_BACKOFF_SECONDS * 2 ** (attempt - 1), MAX_BACKOFF_SECONDS))
        try:
            resumed_from = _http_attempt(
                url, part, timeout=timeout, chunk_size=chunk_size, progress=progress
            )
        except _RetryableError as error:
            last_error = error
            if error.restarted:
                kept_earlier_bytes = False
            continue
        if resumed_from == 0:
            kept_earlier_bytes = False
        return kept_earlier_bytes
    raise DownloadError(
        f"could not download {url}: {last_error} (gave up after {retries + 1} attempts; "
        f"the partial file {part} is kept and the next run resumes it)"
    ) from last_error


def _http_attempt(url: str, part: Path, *, timeout: float, chunk_size: int, progress: bool) -> int:
    """One HTTP request. Appends to `part` when the server honours the Range; otherwise
    rewrites it. Returns the offset the body was appended at (0: a fresh download)."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": USER_AGENT}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)

    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        with error:
            if error.code == 416 and offset:
                # Range Not Satisfiable: the .part already holds the whole file (a run that
                # died before renaming it), or more bytes than the file has (another file).
                total = _total_from_content_range(error.headers.get("Content-Range"))
                if total == offset:
                    return offset
                part.unlink()
                raise _RetryableError(
                    f"{url}: the server refused to resume at byte {offset}; starting over",
                    restarted=True,
                )
            if error.code in RETRYABLE_HTTP_STATUSES:
                raise _RetryableError(f"{url}: HTTP {error.code} {error.reason}")
            message = f"cannot download {url}: HTTP {error.code} {error.reason}"
            raise DownloadError(message) from None
    except (OSError, http.client.HTTPException) as error:
        # URLError (DNS, refused connection), timeouts, resets are all OSErrors.
        raise _RetryableError(f"{url}: {error}") from error

    with response:
        if response.status == 206:
            start, total = _range_from_content_range(response.headers.get("Content-Range"))
            if start != offset:
                # A range we did not ask for: start over rather than splice bytes wrongly.
                part.unlink()
                raise _RetryableError(
                    f"{url}: server sent bytes from {start}, asked for {offset}", restarted=True
                )
            mode = "ab"
        else:
            # 200: the server ignored the Range (or none was sent); the body is the whole file.
            offset = 0
            mode = "wb"
            total = None
        body_length = _int_or_none(response.headers.get("Content-Length"))
        if total is None and body_length is not None:
            total = offset + body_length

        received = 0
        with open(part, mode) as writer, _progress_bar(part, total, offset, progress) as bar:
            try:
                while chunk := response.read(chunk_size):
                    writer.write(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
            except (OSError, http.client.HTTPException) as error:
                # What was written stays in .part: the next attempt resumes from there.
                raise _RetryableError(
                    f"{url}: transfer interrupted: {error!r}", restarted=offset == 0
                ) from error
            finally:
                writer.flush()
                os.fsync(writer.fileno())
    # http.client returns b"" (no exception) when the server closes a Content-Length body
    # early, so count the bytes.
    if body_length is not None and received < body_length:
        raise _RetryableError(
            f"{url}: connection closed after {received} of {body_length} bytes",
            restarted=offset == 0,
        )
    return offset


def _progress_bar(part: Path, total: int | None, initial: int, enabled: bool) -> tqdm:
    name = part.name.removesuffix(".part")
    return tqdm(
        total=total,
        initial=initial,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc=name,
        file=sys.stderr,
        disable=not enabled,
        leave=False,
    )


_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED_RANGE = re.compile(r"bytes\s+\*/(\d+)")


def _range_from_content_range(value: str | None) -> tuple[int | None, int | None]:
    """(first byte, total size) from 'bytes 100-199/200'; total None when '*'."""
    match = _CONTENT_RANGE.fullmatch(value.strip()) if value else None
    if not match:
        return None, None
    total = None if match.group(3) == "*" else int(match.group(3))
    return int(match.group(1)), total


def _total_from_content_range(value: str | None) -> int | None:
    """Total size from a 416 answer's 'bytes */200'."""
    match = _UNSATISFIED_RANGE.fullmatch(value.strip()) if value else None
    return int(match.group(1)) if match else None


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
