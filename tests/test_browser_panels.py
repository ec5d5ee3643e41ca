"""The what-if panels in a real JupyterLab, driven by a real Chromium: every control burst redraws correctly.

JupyterLab ≥ 4.4 delivers widget messages on kernel subshells (other threads) by default; a panel that
drew with pyplot's global state came out with blank figures, lost titles and wrong bars after a slider
nudge. This test starts JupyterLab on 127.0.0.1 (free port, random token, default settings: kernel comms
over subshells on), starts Debian's Chromium (``/usr/bin/chromium``, never a downloaded browser) and
drives it with Playwright over CDP. For each notebook with a what-if panel it runs all cells, checks that
no output says "Error displaying widget", moves each kind of control several times in quick succession
and, after each burst, checks the panel against the library: the verdict line and the headline are the
ones :class:`~kvplan.notebook.panel.WhatIfPanel` computes for the same control values, and every chart
image decodes, has the panel's size, is not blank, keeps its title and axes, and matches the library's
own rendering of that state pixel for pixel (within antialiasing).

Run with ``make browser-test`` (part of ``make test``); skipped unless ``KVPLAN_BROWSER_TEST=1``, so
the unit run on a shared machine does not start a browser. Server and browser are ended by pid.
"""

from __future__ import annotations

import base64
import io
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

import pytest

from kvplan import DATA_DIR
from kvplan.notebook import Scenario, WhatIfPanel, co_tenant_bytes, launch_max_model_len, read_launch
from kvplan.plan import Evidence, ModelLayout, Policy, boot_free_bytes, decide
from kvplan.units import parse_size

pytestmark = pytest.mark.skipif(
    os.environ.get("KVPLAN_BROWSER_TEST") != "1", reason="real-browser test: run `make browser-test`"
)

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("KVPLAN_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
SAMPLE = DATA_DIR / "boots" / "four-rank"
PANEL = ".kvplan-panel"
RUN_ALL_SECONDS = 480  # the bound of one notebook's "Run All Cells" (see _wait_until_run)
SCREENS = os.environ.get("KVPLAN_SCREENS")  # a folder: screenshots of each panel before and after a burst


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, seconds: float, log: Path) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"port {port} not open after {seconds} s: {log.read_text()[-2000:]}")


