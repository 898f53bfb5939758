"""/audit/ (dashboard/views/audit.py): a project's admins and owner read its log, a member or
viewer gets 403, someone outside it 404; staff read every project's or one's; filtered and paged
by a cursor; in Dutch; a secret a token's name or a link echoed does not come back."""

import html
import re
from urllib.parse import parse_qsl

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from streams.access import shares
from streams.models import ApiToken, AuditEntry, Membership, Project, Stream
from streams.store import audit

KEY = "sk-AUDIT-CANARY-5519203xq"

pytestmark = pytest.mark.django_db


class TestPage:
    """/audit/: a project's admins and owner read its log, a member or viewer gets 403, someone
    outside it 404; staff read every project's, or one's."""

    @pytest.fixture(autouse=True)
    def _setup(self, db):
        users = get_user_model().objects
        self.people = {
            name: users.create_user(name, is_staff=name == "staff")
            for name in ("owner", "admin", "member", "viewer", "outsider", "staff")
        }
        with audit.acting(audit.Actor(None, "owner", "192.0.2.1")):
            self.team = Project.objects.create(name="Team", slug="team")
            self.other = Project.objects.create(name="Other", slug="other")
            for role in ("owner", "admin", "member", "viewer"):
                Membership.objects.create(project=self.team, user=self.people[role], role=role)
            Membership.objects.create(
                project=self.other, user=self.people["outsider"], role="owner"
            )

    def get(self, who, **query):
        client = Client()
        client.force_login(self.people[who])
        return client.get(reverse("audit"), query)

    def test_admins_and_the_owner_read_their_projects_log(self):
        for who in ("owner", "admin"):
            r = self.get(who, project="team")
            assert r.status_code == 200, who
            page = r.content.decode()
            assert page.count('class="audit-entry"') == 5  # the project and four members
            assert "Member added" in page and "192.0.2.1" in page

    def test_a_member_or_viewer_is_forbidden_and_an_outsider_finds_nothing(self):
        assert self.get("member", project="team").status_code == 403
        assert self.get("viewer", project="team").status_code == 403
        assert self.get("outsider", project="team").status_code == 404
        # the outsider's own project's log has nothing of the team's
        page = self.get("outsider", project="other").content.decode()
        assert page.count('class="audit-entry"') == 2 and "viewer" not in page

    def test_staff_read_every_project_or_one(self):
        with audit.acting(audit.Actor()):
            self.other.delete()  # its entries go; its deletion is the instance's
        page = self.get("staff").content.decode()
        assert page.count('class="audit-entry"') == 5 + 1  # the team's, and the deletion
        page = self.get("staff", project="team").content.decode()
        assert page.count('class="audit-entry"') == 5

    def test_filters_and_the_cursor(self, monkeypatch):
        from dashboard.queries import audit as rows

        page = self.get("owner", project="team", action="membership.added").content.decode()
        assert page.count('class="audit-entry"') == 4
        page = self.get("owner", project="team", actor="nobody").content.decode()
        assert page.count('class="audit-entry"') == 0
        r = self.get("owner", project="team", since="2999-01-01T00:00")
        assert r.status_code == 200 and 'class="audit-entry"' not in r.content.decode()
        assert (
            self.get("owner", project="team", since="2026-02-01", until="2026-01-01").status_code
            == 400
        )
        assert self.get("owner", project="team", action="token.stolen").status_code == 400
        monkeypatch.setattr(rows, "PAGE", 2)
        seen = []
        query = {"project": "team"}
        for _ in range(5):
            r = self.get("owner", **query)
            page = r.content.decode()
            seen += [int(x) for x in re.findall(r'id="audit-(\d+)"', page)]
            older = re.search(r'href="\?([^"]+)" rel="next"', page)
            if not older:
                break
            query = dict(parse_qsl(html.unescape(older.group(1))))
        ids = list(AuditEntry.objects.filter(project=self.team).values_list("pk", flat=True))
        assert sorted(seen, reverse=True) == seen and sorted(seen) == sorted(ids)

    def test_a_secret_in_a_token_name_or_a_link_does_not_come_back(self, settings):
        # written redacted when the key is known; a key learned later is the gate's at exit
        settings.UPSTREAM_API_KEY = KEY
        owner = self.people["owner"]
        with audit.acting(audit.Actor()):
            ApiToken.issue(owner, name=f"echo {KEY}", project=self.team)
            stream = Stream.objects.create(user=owner, project=self.team, session=f"x{KEY}")
            shares.create(owner, session=stream.session, project=self.team)
        stored = repr(list(AuditEntry.objects.values_list("target_label", "changes")))
        assert KEY not in stored and stored.count("[redacted]") >= 2
        page = self.get("owner", project="team").content.decode()
        assert KEY not in page and "Token created" in page
        for n in range(len(KEY) - 8):
            assert KEY[n : n + 8] not in page

    def test_the_top_bar_links_it_for_whoever_may_read_it_in_dutch_too(self):
        link = f'href="{reverse("audit")}"'
        assert link in self.get("admin", project="team").content.decode()
        assert link in self.get("staff").content.decode()
        client = Client()
        client.force_login(self.people["member"])
        assert link not in client.get(reverse("stream_list"), {"project": "team"}).content.decode()
        dutch = Client(HTTP_ACCEPT_LANGUAGE="nl")
        dutch.force_login(self.people["owner"])
        page = dutch.get(reverse("audit"), {"project": "team"}).content.decode()
        assert "Auditlog" in page and "Lid toegevoegd" in page and "Member added" not in page

    def test_an_entry_of_an_unexpected_shape_is_shown_not_a_500(self):
        for action, changes in (
            ("streams.deleted", {"count": "many", "ids": 3, "created_at": ["x", None]}),
            ("retention.changed", {"retain_streams_days": "soon"}),
            ("membership.changed", ["no", "dict"]),
        ):
            AuditEntry.objects.create(
                project=self.team, action=action, changes=changes, at=timezone.now()
            )
        r = self.get("owner", project="team")
        assert r.status_code == 200 and r.content.decode().count('class="audit-entry"') == 8
