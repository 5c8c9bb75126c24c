"""The web page's home, filters, "photos like this" and duplicate groups, over a served index of dated, geotagged,
foldered photos with copies; and the search box in a 400-px-wide window of the real browser."""
from __future__ import annotations

import shutil
import time

import pytest
from test_remembered_search import album  # noqa: F401 - the fixture: dated, geotagged, foldered photos
from test_serve import browser, loaded_images, server, wait_for  # noqa: F401 - fixtures and helpers
from test_serve_hostile import get, uvicorn_thread


@pytest.fixture()
def served_album(library, album):  # noqa: F811
    from imgtxt.library.photo_library import Library

    root, photos = album
    shutil.copy2(photos["beach"], root / "misc" / "beach copy.jpg")
    library.run("index", root, "-q")
    lib = Library(library.index)
    with uvicorn_thread(lib) as port:
        yield port, lib, photos


def page(port, path) -> tuple[int, str]:
    status, _, body = get(port, path)
    return status, body.decode("utf-8")


def photo_id(lib, path) -> int:
    import sqlite3

    with sqlite3.connect(lib.index_dir / "index.db") as db:
        return db.execute("SELECT id FROM photos WHERE path = ?", [str(path)]).fetchone()[0]


def test_home_filters_like_and_duplicates_pages(served_album):
    port, lib, photos = served_album
    status, body = page(port, "/")
    assert status == 200 and 'id="overview"' in body
    assert "<strong>6</strong> photos in <strong>1</strong> folder" in body
    assert "taken 2015-06-01 to 2021-03-02" in body and "5 dated by their camera, 2 with a GPS position" in body
    assert body.count('class="example"') == 5 and 'href="/duplicates"' in body
    newest = photo_id(lib, photos["lisbon"])
    assert body.index(f'/photo/{newest}"') < body.index(f'/photo/{photo_id(lib, photos["old"])}"')   # newest first

    status, body = page(port, "/?q=a+dog&after=2019-06&before=2019-09")
    assert status == 200 and "searching for: a dog · taken on or after 2019-06-01 · taken before 2019-10-01" in body
    assert body.count('class="hit') == 1 and "IMG_0001.jpg" in body
    assert 'name="after" value="2019-06"' in body and "<details class=\"filters\" open>" in body

    beach = photo_id(lib, photos["beach"])
    status, body = page(port, f"/photo/{beach}")
    assert status == 200 and "taken 2018-08-01 10:00" in body and 'id="like-form"' in body
    status, body = page(port, f"/?like={beach}&q=snow")
    assert status == 200, body[body.find('<main>'):][:400]
    assert 'name="like" value="%d"' % beach in body and "like " in body
    assert f"/photo/{beach}\"" not in body and body.count('class="hit') == 4   # itself and its copy left out

    status, body = page(port, "/duplicates")
    assert status == 200 and body.count("class=\"group\"") >= 1 and "beach copy.jpg" in body
    assert "Nothing is deleted or moved" in body

    status, body = page(port, "/?q=a+dog&after=someday")
    assert status == 400 and "--after &#39;someday&#39;: not a date" in body
    status, body = page(port, "/?like=999999")
    assert status == 400 and "no indexed photo with id 999999" in body


def test_the_search_box_and_buttons_fit_a_400_px_window(server, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    url, photos = server
    browser.set_window_size(400, 900)
    browser.get(url + "/")
    wait_for(lambda: browser.find_elements(By.ID, "overview"))
    width = browser.execute_script("return document.documentElement.clientWidth")
    assert width <= 400
    for selector in ("input[name=q]", "form.search button", "a.nav", "details.filters summary"):
        box = browser.find_element(By.CSS_SELECTOR, selector).rect
        assert box["x"] >= 0 and box["x"] + box["width"] <= width and box["width"] > 20, (selector, box)
    wide = browser.execute_script("return [...document.querySelectorAll('*')].filter(e => e.getBoundingClientRect()"
                                  ".right > arguments[0]).map(e => e.tagName + '.' + e.className)", width)
    assert browser.execute_script("return document.documentElement.scrollWidth") <= width, wide   # no sideways scroll
    browser.find_element(By.CSS_SELECTOR, "details.filters summary").click()
    near = browser.find_element(By.NAME, "after").rect
    assert near["x"] + near["width"] <= width
    box = browser.find_element(By.NAME, "q")
    box.send_keys("a cat")
    box.submit()
    wait_for(lambda: browser.find_elements(By.ID, "count"))
    wait_for(lambda: loaded_images(browser, "img.thumb") == len(photos))
    assert browser.execute_script("return document.documentElement.scrollWidth - document.documentElement.clientWidth"
                                  " + (window.innerWidth <= 400 ? 0 : 1)") <= 0          # no sideways scroll
    browser.find_elements(By.CSS_SELECTOR, "a.hit")[0].click()
    wait_for(lambda: browser.find_elements(By.ID, "like-form"))
    button = browser.find_element(By.CSS_SELECTOR, "#like-form button").rect
    assert button["x"] + button["width"] <= width
    browser.find_element(By.CSS_SELECTOR, "#like-form button").click()
    wait_for(lambda: browser.find_elements(By.ID, "count"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "img.thumb")) == len(photos) - 1
    time.sleep(0.2)
