#!/usr/bin/env python3
"""GET /'s chat page in a real browser: Debian's headless Chromium, driven through chromedriver by Selenium,
against `mtp serve` drafting with MTP on the bundled model. A prompt is sent; once the page says the reply
is done (its mtp-reply-done event), the reply must hold accepted-draft and trunk tokens drawn in different
colours, and the tokens/s and acceptance readouts must show numbers. A screenshot is saved (the CI artifact)
and checked to be a rendered page, not a blank one.

Usage: page_browser_test.py MTP_BINARY MODEL SCREENSHOT_PNG
Exit 77 (ctest: skipped) when chromium, chromedriver or python3-selenium is missing (`make test` installs
them).
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

REPLY_TIMEOUT_S = 120


def find_browser():
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not (os.access(chromium, os.X_OK) and os.access(driver, os.X_OK)):
        return None
    return chromium, driver


def start_server(mtp, model):
    server = subprocess.Popen([mtp, "serve", "-m", model, "--port", "0", "-np", "1", "-t", "2", "--spec", "mtp",
                               "--draft-max", "3", "--alias", "example"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in server.stdout:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            return server, int(m.group(1))
    server.kill()
    raise RuntimeError("mtp serve exited before it listened")


def png_pixels(png):
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG: enough to check a screenshot."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        data = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", data[:10])
            assert depth == 8 and color in (2, 6), f"unexpected PNG format: depth {depth}, colour type {color}"
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += data
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        filt, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if filt == 1:
                line[i] = (line[i] + a) & 255
            elif filt == 2:
                line[i] = (line[i] + b) & 255
            elif filt == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif filt == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return width, height, channels, rows


def check_screenshot(png, draft_rgb, trunk_rgb):
    width, height, channels, rows = png_pixels(png)
    colours = set()
    for line in rows[::4]:
        for x in range(0, width * channels, channels * 2):
            colours.add(tuple(line[x:x + 3]))
    assert width >= 600 and height >= 400, f"screenshot is {width}x{height}"
    assert len(colours) >= 16, f"screenshot looks blank: {len(colours)} colours"
    for name, rgb in (("draft", draft_rgb), ("trunk", trunk_rgb)):
        assert rgb in colours, f"screenshot lacks the {name} colour {rgb}"


def rgb_of(css):
    m = re.match(r"rgba?\((\d+), (\d+), (\d+)", css)
    assert m, css
    return tuple(int(v) for v in m.groups())


def run(driver, url, screenshot):
    from selenium.webdriver.common.by import By

    driver.set_script_timeout(REPLY_TIMEOUT_S)
    driver.get(url)
    served = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "window.mtpPropsLoaded.then(() => done(document.getElementById('served').textContent));")
    assert "example" in served and "MTP drafting" in served, served
    driver.find_element(By.ID, "max-tokens").clear()
    driver.find_element(By.ID, "max-tokens").send_keys("120")
    driver.find_element(By.ID, "prompt").send_keys("Tell me about the model")
    # The listener goes in before the click, so the end of the reply cannot be missed.
    detail = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "document.addEventListener('mtp-reply-done', (e) => done(e.detail), {once: true});"
        "document.getElementById('send').click();")
    error = driver.find_element(By.ID, "error").text
    assert error == "", error
    draft = driver.find_elements(By.CSS_SELECTOR, "#log .tok.draft")
    trunk = driver.find_elements(By.CSS_SELECTOR, "#log .tok.trunk")
    assert detail["tokens"] == len(draft) + len(trunk) and detail["tokens"] > 0, (detail, len(draft), len(trunk))
    assert draft and trunk, f"{len(draft)} draft and {len(trunk)} trunk tokens"
    draft_bg = rgb_of(draft[0].value_of_css_property("background-color"))
    trunk_bg = rgb_of(trunk[0].value_of_css_property("background-color"))
    assert draft_bg != trunk_bg, f"draft and trunk tokens share the background {draft_bg}"
    assert draft[0].value_of_css_property("color") != trunk[0].value_of_css_property("color")

    tps = float(driver.find_element(By.ID, "tps").text)
    assert tps > 0, tps
    rates = [float(e.text) for e in driver.find_elements(By.CSS_SELECTOR, "#acc .acc-value")]
    assert rates and all(0 <= r <= 1 for r in rates) and rates[0] > 0, rates
    rounds = int(driver.find_element(By.ID, "rounds").text)
    assert rounds > 0, rounds

    png = driver.get_screenshot_as_png()
    tmp = screenshot + ".tmp"
    with open(tmp, "wb") as f:
        f.write(png)
    os.replace(tmp, screenshot)
    check_screenshot(png, draft_bg, trunk_bg)
    print(f"{len(draft)} draft and {len(trunk)} trunk tokens, {tps:.1f} tokens/s, acceptance per position "
          f"{rates}; screenshot {screenshot}")


def main():
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    mtp, model, screenshot = sys.argv[1:]
    browser = find_browser()
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        browser = None
    if browser is None:
        print("chromium, chromedriver or python3-selenium is not installed: skipped")
        return 77
    chromium, chromedriver = browser
    os.makedirs(os.path.dirname(os.path.abspath(screenshot)), exist_ok=True)
    profile = tempfile.mkdtemp(prefix="mtp-chromium-")
    server, port = start_server(mtp, model)
    driver = None
    try:
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        # --no-sandbox: Chromium's sandbox refuses to run as root, which CI is.
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1100,760", f"--user-data-dir={profile}"):
            options.add_argument(arg)
        driver = webdriver.Chrome(service=Service(chromedriver), options=options)
        run(driver, f"http://127.0.0.1:{port}/", screenshot)
        return 0
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(profile, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
