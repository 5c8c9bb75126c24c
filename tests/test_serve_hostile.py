"""`imgtxt serve` against hostile requests and a hostile environment, over plain HTTP on loopback: a real
uvicorn in this process (so a test can break the disk under it) or `imgtxt serve` itself. Foreign Host
headers, framing, huge ids, a crafted index, concurrent CNN pages, a full thumbnail cache, a taken port."""
from __future__ import annotations

import contextlib
import http.client
import io
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from conftest import copy_examples

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


def get(port: int, path: str, host: str | None = None, timeout: float = 120):
    """(status, headers, body) of GET path, with the Host header given (default 127.0.0.1:port)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.putrequest("GET", path, skip_host=True)
        connection.putheader("Host", f"127.0.0.1:{port}" if host is None else host)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


@pytest.fixture()
def indexed(library, tmp_path):
    photos = copy_examples(tmp_path / "photos")
    library.run("index", tmp_path / "photos", "-q")
    return photos


@contextlib.contextmanager
def uvicorn_thread(lib, captions_ready=None):
    """A uvicorn thread serving `lib` on 127.0.0.1:<free port>; yields the port."""
    import uvicorn

    from imgtxt.web.app import allowed_hosts, create_app, listen

    sock = listen("127.0.0.1", 0)
    app = create_app(lib, allowed_hosts("127.0.0.1"), captions_ready)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(200):
        if server.started:
            break
        time.sleep(0.05)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


@pytest.fixture()
def served(library, indexed):
    """The indexed examples served in this process; yields (port, Library)."""
    from imgtxt.library.photo_library import Library

    lib = Library(library.index)
    with uvicorn_thread(lib) as port:
        yield port, lib


def ids(lib) -> list[int]:
    with sqlite3.connect(lib.index_dir / "index.db") as db:
        return [row[0] for row in db.execute("SELECT id FROM photos ORDER BY id")]


def test_a_foreign_host_header_is_refused(served):
    port, lib = served
    for host in ("evil.example.com", f"evil.example.com:{port}", "127.0.0.1.nip.io", f"localhost.evil.com:{port}",
                 "", "[::2]"):
        status, headers, body = get(port, "/?q=a+dog", host=host)
        assert status == 421, host
        assert b"a dog" not in body and headers["x-frame-options"] == "DENY"
    photo = ids(lib)[0]
    assert get(port, f"/thumb/{photo}", host="rebind.example.com")[0] == 421
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}"):
        assert get(port, "/", host=host)[0] == 200, host


def test_every_response_forbids_framing_and_sniffing(served):
    port, lib = served
    for path in ("/", "/?q=a+dog", f"/thumb/{ids(lib)[0]}", "/photo/999999", "/nowhere", "/style.css"):
        status, headers, _ = get(port, path)
        assert headers["x-frame-options"] == "DENY", path
        assert headers["x-content-type-options"] == "nosniff", path
        csp = headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, path
    status, headers, body = get(port, "/?q=a+dog")
    assert status == 200 and b"<style>" not in body  # the CSP allows no inline style: the page needs none


@pytest.mark.parametrize("photo_id", [str(1 << 63), str((1 << 64) + 1), "9" * 5000, "0", "-1", "1e3", "abc",
                                      "%EF%BC%91"])  # a fullwidth digit one: str.isdigit() says yes
def test_ids_no_index_can_hold_are_404(served, photo_id):
    port, _ = served
    for route in ("photo", "thumb", "large"):
        assert get(port, f"/{route}/{photo_id}")[0] == 404, (route, photo_id[:30])


def test_sixteen_concurrent_photo_pages_that_need_the_cnn_all_answer(served, indexed):
    port, lib = served
    for photo in indexed:   # changed since indexing: each page embeds its photo with the CNN again
        os.utime(photo, ns=(time.time_ns(), time.time_ns()))
    pages = [f"/photo/{photo_id}" for photo_id in ids(lib)] * 4
    assert get(port, pages[0])[0] == 200   # the CNN loaded: from now on the server threads share it
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda path: get(port, path), pages[:16]))
    assert [status for status, _, _ in answers] == [200] * 16, [body[-300:] for _, _, body in answers]
    assert all(b'class="caption"' in body for _, _, body in answers)
    assert all(b'class="error"' not in body for _, _, body in answers)


def thumbnails_root() -> Path:
    return Path(os.environ["IMGTXT_CACHE_DIR"]) / "thumbnails"


def test_thumbnails_are_private_whatever_the_umask(served):
    port, lib = served
    old = os.umask(0o002)
    try:
        assert get(port, f"/thumb/{ids(lib)[0]}")[0] == 200
    finally:
        os.umask(old)
    files = list(thumbnails_root().rglob("*.jpg"))
    assert files
    for folder in [thumbnails_root(), *{f.parent for f in files}]:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}


def test_an_open_thumbnails_folder_left_by_an_older_version_is_closed(served):
    port, lib = served
    (thumbnails_root() / "256").mkdir(parents=True, mode=0o755)
    os.chmod(thumbnails_root(), 0o755)
    assert get(port, f"/thumb/{ids(lib)[0]}")[0] == 200
    assert stat.S_IMODE(thumbnails_root().stat().st_mode) == 0o700


def test_a_crafted_hash_column_cannot_steer_a_thumbnail_outside_the_cache(served, tmp_path, indexed):
    port, lib = served
    target = tmp_path / "outside"
    target.mkdir()
    with sqlite3.connect(lib.index_dir / "index.db") as db:
        db.execute("UPDATE photos SET hash = ?", [f"../../../../../../../..{target}/PWNED"])
    (target / "PWNED.jpg").write_bytes(b"secret")
    for photo_id in ids(lib):
        status, _, body = get(port, f"/thumb/{photo_id}")
        assert status == 200 and body != b"secret" and body[:2] == b"\xff\xd8"
    assert sorted(p.name for p in target.iterdir()) == ["PWNED.jpg"]
    names = [p.name for p in thumbnails_root().rglob("*") if p.is_file()]
    assert names and all(len(n) == 36 and n.endswith(".jpg") and int(n[:32], 16) >= 0 for n in names)


def mean_colour(jpeg: bytes) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"), dtype=np.float32).mean(axis=(0, 1))


def test_a_thumbnail_shows_the_file_as_it_is_now(served, indexed, tmp_path):
    """Edited without re-indexing, then restored: each time the picture of the file's current bytes."""
    port, lib = served
    photo_id, photo = ids(lib)[0], indexed[0]
    original = photo.read_bytes()
    first = get(port, f"/thumb/{photo_id}")[2]
    from PIL import Image

    Image.new("RGB", (320, 240), (255, 0, 0)).save(photo, "JPEG")   # edited: all red
    edited = get(port, f"/thumb/{photo_id}")[2]
    assert np.allclose(mean_colour(edited), [255, 0, 0], atol=8)
    photo.write_bytes(original)                                   # restored
    status, headers, body = get(port, f"/thumb/{photo_id}")
    assert body == first and "no-cache" in headers["cache-control"]   # a browser asks again each time


