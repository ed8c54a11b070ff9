#!/usr/bin/python3
"""The dashboard in a real browser: Debian's chromium, driven through chromium-driver by
Python selenium (Debian's python3-selenium, hence /usr/bin/python3).

A fresh server (SQLite, or --database); a customer made by a test-store purchase through the
SDK (`countersign client purchase`); then, in the browser: sign in with the app's secret key,
search the customer, open their page, grant a promotional entitlement and revoke it, each change
seen on the page and in a signed CustomerInfo that the SDK verifies against the pinned root
(`countersign client customer-info --mode enforced`). A screenshot of every page goes to
--screenshots at a laptop and a phone width. Exit 0 when every check held, 1 otherwise.
"""
import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from countersign_process import app_keys, start_server  # noqa: E402

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

USER = "browser-buyer-%s" % os.urandom(4).hex()  # a database may be reused
failures = []
checks = []


def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what)
    checks.append(what)
    if not condition:
        failures.append(what)


CHARTS = ["revenue", "mrr", "active_subscriptions", "active_trials", "new_customers", "churn", "refunds", "trial_conversion"]


def chart_history(binary, data, database):
    """Five months of purchases, imported as RevenueCat's export (scripts/chart-check.py's seeded
    history), so the chart pages have something to draw; returns the first day of the history."""
    spec = importlib.util.spec_from_file_location("chart_check", os.path.join(os.path.dirname(os.path.abspath(__file__)), "chart-check.py"))
    charts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(charts)
    server, _ = start_server(binary, data, database)
    server.terminate()
    server.wait(timeout=30)
    charts.configure(data)
    end = charts.day_start(int(time.time() * 1000)) - charts.DAY
    start = end - 150 * charts.DAY
    history = charts.generate(51, start, end, 300)
    path = os.path.join(data, "history.csv")
    charts.export(history.rows_first + history.rows_late, path)
    command = [binary, "import", "revenuecat", "--transactions", path, "--data-dir", data] + (["--database", database] if database else [])
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    return charts.day_text(start)


def customer_info(binary, port, public_key, root_key):
    """CustomerInfo fetched and verified by the SDK in enforced mode."""
    output = subprocess.run(
        [binary, "client", "customer-info", "--server", f"http://127.0.0.1:{port}", "--api-key", public_key,
         "--app-user-id", USER, "--root-key", root_key, "--mode", "enforced", "--json"],
        capture_output=True, text=True, timeout=120)
    return json.loads(output.stdout)


def make_driver(width, height):
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={width},{height}"]:
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)


def click(driver, by, value):
    """Clicks a link or a submit button and waits for the next page to replace this one."""
    page = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(by, value).click()
    WebDriverWait(driver, 20).until(lambda _: replaced(page))
    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return document.readyState") == "complete")


def replaced(element):
    """Whether `element` no longer belongs to the page: expected_conditions.staleness_of, and also
    when chromedriver, asked while the next page replaces this one, answers that the node "does
    not belong to the document" (a WebDriverException, not a stale-element one: the flake a CI
    run of the sign-in click hit)."""
    try:
        element.is_enabled()
        return False
    except StaleElementReferenceException:
        return True
    except WebDriverException as error:
        if "does not belong to the document" in str(error):
            return True
        raise


