"""A real OpenID Connect provider in its own process (tests/support/idp/: django-oauth-toolkit
under `manage.py runserver`), and a browser's part of signing in through it.

    provider = ProviderProcess()            # migrated, listening on 127.0.0.1:<free port>
    provider.register(client_id, secret, redirect_uri)
    provider.user("ann", "pw", groups=["eng"])
    browser = Browser()
    response = browser.sign_in(app_url, "ann", "pw")   # every redirect followed, forms posted

An RSA key is made for each run (cryptography), so no key is kept in the repository.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from streams.bench import free_port, wait_for_port
from tests.support.paths import REPO


def _rsa_pem():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


class ProviderProcess:
    def __init__(self):
        self.data = tempfile.mkdtemp(prefix="oidc-provider-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.issuer = f"{self.url}/o"
        self.log = open(os.path.join(self.data, "server.log"), "w+b")  # noqa: SIM115
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "STREAMSCOPE_"))}
        env.update(
            PYTHONUNBUFFERED="1",
            DJANGO_SETTINGS_MODULE="tests.support.idp.settings",
            OIDC_PROVIDER_DATA=self.data,
            OIDC_PROVIDER_SECRET_KEY=secrets.token_urlsafe(32),
            OIDC_PROVIDER_RSA_KEY=_rsa_pem(),
            OIDC_PROVIDER_ISSUER=self.issuer,
        )
        django = [sys.executable, "-m", "django"]
        subprocess.run([*django, "migrate", "-v", "0"], cwd=REPO, env=env, check=True, timeout=300)
        self.proc = subprocess.Popen(
            [*django, "runserver", "--noreload", f"127.0.0.1:{self.port}"],
            cwd=REPO,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(self.port, proc=self.proc, timeout=60)
        except Exception:
            self.stop()
            raise

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-5000:]

    def _post(self, path, body):
        r = httpx.post(self.url + path, json=body, timeout=30)
        r.raise_for_status()
        return r.json()

    def register(self, client_id, client_secret, redirect_uri, post_logout_redirect_uri=""):
        self._post(
            "/_test/client/",
            {
                "client_id": client_id,
                "client_secret": client_secret,
                "redirect_uris": [redirect_uri],
                "post_logout_redirect_uris": [post_logout_redirect_uri],
            },
        )

    def user(self, username, password, groups=(), email=""):
        """Makes or changes a user at the provider; their subject id."""
        return self._post(
            "/_test/user/",
            {"username": username, "password": password, "groups": list(groups), "email": email},
        )["sub"]

    def expire_codes(self):
        return self._post("/_test/expire-codes/", {})["expired"]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()
        shutil.rmtree(self.data, ignore_errors=True)


class _Forms(HTMLParser):
    """Each <form>'s id, action and fields (hidden and text inputs; submit buttons by name)."""

    def __init__(self):
        super().__init__()
        self.forms, self._form = [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self._form = {"id": a.get("id"), "action": a.get("action") or "", "fields": {}}
            self.forms.append(self._form)
        elif tag == "input" and self._form is not None and a.get("name"):
            if a.get("type") != "submit":
                self._form["fields"][a["name"]] = a.get("value") or ""

    def handle_endtag(self, tag):
        if tag == "form":
            self._form = None


def form(response, form_id):
    parser = _Forms()
    parser.feed(response.text)
    for f in parser.forms:
        if f["id"] == form_id:
            return f
    raise AssertionError(f"no form #{form_id} on {response.url} ({response.status_code})")


class Browser:
    """An httpx client as a browser signs in: it follows redirects across the two servers (the
    cookie jar keeps both sessions), signs in at the provider and allows the client there."""

    def __init__(self):
        self.http = httpx.Client(follow_redirects=False, timeout=30)
        self.visited = []

    def close(self):
        self.http.close()

    def csrf(self, app):
        """The app's CSRF token for this browser (a page read first if it has none yet)."""
        if "csrftoken" not in self.http.cookies:
            self.http.get(app.url + "/login/")
        return self.http.cookies["csrftoken"]

    def follow(self, response, stop=None):
        """Follows redirects; with `stop(url)` true for the next one, returns that URL instead."""
        while response.is_redirect:
            url = urljoin(str(response.url), response.headers["location"])
            if stop is not None and stop(url):
                return url
            self.visited.append(url)
            response = self.http.get(url)
        return response

    def submit(self, response, form_id, **fields):
        f = form(response, form_id)
        url = urljoin(str(response.url), f["action"]) if f["action"] else str(response.url)
        return self.http.post(url, data={**f["fields"], **fields})

    def to_callback(self, app_url, username, password):
        """Starts a sign-in at the app and goes through the provider (its login, its consent),
        stopping before the app's callback: the callback's URL (with the code and the state)."""
        callback = urlsplit(app_url)._replace(path="/oidc/callback/").geturl()

        def is_callback(url):
            return url.startswith(callback)

        page = self.follow(self.http.get(app_url + "/oidc/authenticate/?next=/"), is_callback)
        if isinstance(page, str):
            return page  # already signed in at the provider, consent given before
        if "provider-login" in page.text:
            page = self.follow(
                self.submit(page, "provider-login", username=username, password=password),
                is_callback,
            )
            if isinstance(page, str):
                return page
        page = self.follow(self.submit(page, "authorizationForm", allow="Authorize"), is_callback)
        assert isinstance(page, str), f"the provider did not send back: {page.status_code}"
        return page

    def sign_in(self, app_url, username, password):
        """The whole sign-in; the last page the app answered with."""
        return self.follow(self.http.get(self.to_callback(app_url, username, password)))
