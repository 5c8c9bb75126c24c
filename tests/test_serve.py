"""`imgtxt serve` end to end in a real browser: the server as a user starts it, headless Chromium (Debian's
chromium + chromium-driver) searches, sees the thumbnails, clicks one and gets its captions. The screenshot is
made in the test's temp folder and checked, never kept."""
from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import copy_examples

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.fixture()
def server(library, tmp_path):
    photos = copy_examples(tmp_path / "photos")
    library.run("index", tmp_path / "photos", "-q")
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "imgtxt", "serve", "--port", str(port)], env=library.env,
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if process.poll() is not None:
                pytest.fail(f"imgtxt serve exited {process.returncode}: {process.stderr.read()}")
            try:
                if status_of(url + "/") == 200:
                    break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("imgtxt serve did not answer within 120 s")
        yield url, photos
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture()
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the test extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(180)
    try:
        yield driver
    finally:
        driver.quit()


def loaded_images(driver, selector: str) -> int:
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].filter(i => i.complete && i.naturalWidth > 0).length",
        selector)


def wait_for(condition, timeout: float = 120.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("timed out waiting for the page")


def test_search_shows_thumbnails_and_a_click_shows_captions(server, browser, tmp_path, library):
    from PIL import Image
    from selenium.webdriver.common.by import By

    url, photos = server
    browser.get(url + "/")
    box = browser.find_element(By.NAME, "q")
    box.send_keys("a cat sitting on a table")
    box.submit()
    wait_for(lambda: browser.find_elements(By.ID, "count"))
    thumbs = browser.find_elements(By.CSS_SELECTOR, "img.thumb")
    assert len(thumbs) == len(photos)
    wait_for(lambda: loaded_images(browser, "img.thumb") == len(photos))
    scores = [float(s.text) for s in browser.find_elements(By.CSS_SELECTOR, ".hit .score")]
    assert len(scores) == len(photos) and scores == sorted(scores, reverse=True)

    shot = tmp_path / "search.png"
    assert browser.save_screenshot(str(shot))
    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.std() > 20                                             # not a blank page
    colours = len(np.unique(pixels.reshape(-1, 3) // 8, axis=0))
    assert colours > 1000, colours                                       # photos, not just text on a background

    # Thumbnails were made once, into the cache folder; the photo folder is untouched.
    assert len(list((Path(library.env["IMGTXT_CACHE_DIR"]) / "thumbnails" / "256").glob("*.jpg"))) == len(photos)
    assert sorted(p.name for p in (tmp_path / "photos").iterdir()) == sorted(p.name for p in photos)

    first = browser.find_elements(By.CSS_SELECTOR, "a.hit")[0]
    clicked = first.get_attribute("title")
    first.click()
    wait_for(lambda: browser.find_elements(By.ID, "captions"))
    captions = browser.find_elements(By.CSS_SELECTOR, "#captions li.caption")
    assert len(captions) == 5 and all(c.text.strip() for c in captions)
    assert clicked in browser.find_element(By.ID, "captions").text
    wait_for(lambda: loaded_images(browser, "img.large") == 1)
    similar = browser.find_elements(By.CSS_SELECTOR, "img.thumb")
    assert len(similar) == len(photos) - 1 and clicked not in {s.get_attribute("alt") for s in similar}
    browser.save_screenshot(str(tmp_path / "photo.png"))
    assert np.asarray(Image.open(tmp_path / "photo.png").convert("RGB")).std() > 20


def test_only_indexed_photos_can_be_fetched(server):
    url, _ = server
    assert status_of(url + "/thumb/1") == 200
    for path in ("/thumb/999999", "/large/0", "/thumb/..%2F..%2Fetc%2Fpasswd", "/thumb/%2Fetc%2Fpasswd",
                 "/photo/999999", "/large/1/../../../etc/passwd"):
        assert status_of(url + path) == 404, path