def _end(process: subprocess.Popen) -> None:
    """End a process group started here, by its pid: TERM, then KILL after 10 s."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab on 127.0.0.1 with a token, its config and state in a temporary folder: (base URL, token)."""
    home = tmp_path_factory.mktemp("lab")
    # no news or update checks (no network), no kernel dialog; every other setting is JupyterLab's default
    for extension, name, value in (
        ("apputils-extension", "notification", '{"fetchNews": "false", "checkForUpdates": false}'),
        ("notebook-extension", "tracker", '{"autoStartDefaultKernel": true}'),
    ):
        folder = home / "settings" / "@jupyterlab" / extension
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.jupyterlab-settings").write_text(value)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "ws"),
    }
    env.pop("MPLBACKEND", None)  # the kernel's default (inline) backend, as a user gets it
    port, token = _free_port(), secrets.token_hex(16)
    log = home / "server.log"
    served = home / "served"
    skip = shutil.ignore_patterns(".ipynb_checkpoints")
    shutil.copytree(ROOT / "notebooks", served / "notebooks", ignore=skip)
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={served}",
    ]
    if os.getuid() == 0:
        command.append("--allow-root")
    with open(log, "w") as out:
        server = subprocess.Popen(
            command, cwd=served, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_for_port(port, server, 60, log)
        yield f"http://127.0.0.1:{port}", token
    finally:
        _end(server)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """Debian's Chromium started here (so it is ended by its pid), driven by Playwright over CDP."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    profile = tmp_path_factory.mktemp("chromium")
    port = _free_port()
    log = profile / "chromium.log"
    with open(log, "w") as out:
        chromium = subprocess.Popen(
            [
                CHROMIUM,
                *CHROMIUM_ARGS,
                f"--remote-debugging-port={port}",
                "--remote-debugging-address=127.0.0.1",
                f"--user-data-dir={profile / 'profile'}",
                "about:blank",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_port(port, chromium, 30, log)
        with playwright_api.sync_playwright() as playwright:
            connected = playwright.chromium.connect_over_cdp(f"http://127.0.0.1:{port}")
            yield connected
            connected.close()
    finally:
        _end(chromium)
        shutil.rmtree(profile / "profile", ignore_errors=True)


# --- what each notebook's panel is, in the library, and the bursts that move it -----------------------------


def _panel_02():
    # the panel of notebooks/02-rank-headroom.ipynb at its parameters, built the way its cells build it
    ledger, _ = read_launch(SAMPLE)
    decision = decide(Evidence(ledger), Policy(parse_size("0.9GiB")), ModelLayout("llama-3.1-70b", {"tp": 4}))
    scenario = Scenario.from_decision(decision)
    return WhatIfPanel(scenario, co_tenant_bytes=co_tenant_bytes(ledger), ledger=ledger)


def _panel_03():
    ledger, _ = read_launch(SAMPLE)
    decision = decide(Evidence(ledger), Policy(parse_size("0.9GiB")), ModelLayout("llama-3.1-70b"))
    length = launch_max_model_len(ledger)
    scenario = Scenario.from_decision(decision, max_model_len=length, target_concurrency=4)
    return WhatIfPanel(scenario, co_tenant_bytes=co_tenant_bytes(ledger))


def _panel_04():
    decision = decide(
        DATA_DIR / "boots" / "drift" / "reference.log", Policy(parse_size("1GiB"), parse_size("0.5GiB"))
    )
    boot, _ = read_launch(DATA_DIR / "boots" / "drift" / "canary.log")
    boot_free = boot_free_bytes(boot, decision.budget.ranks)
    guard = parse_size("0.5GiB")
    return WhatIfPanel(Scenario.from_decision(decision, guard_bytes=guard, boot_free_bytes=boot_free))


@dataclass(frozen=True)
class Burst:
    """One kind of control moved several times in quick succession: ``kind`` slider, dropdown or number."""

    kind: str
    label: str  # text of the control's label (its description)
    moves: tuple  # slider: drags as fractions of its track (+ right, − left); dropdown/number: the values;
    # keys: a value typed into the slider's readout and Enter (one control change), timed from the Enter to
    # the last chart drawn; the other kinds move their control several times in quick succession


NOTEBOOKS = {
    "02-rank-headroom.ipynb": (
        _panel_02,
        (
            Burst("slider", "reserve per rank", (0.1, 0.05, -0.08, 0.12)),
            Burst("keys", "reserve per rank", ("1.2",)),
            Burst("dropdown", "block size asked", ("32", "64", "8", "128")),
            Burst("slider", "rank 2: add back", (0.2, 0.15, -0.1, 0.1)),
        ),
    ),
    "03-concurrency.ipynb": (
        _panel_03,
        (
            Burst("number", "target concurrency", ("2", "6", "12", "5")),
            Burst("slider", "rank 2: add back", (0.1, 0.2, -0.05, 0.3)),
            Burst("number", "max model length", ("8192", "16384", "65536", "24576")),
            Burst("slider", "reserve per rank", (-0.05, 0.1, 0.08, -0.03)),
            Burst("keys", "reserve per rank", ("0.6",)),
            Burst("dropdown", "block size asked", ("32", "128", "16", "64")),
        ),
    ),
    "04-drift-and-gate.ipynb": (
        _panel_04,
        (
            Burst("slider", "drift guard", (0.1, 0.1, -0.05, 0.15)),
            Burst("slider", "reserve per rank", (0.05, 0.05, 0.1, -0.07)),
            Burst("keys", "reserve per rank", ("1.4",)),
        ),
    ),
}


# --- driving JupyterLab ------------------------------------------------------------------------------


def _open_and_start(page, lab, notebook: str) -> None:
    """Open the notebook in a workspace of its own and start "Run All Cells" (without waiting for the end)."""
    base, token = lab
    # a workspace of its own: only this notebook open
    page.goto(f"{base}/lab/workspaces/{Path(notebook).stem}/tree/notebooks/{notebook}?token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    started = (
        "() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]"
        ".some(p => /\\[(\\*|\\d+)\\]/.test(p.textContent))"
    )
    for _ in range(6):  # the kernel may still be starting: run all again until a cell starts
        page.click(".jp-Notebook .jp-Cell >> nth=0")  # the notebook is the current widget
        page.click("li.lm-MenuBar-item:has-text('Run')")
        page.click("li.lm-Menu-item >> text='Run All Cells'")
        try:
            page.wait_for_function(started, timeout=10_000)
            break
        except Exception:
            page.keyboard.press("Escape")


def _wait_until_run(page) -> None:
    """Every code cell has run and the panel has drawn its charts; a cell's error fails at once, with its text.

    The three notebooks' kernels start and run at once on two cores: alone they are done in about a
    minute, on a loaded machine in up to three (seen: 161–200 s; once over 300 s in a fresh venv's first
    JupyterLab start beside a benchmark run). The wait ends as soon as the cells are done, so a generous
    bound costs nothing when the machine is quiet."""
    state = """() => ({
        prompts: [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent.trim()),
        errors: [...document.querySelectorAll('.jp-OutputArea-output')].map(e => e.textContent)
            .filter(t => t.includes('Traceback (most recent call last)')).map(t => t.slice(0, 2000))})"""
    deadline = time.monotonic() + RUN_ALL_SECONDS
    while True:
        now = page.evaluate(state)
        assert not now["errors"], "a cell failed:\n" + "\n".join(now["errors"])
        if now["prompts"] and all(re.search(r"\[\d+\]", prompt) for prompt in now["prompts"]):
            break
        assert time.monotonic() < deadline, (
            f"cells not run after {RUN_ALL_SECONDS} s: prompts {now['prompts']}"
        )
        page.wait_for_timeout(2_000)
    page.wait_for_selector(f"{PANEL} img.kvplan-chart", state="attached", timeout=60_000)


def _shut_down_kernel(page, lab, notebook: str) -> None:
    """End the kernel of this notebook's session (the other notebooks' kernels keep running)."""
    base, token = lab
    headers = {"Authorization": f"token {token}"}
    for session in page.request.get(f"{base}/api/sessions", headers=headers).json():
        if session.get("path", "").endswith(notebook):
            page.request.delete(f"{base}/api/kernels/{session['kernel']['id']}", headers=headers)


@pytest.fixture(scope="module")
def started(lab, browser):
    """One page per notebook, all started at once (their kernels start and run in parallel): {notebook: page}."""
    pages = {}
    try:
        for notebook in NOTEBOOKS:
            page = browser.contexts[0].new_page() if browser.contexts else browser.new_page()
            # tall enough for a whole panel when screenshots are asked for (JupyterLab draws what is in view)
            page.set_viewport_size({"width": 1400, "height": 3400 if SCREENS else 1000})
            pages[notebook] = page
            _open_and_start(page, lab, notebook)
        yield pages
    finally:
        for notebook, page in pages.items():
            if not page.is_closed():
                _shut_down_kernel(page, lab, notebook)
                page.close()


def _control(page, label: str):
    return page.locator(f"{PANEL} .widget-inline-hbox:has(label:has-text('{label}'))").first


def _move(page, burst: Burst) -> None:
    control = _control(page, burst.label)
    for move in burst.moves:
        if burst.kind == "slider":  # dragged with the mouse by a fraction of its track, as a planner does
            track = control.locator(".noUi-base").bounding_box()
            handle = control.locator(".noUi-handle").bounding_box()
            x, y = handle["x"] + handle["width"] / 2, handle["y"] + handle["height"] / 2
            page.mouse.move(x, y)
            page.mouse.down()
            page.mouse.move(x + move * track["width"], y, steps=4)
            page.mouse.up()
        elif burst.kind == "keys":  # a planner typing a value into the slider's readout, then Enter
            control.locator(".widget-readout").click()
            page.keyboard.press("Control+A")
            page.keyboard.type(move)
            page.keyboard.press("Enter")
        elif burst.kind == "dropdown":
            control.locator("select").select_option(move)
        else:
            box = control.locator("input")
            box.fill(move)
            box.press("Enter")


def _control_values(page, panel) -> dict:
    """The values the browser's controls show, by the panel's control names."""
    values = {}
    for name, widget in panel.controls.items():
        control = _control(page, widget.description)
        if control.locator(".noUi-handle").count():
            values[name] = float(control.locator(".noUi-handle").get_attribute("aria-valuenow"))
        elif control.locator("select").count():
            values[name] = int(control.locator("select").input_value())
        else:
            values[name] = int(control.locator("input").input_value())
    return values


def _expected(panel, values: dict) -> list[str]:
    """The texts the library shows for these control values: the verdict line and the headline values."""
    panel.set_values(values)  # one redraw for all controls
    assert panel.error is None, panel.error
    return [panel.verdict(), *panel.outcome.headline().values()]


def _wait_for_texts(page, texts: list[str], seconds: float = 60) -> str:
    """The panel's text once it holds every expected text (else the last text seen)."""
    deadline = time.monotonic() + seconds
    shown = ""
    while time.monotonic() < deadline:
        shown = page.inner_text(PANEL)
        if all(text in shown for text in texts):
            page.wait_for_timeout(500)  # any update still in flight has arrived
            return page.inner_text(PANEL)
        page.wait_for_timeout(200)
    return shown