def test_a_full_thumbnail_cache_still_shows_the_photo(served, monkeypatch):
    import errno

    import imgtxt.library.thumbnails as thumbnails

    port, lib = served

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(thumbnails.os, "replace", full)
    status, headers, body = get(port, f"/large/{ids(lib)[0]}")
    assert status == 200 and headers["content-type"] == "image/jpeg" and body[:2] == b"\xff\xd8"
    assert headers["cache-control"] == "no-store"
    assert not [p for p in thumbnails_root().rglob("*") if p.is_file()]   # no temporary file left


def test_a_photo_gone_since_indexing_is_404_not_500(served, indexed):
    port, lib = served
    indexed[0].unlink()
    status, _, body = get(port, f"/thumb/{ids(lib)[0]}")
    assert status == 404 and b"no such file" in body


def test_photo_pages_answer_before_the_captions_are_ready(library, indexed):
    from imgtxt.library.photo_library import Library

    lib, ready = Library(library.index), threading.Event()
    with uvicorn_thread(lib, ready) as port:
        page = f"/photo/{ids(lib)[0]}"
        status, _, body = get(port, page)
        assert status == 200 and b'id="captions-pending"' in body and b'http-equiv="refresh"' in body
        assert b'class="caption"' not in body and b'class="hit"' in body   # similar photos need no captions
        ready.set()
        status, _, body = get(port, page)
        assert status == 200 and b'id="captions-pending"' not in body and body.count(b'class="caption"') == 5


