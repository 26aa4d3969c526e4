"""headprune.io.download.fetch against a real HTTP server on 127.0.0.1 and local files."""

from __future__ import annotations

import hashlib
import http.server
import os
import re
import threading

import pytest

from headprune.io import download
from headprune.io.download import ChecksumError, DownloadError, fetch, sha256sum

PAYLOAD = bytes(range(256)) * 400  # 102400 bytes, not a multiple of the chunk size used
PAYLOAD_SHA256 = hashlib.sha256(PAYLOAD).hexdigest()


class FakeServer:
    """A tiny HTTP file server whose behaviour each test sets.

    files: path -> bytes. honour_range: answer Range requests with 206 (else 200, whole file).
    cut_connection_times: this many GETs send only half the body, then close the connection.
    fail_times: this many GETs answer 503. requests: (path, Range header or None) per GET."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.honour_range = True
        self.cut_connection_times = 0
        self.fail_times = 0
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep the test output clean
                pass

            def do_GET(self):
                range_header = self.headers.get("Range")
                server.requests.append((self.path, range_header))
                if server.fail_times > 0:
                    server.fail_times -= 1
                    self.send_error(503, "try again")
                    return
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404, "no such file")
                    return
                start = 0
                match = re.fullmatch(r"bytes=(\d+)-", range_header or "")
                if match and server.honour_range:
                    start = int(match.group(1))
                    if start >= len(body):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(body)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                chunk = body[start:]
                self.send_header("Content-Length", str(len(chunk)))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                if server.cut_connection_times > 0:
                    server.cut_connection_times -= 1
                    self.wfile.write(chunk[: len(chunk) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(chunk)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"


@pytest.fixture
def server():
    fake = FakeServer()
    fake.thread.start()
    yield fake
    fake.httpd.shutdown()
    fake.httpd.server_close()


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch):
    monkeypatch.setattr(download, "RETRY_BACKOFF_SECONDS", 0.0)


def test_success_with_checksum(server, tmp_path):
    server.files["/data.bin"] = PAYLOAD
    dest = tmp_path / "sub" / "data.bin"
    result = fetch(server.url("/data.bin"), dest, PAYLOAD_SHA256, progress=False)
    assert result == dest
    assert dest.read_bytes() == PAYLOAD
    assert not (tmp_path / "sub" / "data.bin.part").exists()
    assert server.requests == [("/data.bin", None)]


def test_existing_dest_is_not_downloaded_again(server, tmp_path):
    server.files["/data.bin"] = PAYLOAD
    dest = tmp_path / "data.bin"
    fetch(server.url("/data.bin"), dest, PAYLOAD_SHA256, progress=False)
    fetch(server.url("/data.bin"), dest, PAYLOAD_SHA256.upper(), progress=False)
    fetch(server.url("/data.bin"), dest, progress=False)
    assert len(server.requests) == 1


def test_existing_dest_with_wrong_digest_is_replaced(server, tmp_path):
    server.files["/data.bin"] = PAYLOAD
    dest = tmp_path / "data.bin"
    dest.write_bytes(b"an older, different file")
    fetch(server.url("/data.bin"), dest, PAYLOAD_SHA256, progress=False)
    assert dest.read_bytes() == PAYLOAD


def test_resume_sends_range_and_appends(server, tmp_path):
    server.files["/data.bin"] = PAYLOAD
    dest = tmp_path / "data.bin"
    half = len(PAYLOAD) // 2
    (tmp_path / "data.bin.part").write_bytes(PAYLOAD[:half])
    fetch(server.url("/data.bin"), dest, PAYLOAD_SHA256, progress=False)
    assert server.requests == [("/data.bin", f"bytes={half}-")]
    assert dest.read_bytes() == PAYLOAD


def test_server_ignoring_range_restarts_from_scratch(server, tmp_path):
    server.files["/data.bin"] = PAYLOAD
    server.honour_range = False
    dest = tmp_path / "data.bin"
    (tmp_path / "data.bin.part").write_bytes(PAYLOAD[:1000])
    fetch(server.url("/data.bin"), dest, PAYLOAD_SHA256, progress=False)
    assert server.requests == [("/data.bin", "bytes=1000-")]
    assert dest.read_bytes() == PAYLOAD


def test_complete_part_file_gets_416_and_is_used(server, tmp_path):
    # A run that died between the last byte and the rename leaves a complete .part.
    server.files["/data.bin"] = PAYLOAD
    dest = tmp_path / "data.bin"
    (tmp_path / "data.bin.part").write_bytes(PAYLOAD)
    fetch(server.url("/data.bin"), dest, PAYLOAD_SHA256, progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [("/data.bin", f"bytes={len(PAYLOAD)}-")]


def test_stale_part_from_another_file_is_redownloaded_whole(server, tmp_path):
    # The kept prefix is wrong, so the checksum fails once; fetch retries from byte 0.
    server.files["/data.bin"] = PAYLOAD
    dest = tmp_path / "data.bin"
    (tmp_path / "data.bin.part").write_bytes(b"x" * 500)
    fetch(server.url("/data.bin"), dest, PAYLOAD_SHA256, progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [("/data.bin", "bytes=500-"), ("/data.bin", None)]


def test_checksum_mismatch_leaves_nothing(server, tmp_path):
    server.files["/data.bin"] = PAYLOAD
    dest = tmp_path / "data.bin"
    wrong = "0" * 64
    with pytest.raises(ChecksumError) as caught:
        fetch(server.url("/data.bin"), dest, wrong, progress=False)
    message = str(caught.value)
    assert server.url("/data.bin") in message
    assert str(dest) in message
    assert wrong in message and PAYLOAD_SHA256 in message
    assert caught.value.actual == PAYLOAD_SHA256
    assert isinstance(caught.value, DownloadError)
    assert not dest.exists()
    assert not (tmp_path / "data.bin.part").exists()


def test_interrupted_transfer_is_retried_and_resumed(server, tmp_path):
    server.files["/data.bin"] = PAYLOAD
    server.cut_connection_times = 2
    dest = tmp_path / "data.bin"
    fetch(server.url("/data.bin"), dest, PAYLOAD_SHA256, retries=3, progress=False)
    assert dest.read_bytes() == PAYLOAD
    first, second, third = server.requests
    assert first == ("/data.bin", None)
    # Each retry asks only for the bytes still missing.
    half = len(PAYLOAD) // 2
    assert second == ("/data.bin", f"bytes={half}-")
    assert third == ("/data.bin", f"bytes={half + (len(PAYLOAD) - half) // 2}-")


def test_gives_up_after_retries_and_keeps_part(server, tmp_path):
    server.files["/data.bin"] = PAYLOAD
    server.cut_connection_times = 10
    dest = tmp_path / "data.bin"
    with pytest.raises(DownloadError, match=re.escape(server.url("/data.bin"))):
        fetch(server.url("/data.bin"), dest, PAYLOAD_SHA256, retries=2, progress=False)
    assert len(server.requests) == 3
    assert not dest.exists()
    # The partial bytes are kept for the next run to resume.
    part = tmp_path / "data.bin.part"
    assert part.exists() and PAYLOAD.startswith(part.read_bytes())


def test_server_errors_are_retried(server, tmp_path):
    server.files["/data.bin"] = PAYLOAD
    server.fail_times = 2
    dest = tmp_path / "data.bin"
    fetch(server.url("/data.bin"), dest, PAYLOAD_SHA256, retries=2, progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert len(server.requests) == 3


def test_404_fails_at_once_naming_url(server, tmp_path):
    dest = tmp_path / "missing.bin"
    url = server.url("/missing.bin")
    with pytest.raises(DownloadError, match=re.escape(url)) as caught:
        fetch(url, dest, retries=3, progress=False)
    assert "404" in str(caught.value)
    assert len(server.requests) == 1
    assert not dest.exists()


def test_refused_connection_names_url(tmp_path):
    # Bind a port, then close it: nothing listens there.
    probe = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = probe.server_address[1]
    probe.server_close()
    url = f"http://127.0.0.1:{port}/x.bin"
    with pytest.raises(DownloadError, match=re.escape(url)):
        fetch(url, tmp_path / "x.bin", retries=1, timeout=5, progress=False)


def test_local_path_and_file_url(tmp_path):
    source = tmp_path / "source dir" / "data.bin"
    source.parent.mkdir()
    source.write_bytes(PAYLOAD)

    by_path = fetch(str(source), tmp_path / "a.bin", PAYLOAD_SHA256, progress=False)
    assert by_path.read_bytes() == PAYLOAD

    by_url = fetch(source.as_uri(), tmp_path / "b.bin", PAYLOAD_SHA256, progress=False)
    assert by_url.read_bytes() == PAYLOAD
    assert "%20" in source.as_uri()  # the URL form really was percent-encoded

    with pytest.raises(ChecksumError):
        fetch(source.as_uri(), tmp_path / "c.bin", "f" * 64, progress=False)
    assert not (tmp_path / "c.bin").exists()
    assert not (tmp_path / "c.bin.part").exists()


def test_missing_local_file_names_it(tmp_path):
    missing = tmp_path / "nope.bin"
    with pytest.raises(DownloadError, match=re.escape(str(missing))):
        fetch(str(missing), tmp_path / "out.bin", progress=False)
    assert not (tmp_path / "out.bin").exists()
    assert not (tmp_path / "out.bin.part").exists()


def test_unsupported_scheme(tmp_path):
    with pytest.raises(DownloadError, match="unsupported URL scheme"):
        fetch("gopher://example.invalid/x", tmp_path / "x", progress=False)


def test_progress_bar_goes_to_stderr(server, tmp_path, capsys):
    server.files["/data.bin"] = PAYLOAD
    fetch(server.url("/data.bin"), tmp_path / "data.bin", progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "data.bin" in captured.err


def test_sha256sum(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(PAYLOAD)
    assert sha256sum(path) == PAYLOAD_SHA256
    assert sha256sum(os.fspath(path)) == PAYLOAD_SHA256