# --- timing a redraw: the last key press to the last chart image drawn -----------------------------------

#: Records, in the page, each key press and each chart image the panel draws (``performance.now()``, ms).
TIMING_JS = """panel => {
  window.kvplanTimes = {keys: [], drawn: []};
  document.addEventListener('keydown', () => window.kvplanTimes.keys.push(performance.now()), true);
  const drawn = image => image.complete ? window.kvplanTimes.drawn.push(performance.now())
      : image.addEventListener('load', () => window.kvplanTimes.drawn.push(performance.now()));
  new MutationObserver(changes => changes.forEach(change => change.addedNodes.forEach(node => {
    if (node.nodeType !== 1) return;
    (node.matches('img.kvplan-chart') ? [node] : [...node.querySelectorAll('img.kvplan-chart')]).forEach(drawn);
  }))).observe(panel, {childList: true, subtree: true});
}"""

#: The redraw time the test fails above [ms]. Issue 27's goal is 300 ms on a quiet machine
#: (``KVPLAN_REDRAW_MS=300`` holds the test to it). The default is what this 2-core machine holds when shared
#: by several engineers (load average 8-11): JupyterLab's 03 redrew in 3.1 s, 02 in 2.0 s, 04 in 1.5 s, Voilà's
#: 02 in 1.1-1.8 s; a panel that draws far more than it should still fails. The time is printed either way.
REDRAW_MS = float(os.environ.get("KVPLAN_REDRAW_MS", "4000"))