def serve_process(library, *args):
    return subprocess.Popen([sys.executable, "-m", "imgtxt", "serve", *map(str, args)], env=library.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_serve_says_where_only_once_it_listens_and_a_taken_port_is_one_line(library, indexed):
    from imgtxt.web.app import listen

    taken = listen("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "imgtxt", "serve", "--port", str(port)], env=library.env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 1
        assert result.stderr.strip() == f"imgtxt: cannot listen on 127.0.0.1:{port}: address already in use"
    finally:
        taken.close()
    process = serve_process(library, "--port", port)
    try:
        line = process.stderr.readline()
        assert line.startswith("imgtxt: serving ") and f"http://127.0.0.1:{port}/" in line, line
        status, _, body = get(port, "/", timeout=30)   # answers at once: nothing slow happened before
        assert status == 200
    finally:
        process.terminate()
        process.wait(30)


def test_a_file_name_that_is_not_utf8_shows_on_every_page(library, tmp_path):
    from imgtxt.library.photo_library import Library

    photos = copy_examples(tmp_path / "photos")
    latin1 = photos[0].with_name(os.fsdecode(b"caf\xe9.jpg"))
    photos[0].rename(latin1)
    library.run("index", tmp_path / "photos", "-q")
    lib = Library(library.index)
    with uvicorn_thread(lib) as port:
        status, _, body = get(port, "/?q=a+photo&n=20")
        assert status == 200 and b"caf\\xe9.jpg" in body   # results name it by its index key
        pages = [get(port, f"/photo/{photo_id}") for photo_id in ids(lib)]
        assert [status for status, _, _ in pages] == [200] * len(photos)
        assert any("caf\ufffd.jpg".encode() in body for _, _, body in pages)   # its own page: the file's name
        assert all(get(port, f"/thumb/{photo_id}")[0] == 200 for photo_id in ids(lib))


def test_serve_checks_its_extra_before_loading_anything(monkeypatch):
    import importlib.util

    from click.testing import CliRunner

    import imgtxt.library.photo_library as photo_library
    from imgtxt.cli.main import app

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a))

    def too_early(*args, **kwargs):
        raise AssertionError("the index or model was opened before the extra was checked")
    monkeypatch.setattr(photo_library.Library, "__init__", too_early)
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "uvicorn missing" in result.stderr and "[serve]'" in result.stderr
    assert "'imgtxt[serve]'" not in result.stderr   # imgtxt is not on PyPI: that command finds nothing


# The shipped model on a fresh cache folder: how long `imgtxt serve` takes to answer `/`, and a photo page to show
# its captions. Measured on a 2-core machine at load 3-4: `/` answered 0.5-0.7 s after the process started
# (interpreter, imports, the index's status, binding the port), captions 1.2-1.9 s. A loaded machine (the suite's
# other worker training, or load ~25) makes a cold process up to ~5x slower, so about 3.5 s and 9.5 s; the bounds
# are about 3x that. They stay far below what embedding the 31,305-caption bank costs (minutes of CPU; most of an
# hour at load ~25): serve must never do that before it listens, and with the shipped model never at all (its
# vectors ship with it), so either regression fails here.
FIRST_ANSWER_S = 10.0
CAPTIONS_READY_S = 30.0


def test_serve_answers_at_once_and_shows_captions_within_seconds_with_the_shipped_model(library, tmp_path):
    from conftest import REPO

    copy_examples(tmp_path / "photos")
    library.run("index", tmp_path / "photos", "--model", REPO / "weights" / "default", "-q")
    with sqlite3.connect(library.index / "index.db") as db:
        first_id = db.execute("SELECT min(id) FROM photos").fetchone()[0]
    from imgtxt.web.app import listen

    probe = listen("127.0.0.1", 0)
    port = probe.getsockname()[1]
    probe.close()
    env = {**library.env, "IMGTXT_CACHE_DIR": str(tmp_path / "fresh-cache")}   # nothing cached for serve
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "imgtxt", "serve", "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def first_answer(path: str, deadline: float, until=lambda body: True):
            while time.monotonic() < started + deadline:
                assert process.poll() is None, f"imgtxt serve exited {process.returncode}: {process.stderr.read()}"
                try:
                    status, _, body = get(port, path, timeout=deadline)
                    if status == 200 and until(body):
                        return time.monotonic() - started, body
                except OSError:
                    pass
                time.sleep(0.05)
            pytest.fail(f"imgtxt serve did not answer {path} within {deadline:.0f} s (fresh cache, shipped model)")

        answered, body = first_answer("/", FIRST_ANSWER_S)
        assert b"<form" in body
        captioned, body = first_answer(f"/photo/{first_id}", CAPTIONS_READY_S,
                                       until=lambda body: b'id="captions-pending"' not in body)
        assert body.count(b'<li class="caption') == 5
        print(f"serve: / after {answered:.2f} s, captions after {captioned:.2f} s")
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:   # busy embedding in its background thread: do not wait for it
            process.kill()
            process.wait(30)
