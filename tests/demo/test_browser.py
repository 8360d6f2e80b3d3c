"""The browser harness of the report test catches what it must: a test of the test (tests/demo/browser.py)."""

from __future__ import annotations

from tests.demo.browser import colour_pixels, load

CSP = (
    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
)


def test_console_errors_exceptions_and_blocked_loads_are_reported(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text(
        f"<!DOCTYPE html><html><head>{CSP}</head><body><p id='text'>x</p>"
        "<img src='https://example.invalid/a.png'></body></html>"
    )
    script = tmp_path / "script.html"
    script.write_text("<!DOCTYPE html><p id='text'>x</p><script>console.error('boom'); missing();</script>")

    blocked = load(page.as_uri(), ["text"])
    assert any("Content Security Policy" in error for error in blocked.errors), blocked.errors
    scripted = load(script.as_uri(), ["text"])
    assert "boom" in scripted.errors, scripted.errors
    assert any("ReferenceError: missing is not defined" in text for text in scripted.errors), scripted.errors


def test_the_screenshot_shows_an_element_where_its_box_says(tmp_path):
    page = tmp_path / "chart.html"
    page.write_text(
        "<!DOCTYPE html><body style='margin:0'><div style='height:1200px'></div>"
        "<svg id='chart' width='200' height='100'>"
        "<rect x='50' width='100' height='100' fill='#1f77b4'/></svg>"
        "</body>"
    )
    loaded = load(page.as_uri(), ["chart", "absent"])
    assert loaded.errors == [] and loaded.boxes == {"chart": (0, 1200, 200, 1300)}  # below the first screen
    assert colour_pixels(loaded.screenshot, loaded.boxes["chart"], "#1f77b4") == 100 * 100
    assert colour_pixels(loaded.screenshot, (0, 0, 200, 1200), "#1f77b4") == 0