def _redraw_ms(page) -> float | None:
    """Milliseconds from the last key press to the last chart drawn after it, once drawing has settled."""
    last, settled = None, 0
    for _ in range(200):  # at most 40 s
        times = page.evaluate("() => window.kvplanTimes")
        after = [t for t in times["drawn"] if times["keys"] and t >= times["keys"][-1]]
        if after and after[-1] == last:
            settled += 1
            if settled >= 5:  # 1 s without a new chart
                return last - times["keys"][-1]
        else:
            last, settled = (after[-1] if after else None), 0
        page.wait_for_timeout(200)
    return None


# --- checking images ---------------------------------------------------------------------------------


def _image_problems(png: bytes, reference: bytes, name: str) -> list[str]:
    """What is wrong with a chart image the browser shows, against the library's drawing of that state."""
    import numpy as np
    from PIL import Image, UnidentifiedImageError

    try:
        shown = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)
    except (UnidentifiedImageError, OSError) as exc:
        return [f"{name}: does not decode ({exc})"]
    expected = np.asarray(Image.open(io.BytesIO(reference)).convert("RGB"), dtype=np.int16)
    ink = (shown < 200).any(axis=2)  # dark pixels: text, spines, ticks, dark bars
    height, width = ink.shape
    problems = []
    if ink.mean() < 0.01:
        problems.append(f"{name}: blank ({ink.mean():.2%} dark pixels)")
    if ink[: height // 10].mean() < 0.002:
        problems.append(f"{name}: no title (nothing dark in the top tenth)")
    if ink[:, : width // 10].mean() < 0.002 or ink[height - height // 8 :].mean() < 0.002:
        problems.append(f"{name}: no axes (nothing dark in the left tenth or the bottom eighth)")
    if shown.shape != expected.shape:
        problems.append(
            f"{name}: {shown.shape[1]}×{shown.shape[0]} px, the library draws "
            f"{expected.shape[1]}×{expected.shape[0]}"
        )
    elif (np.abs(shown - expected).max(axis=2) > 64).mean() > 0.002:
        differing = (np.abs(shown - expected).max(axis=2) > 64).mean()
        problems.append(f"{name}: {differing:.2%} of pixels differ from the library's figure for this state")
    return problems


def _check_panel(page, panel, label: str) -> list[str]:
    """Everything wrong with the panel's text and images for the state its controls show."""
    problems = []
    texts = _expected(panel, _control_values(page, panel))
    shown = _wait_for_texts(page, texts)
    problems += [f"{label}: the panel does not show {text!r}" for text in texts if text not in shown]
    # a chart whose answer is a sentence (nothing stranded) is a paragraph, not an image
    figures = dict(zip([step.name for step in panel.chart_steps(panel.outcome)], panel.figures()))
    names = [name for name, figure in figures.items() if figure.axes]
    sources = page.eval_on_selector_all(f"{PANEL} img.kvplan-chart", "images => images.map(i => i.src)")
    if len(sources) != len(names):
        problems.append(f"{label}: {len(sources)} chart images, expected {len(names)} ({', '.join(names)})")
    for name, source, reference in zip(names, sources, panel.chart_pngs()):
        png = base64.b64decode(source.split(",", 1)[1]) if source.startswith("data:") else b""
        problems += [f"{label}: {problem}" for problem in _image_problems(png, reference, name)]
    return problems


def _timed(page, where: str) -> list[str]:
    """Print the redraw time of the last key burst; a problem when it is over :data:`REDRAW_MS`."""
    took = _redraw_ms(page)
    print(
        f"\nredraw {where}: {'none seen' if took is None else f'{took:.0f} ms'} from the last key press to the last chart drawn"
    )
    if took is None:
        return [f"{where}: no chart drawn after the key presses"]
    return [f"{where}: redraw took {took:.0f} ms (> {REDRAW_MS:.0f} ms)"] if took > REDRAW_MS else []


@pytest.mark.parametrize("notebook", list(NOTEBOOKS))
def test_panel_redraws_correctly_after_bursts_of_every_control(lab, started, notebook):
    make_panel, bursts = NOTEBOOKS[notebook]
    page = started[notebook]
    page.bring_to_front()
    try:
        _wait_until_run(page)
        assert "Error displaying widget" not in page.inner_text(".jp-Notebook")
        panel = make_panel()
        problems = _check_panel(page, panel, "as run")
        stem = Path(notebook).stem
        if SCREENS:
            page.locator(PANEL).screenshot(path=str(Path(SCREENS) / f"{stem}-before.png"))
        page.eval_on_selector(PANEL, TIMING_JS)
        for index, burst in enumerate(bursts):
            _move(page, burst)
            if burst.kind == "keys":
                problems += _timed(page, f"{stem}, JupyterLab")
            problems += _check_panel(page, panel, f"after burst {index + 1} ({burst.kind} {burst.label!r})")
        if SCREENS:
            page.locator(PANEL).screenshot(path=str(Path(SCREENS) / f"{stem}-after.png"))
        assert "Error displaying widget" not in page.inner_text(".jp-Notebook")
        assert not problems, "\n".join(problems)
    except Exception:
        if SCREENS:
            page.screenshot(path=str(Path(SCREENS) / f"{Path(notebook).stem}-failed.png"))
        raise
    finally:
        _shut_down_kernel(page, lab, notebook)
        page.close()


# --- review mode: the same panel served by Voilà ---------------------------------------------------------


@pytest.fixture(scope="module")
def review(tmp_path_factory):
    """``make review``'s server (kvplan.notebook.report --serve) over the sample's approval and notebook 02: its URL.

    The approval is ``make demo``'s (with the two nvidia-smi snapshots): the served notebook reads the bundle's
    own inputs (its ``BUNDLE`` parameter), so its panel is the one the sample's parameters give."""
    home = tmp_path_factory.mktemp("review")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-m", "kvplan", "approve", str(SAMPLE / "boot.log"), "--reserve", "0.9GiB",
         "--nvidia-smi", str(SAMPLE / "nvidia-smi-gpu.csv"), "--nvidia-smi", str(SAMPLE / "nvidia-smi-apps.csv"),
         "--model", "llama-3.1-70b", "--tp", "4", "--approver", "browser test", "--note", "review mode",
         "--out", str(home / "evidence")],
        check=True, env=env, capture_output=True,
    )  # fmt: skip
    (bundle,) = (home / "evidence").iterdir()
    port = _free_port()
    log = home / "voila.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "kvplan.notebook.report", str(home / "served"), str(bundle),
             str(ROOT / "notebooks" / "02-rank-headroom.ipynb"), "--serve", f"--port={port}"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_for_port(port, server, 90, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        _end(server)


def test_review_mode_serves_the_decision_first_and_a_live_panel(review, browser):  # issue 27
    page = browser.contexts[0].new_page() if browser.contexts else browser.new_page()
    page.set_viewport_size({"width": 1400, "height": 1000})
    try:
        page.goto(f"{review}/voila/render/00-decision.ipynb", timeout=120_000)
        page.wait_for_selector("text=Deploy with", timeout=120_000)
        text = page.inner_text("body")
        # the decision first: the flag of the sample's approval (rank 2's 12 GiB in whole 1.25 MiB blocks)
        assert text.index("--kv-cache-memory-bytes=12884377600") < text.index("02-rank-headroom")
        assert "import" not in text  # code hidden
        # the dashboard its link names (Jupyter's HTML output opens links in a new tab: followed here)
        link = page.get_attribute("a:has-text('02-rank-headroom')", "href")
        page.goto(urljoin(page.url, link), timeout=120_000)
        page.wait_for_selector(f"{PANEL} img.kvplan-chart", state="attached", timeout=180_000)
        assert "Error displaying widget" not in page.inner_text("body")
        assert "NBVAL" not in page.inner_text("body") and "WhatIfPanel(" not in page.inner_text("body")
        panel = _panel_02()
        page.eval_on_selector(PANEL, TIMING_JS)
        problems = _check_panel(page, panel, "Voilà, as served")
        _move(page, Burst("keys", "reserve per rank", ("1.3",)))
        problems += _timed(page, "02-rank-headroom, Voilà")
        problems += _check_panel(page, panel, "Voilà, after the key presses")
        assert not problems, "\n".join(problems)
    finally:
        page.close()