def screenshot(driver, folder, name):
    height = driver.execute_script("return document.documentElement.scrollHeight")
    width = driver.get_window_size()["width"]
    driver.set_window_size(width, max(600, min(height + 120, 4000)))
    path = os.path.join(folder, name + ".png")
    driver.save_screenshot(path)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--database", help="a PostgreSQL URL (default: SQLite in the data directory)")
    parser.add_argument("--screenshots", default="dashboard-screenshots", help="the folder the screenshots go to")
    args = parser.parse_args()
    os.makedirs(args.screenshots, exist_ok=True)
    data = tempfile.mkdtemp(prefix="countersign-dashboard-")
    history_start = chart_history(args.binary, data, args.database)
    server, port = start_server(args.binary, data, args.database)
    driver = None
    try:
        public_key, secret_key = app_keys(data)
        root_key = open(os.path.join(data, "keys", "root.pub")).read().strip()
        bought = subprocess.run(
            [args.binary, "client", "purchase", "--server", f"http://127.0.0.1:{port}", "--api-key", public_key,
             "--app-user-id", USER, "--root-key", root_key, "--mode", "enforced", "--product", "coins_100", "--json"],
            capture_output=True, text=True, timeout=120)
        purchase = json.loads(bought.stdout)
        check(bought.returncode == 0 and purchase.get("verification") == "verified", "a test-store purchase through the SDK, verified")
        transaction = purchase.get("transactionId", "")
        before = customer_info(args.binary, port, public_key, root_key)
        check(before.get("entitlements", {}).get("pro", {}).get("isActive") is not True, "no active pro entitlement before the grant")

        base = f"http://127.0.0.1:{port}"
        for label, (width, height) in [("laptop", (1366, 900)), ("phone", (390, 844))]:
            driver = make_driver(width, height)
            shots = os.path.join(args.screenshots, label)
            os.makedirs(shots, exist_ok=True)
            driver.get(base + "/dashboard")
            check(driver.current_url.endswith("/dashboard/login"), f"{label}: the dashboard sends an unknown browser to sign in")
            screenshot(driver, shots, "01-login")
            driver.find_element(By.ID, "secret_key").send_keys("cs_sk_not-a-key")
            click(driver, By.ID, "sign-in")
            check("No app here has that secret key" in driver.page_source, f"{label}: a wrong key is refused")
            screenshot(driver, shots, "02-login-wrong-key")
            driver.find_element(By.ID, "secret_key").send_keys(secret_key)
            click(driver, By.ID, "sign-in")
            check(driver.current_url == base + "/dashboard" and "Active customers by entitlement" in driver.page_source,
                  f"{label}: signed in, the overview shows")
            check(driver.find_elements(By.CSS_SELECTOR, "svg.chart") != [], f"{label}: the overview draws its charts")
            check(secret_key not in driver.page_source and secret_key not in driver.current_url, f"{label}: the secret key is nowhere on the page")
            screenshot(driver, shots, "03-overview")

            click(driver, By.LINK_TEXT, "Customers")
            driver.find_element(By.ID, "q").send_keys(transaction or USER)
            click(driver, By.ID, "search")
            check(len(driver.find_elements(By.LINK_TEXT, USER)) == 1, f"{label}: the search by transaction id finds the buyer")
            screenshot(driver, shots, "04-search")
            click(driver, By.LINK_TEXT, USER)
            check("coins_100" in driver.page_source, f"{label}: the customer page lists the purchase")
            screenshot(driver, shots, "05-customer")

            if label == "laptop":
                Select(driver.find_element(By.ID, "grant-entitlement")).select_by_value("pro")
                Select(driver.find_element(By.ID, "grant-duration")).select_by_value("weekly")
                click(driver, By.ID, "grant")
                rows = driver.find_element(By.ID, "entitlements").text
                check("Promotional entitlement granted." in driver.page_source and "active" in rows and "promotional grant" in rows,
                      "the grant shows on the page")
                screenshot(driver, shots, "06-granted")
                granted = customer_info(args.binary, port, public_key, root_key)
                pro = granted.get("entitlements", {}).get("pro", {})
                check(granted.get("verification") == "verified" and pro.get("isActive") is True,
                      "the signed CustomerInfo verifies and grants pro")

                Select(driver.find_element(By.ID, "revoke-entitlement")).select_by_value("pro")
                click(driver, By.ID, "revoke")
                check("Promotional entitlements revoked." in driver.page_source and "revoked" in driver.find_element(By.ID, "grants").text,
                      "the revocation shows on the page")
                screenshot(driver, shots, "07-revoked")
                revoked = customer_info(args.binary, port, public_key, root_key)
                check(revoked.get("verification") == "verified" and revoked.get("entitlements", {}).get("pro", {}).get("isActive") is not True,
                      "the signed CustomerInfo verifies and no longer grants pro")

            click(driver, By.PARTIAL_LINK_TEXT, "Delete this customer")
            screenshot(driver, shots, "08-delete-confirm")
            click(driver, By.LINK_TEXT, "Cancel")
            click(driver, By.LINK_TEXT, "Tampering")
            check("payloadMismatch" in driver.page_source, f"{label}: the tamper telemetry page explains each reason")
            screenshot(driver, shots, "09-failures")
            click(driver, By.LINK_TEXT, "Keys")
            check(root_key in driver.page_source and "signing now" in driver.page_source, f"{label}: the keys page shows the root to pin")
            screenshot(driver, shots, "10-keys")
            click(driver, By.LINK_TEXT, "Charts")
            check(len(driver.find_elements(By.CSS_SELECTOR, "svg.chart")) == len(CHARTS), f"{label}: the charts page draws every revenue chart")
            driver.get(base + f"/dashboard/charts?resolution=week&from={history_start}")
            check("$" in driver.find_element(By.TAG_NAME, "main").text, f"{label}: the charts show money from the imported history")
            screenshot(driver, shots, "11-charts")
            for index, chart in enumerate(CHARTS):
                driver.get(base + f"/dashboard/charts/{chart}?resolution=week&from={history_start}")
                rows = driver.find_elements(By.CSS_SELECTOR, "table tbody tr")
                check(len(rows) >= 20 and driver.find_elements(By.ID, "csv") != [], f"{label}: the {chart} page lists its weeks and offers the CSV")
                screenshot(driver, shots, "%02d-chart-%s" % (12 + index, chart))
            click(driver, By.ID, "sign-out")
            check(driver.current_url.endswith("/dashboard/login"), f"{label}: signed out")
            driver.get(base + "/dashboard/keys")
            check(driver.current_url.endswith("/dashboard/login"), f"{label}: after sign-out the pages are closed")
            driver.quit()
            driver = None
    finally:
        if driver is not None:
            driver.quit()
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)
    print(f"screenshots in {os.path.abspath(args.screenshots)}")
    print(f"dashboard browser test: {len(checks) - len(failures)} of {len(checks)} checks held")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
