"""The command line where its output or its input is hostile: stdout closed, full, or in an encoding without
the characters; a query that is not text; no home folder; control characters and unreadable folders in
paths. Each is one line on stderr and a non-zero exit, never a traceback."""
from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest
from conftest import copy_examples


@pytest.fixture()
def indexed(library, tmp_path):
    photos = copy_examples(tmp_path / "photos")
    photos[0].rename(tmp_path / "photos" / "café.jpg")   # a name an ASCII terminal cannot show
    library.run("index", tmp_path / "photos", "-q")
    return library


def imgtxt(library, *args, stdout=subprocess.PIPE, env=None, **kwargs):
    return subprocess.run([sys.executable, "-m", "imgtxt", *args], env={**library.env, **(env or {})},
                          stdout=stdout, stderr=subprocess.PIPE, timeout=300, **kwargs)


def one_line_error(result) -> str:
    stderr = result.stderr.decode("utf-8", "replace") if isinstance(result.stderr, bytes) else result.stderr
    assert result.returncode not in (0, None), stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert stderr.count("\n") == 1 and stderr.startswith("imgtxt: "), stderr
    return stderr


def test_stdout_closed(indexed):
    result = imgtxt(indexed, "search", "a dog", stdout=None, preexec_fn=lambda: os.close(1))
    assert "stdout is closed" in one_line_error(result)


def test_stdout_full(indexed):
    with open("/dev/full", "w") as full:
        for args in (["search", "a dog"], ["search", "a dog", "--json"], ["search", "a dog", "-0"], ["status"]):
            result = imgtxt(indexed, *args, stdout=full)
            assert "no space left on device" in one_line_error(result).lower(), args


def test_an_output_encoding_without_the_characters_of_a_name(indexed):
    result = imgtxt(indexed, "search", "a photo", "-n", "10", env={"PYTHONIOENCODING": "ascii"})
    assert "'\\xe9'" in one_line_error(result) and "PYTHONIOENCODING=utf-8" in result.stderr.decode()
    names = imgtxt(indexed, "search", "a photo", "-n", "10", "-0", env={"PYTHONIOENCODING": "ascii"})
    assert names.returncode == 0 and "café.jpg".encode() in names.stdout   # -0 writes the bytes as they are


def test_a_closed_pipe_ends_quietly(indexed):
    reader = subprocess.Popen(["head", "-c", "1"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    result = imgtxt(indexed, "search", "a photo", "-n", "10", stdout=reader.stdin)
    reader.stdin.close()
    reader.wait(30)
    assert "Traceback" not in result.stderr.decode() and result.stderr.decode().count("\n") <= 1


@pytest.mark.parametrize("query", [b"a \xff dog", b"a \xed\xa0\x80 dog"])  # invalid UTF-8; a lone surrogate
def test_a_query_that_is_not_text(indexed, query):
    result = subprocess.run([sys.executable.encode(), b"-m", b"imgtxt", b"search", query], env=indexed.env,
                            capture_output=True, timeout=300)
    assert "not valid text" in one_line_error(result)


def test_the_python_api_refuses_a_lone_surrogate(indexed):
    from imgtxt import ImgtxtError, Library

    with pytest.raises(ImgtxtError, match="not valid text"):
        Library(indexed.index).search("a \ud800 dog")


def test_no_home_folder(indexed, monkeypatch):
    """HOME unset and a uid without a passwd entry (containers): one line naming what to set."""
    import pwd

    from click.testing import CliRunner

    from imgtxt.cli.main import app

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")
    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    for name in ("HOME", "IMGTXT_INDEX_DIR", "IMGTXT_CACHE_DIR", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    result = CliRunner().invoke(app, ["search", "a dog"])
    assert result.exit_code == 1 and result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr.startswith("imgtxt: no home folder") and "IMGTXT_INDEX_DIR" in result.stderr
    ok = CliRunner().invoke(app, ["search", "a dog", "--index", str(indexed.index)])  # needs no home
    assert ok.exit_code == 0, ok.stderr


def test_control_characters_in_a_path_are_escaped_in_errors(indexed, tmp_path):
    evil = str(tmp_path / "x\x1b[31mred\n.jpg")
    for args in (["similar", evil], ["caption", evil], ["caption", "--captions", evil, evil],
                 ["search", "a dog", "--index", evil + "/"], ["forget", evil]):
        stderr = one_line_error(imgtxt(indexed, *args, text=True))
        assert "\x1b" not in stderr and "x\\x1b[31mred\\n.jpg" in stderr, args


def test_a_photo_behind_a_folder_without_x_permission_is_permission_denied(indexed, tmp_path, monkeypatch):
    from imgtxt import ImgtxtError, Library

    photo = str(tmp_path / "locked" / "cat.jpg")
    real_stat = os.stat

    def locked(path, *args, **kwargs):   # as an unprivileged user sees it (root would read it anyway)
        if str(path).startswith(str(tmp_path / "locked") + "/"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_stat(path, *args, **kwargs)
    monkeypatch.setattr(os, "stat", locked)
    with pytest.raises(ImgtxtError, match=r"cat\.jpg: permission denied"):
        Library(indexed.index).similar(photo)
