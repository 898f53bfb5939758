"""The playground in Chromium, as a person uses it (from tests/e2e/test_playground_e2e.py):
`Playground(browser, server, user)` logs in through the login form (the password of
tests/e2e/conftest.py's `owner`) and opens the playground; `LAST` selects its last turn."""

from tests.e2e.conftest import PASSWORD, SCREENSHOTS, TIMEOUT_MS

LAST = ".pg-turn:last-child"


class Playground:
    """A logged-in page, and the dialogs it opened (there must never be one)."""

    def __init__(self, browser, server, user, width=1280, height=860):
        self.server = server
        self.context = browser.new_context(viewport={"width": width, "height": height})
        self.context.set_default_timeout(TIMEOUT_MS)
        self.page = self.context.new_page()
        self.dialogs = []
        self.errors = []
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("pageerror", lambda e: self.errors.append(e.stack or str(e)))
        self.page.goto(server.url + "/login/?next=/playground/")
        self.page.fill("#id_username", user.username)
        self.page.fill("#id_password", PASSWORD)
        self.page.click("main button[type=submit]")  # (the top bar has buttons too)
        self.page.wait_for_url("**/playground/")

    def send(self, text, scenario="", speed="0.25", model="auto"):
        page = self.page
        page.select_option("#pg-model", model)
        page.select_option("#pg-scenario", scenario)
        page.select_option("#pg-speed", speed)
        page.fill("#pg-input", text)
        turns = page.locator(".pg-turn").count()
        page.press("#pg-input", "Enter")  # the keyboard sends
        page.wait_for_function(f"() => document.querySelectorAll('.pg-turn').length > {turns}")
        return int(page.get_attribute(LAST, "data-stream"))

    def wait_ended(self, selector=LAST):
        self.page.wait_for_selector(f"{selector}[data-status]:not([data-active])")
        return self.page.get_attribute(selector, "data-status")

    def answer_text(self, selector=LAST):
        """The answer as the model sent it: message texts raw (their "Raw" view, not the
        Markdown), as a person reads it with the toggle pressed."""
        return self.page.locator(f"{selector} .pg-answer").evaluate(
            """(answer) => {
                const parts = [...answer.querySelectorAll(".part.md:not(.raw)")];
                const toggles = [...answer.querySelectorAll(".md-toggle")];
                parts.forEach((p) => p.classList.add("raw"));
                toggles.forEach((t) => { t.hidden = true; });
                const text = answer.innerText;
                parts.forEach((p) => p.classList.remove("raw"));
                toggles.forEach((t) => { t.hidden = false; });
                return text;
            }"""
        )

    def shot(self, name):
        """What the user sees (scrolled to the end), and the whole page."""
        SCREENSHOTS.mkdir(exist_ok=True)
        self.page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))
        # sticky parts would be drawn mid-page in a full-page capture: unstick them for it
        # (through the CSSOM: the page's CSP refuses a <style> tag)
        sticky = ".pg-composer, .pg-sidebar"
        unstick = "(nodes, value) => nodes.forEach((n) => { n.style.position = value; })"
        self.page.eval_on_selector_all(sticky, unstick, "static")
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}-full.png"), full_page=True)
        self.page.eval_on_selector_all(sticky, unstick, "")

    def close(self):
        assert self.errors == [], self.errors
        self.context.close()
