#!/usr/bin/env python3
"""Drives haul serve's page in headless Chromium (selenium + chromium-driver), as a user would.

usage: HAUL_PAGE_URL=... page-test.py DOWNLOAD_URL SCREENSHOT_DIR [--second URL]

HAUL_PAGE_URL is what haul serve prints (http://127.0.0.1:PORT/#token=...; in the environment,
not the arguments, which any local user can read in ps). The script adds
DOWNLOAD_URL through the form, waits until its bar moves, pauses it, waits, resumes it and
waits until it completes; opens the page with a wrong #token= (the stored one must stay); with --second it adds another download and leaves it running for the
screenshots. It writes page-light.png and page-dark.png (prefers-color-scheme emulated) and
fails (exit 1, one line on stderr) on any step that does not happen in time, on a console
error (a Content-Security-Policy violation among them) or when the token is left in the
address bar. What the server saw is for the caller to check.
"""
import os
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By


def fail(message):
    print("page-test: " + message, file=sys.stderr)
    sys.exit(1)


def until(what, condition, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception:  # an element re-rendered between the find and the read
            pass
        time.sleep(0.1)
    fail("timed out waiting for " + what)


def main():
    args = sys.argv[1:]
    second = None
    if "--second" in args:
        i = args.index("--second")
        second = args[i + 1]
        args = args[:i] + args[i + 2:]
    url, shots = args
    page = os.environ["HAUL_PAGE_URL"]
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=900,1000",
                 "--disable-dev-shm-usage", "--no-first-run", "--no-proxy-server"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        run(driver, page, url, shots, second)
    finally:
        driver.quit()


def row(driver, index=0):
    rows = driver.find_elements(By.CSS_SELECTOR, "#list li")
    return rows[index] if len(rows) > index else None


def badge(driver, index=0):
    r = row(driver, index)
    return r.find_element(By.CSS_SELECTOR, ".badge").text if r else ""


def add(driver, url):
    box = driver.find_element(By.ID, "urls")
    box.clear()
    box.send_keys(url)
    driver.find_element(By.CSS_SELECTOR, "#add-form button[type=submit]").click()


def run(driver, page, url, shots, second):
    driver.get(page)
    until("the page", lambda: driver.find_element(By.ID, "empty").is_displayed())
    if "token=" in driver.current_url:
        fail("the token is still in the address bar: " + driver.current_url)
    until("the settings", lambda: driver.find_element(By.ID, "concurrency").get_attribute("value") != ""
          and driver.find_element(By.ID, "speed-limit").get_attribute("value") == "0")
    add(driver, url)
    until("the download to run", lambda: badge(driver) == "running")
    bar = lambda: float(row(driver).find_element(By.TAG_NAME, "progress").get_attribute("value") or 0)
    first = until("the bar to fill", lambda: bar() > 0 and bar())
    until("the bar to move", lambda: bar() > first)
    row(driver).find_element(By.CSS_SELECTOR, "button[data-act=pause]").click()
    until("the pause", lambda: badge(driver) == "paused")
    time.sleep(1.5)
    row(driver).find_element(By.CSS_SELECTOR, "button[data-act=resume]").click()
    until("the download to complete", lambda: badge(driver) == "completed", timeout=60)
    # A link with another token does not replace the one this daemon proved it has.
    driver.get(page.split("#")[0] + "#token=" + "0" * 64)
    until("the list after a link with a wrong token", lambda: badge(driver) == "completed")
    if second:
        add(driver, second)
        until("the second download to run", lambda: badge(driver, 0) == "running" or badge(driver, 1) == "running")
        time.sleep(1.2)
    driver.save_screenshot(shots + "/page-light.png")
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                           {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    time.sleep(0.5)
    driver.save_screenshot(shots + "/page-dark.png")
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    if errors:
        fail("console errors: " + " | ".join(errors))
    print("page-test: ok")


if __name__ == "__main__":
    main()
