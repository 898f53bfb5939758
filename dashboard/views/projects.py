"""The projects' pages (docs/teams.md, "Members"): one's projects and making one (/projects/),
a project's members and invitations (/projects/<slug>/members/: everyone in it reads it and may
leave; admins add, re-role and remove members and invite), its settings (/projects/<slug>/
settings/: admins set its currency and retention, owners rename and delete), and an
invitation's link (/invitations/<key>/).

What may be done is streams/access/members.py's to say (through `projects.may`); these views
parse, call it and answer its refusals: not a member 404, a role too low 403, a rule of the
project (its last owner, a taken name) 409 with the page saying why, a bad form 400.
"""

import functools

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.formats import number_format
from django.utils.translation import gettext as _g
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_GET, require_POST

from dashboard.forms.projects import (
    AddMemberForm,
    DeleteProjectForm,
    InviteForm,
    MembersPageForm,
    ProjectNameForm,
    ProjectSettingsForm,
    RoleForm,
)
from dashboard.project import PARAM
from dashboard.views.shares import gone, private
from streams.access import invitations, members, projects
from streams.access.members import Forbidden, NotFound, Refused
from streams.access.projects import Action, Role
from streams.core import conf

NOT_SENT = _(
    "The invitation could not be sent: the mail server refused it or did not answer. Nothing "
    "was kept; try again later."
)
SIGN_IN_TO_JOIN = _("Log in to accept the invitation.")


def _form_error(form):
    return " ".join(str(e) for errors in form.errors.values() for e in errors)


def project_view(view):
    """Finds the URL's project (a 404 for whoever may not read it: whether it exists is not
    theirs to know), calls the view with it, and answers members' refusals the same way."""

    @functools.wraps(view)
    def wrapper(request, project_slug, *args, **kwargs):
        project = projects.by_slug(request.user, project_slug)
        if project is None:
            raise Http404("No such project")
        try:
            return view(request, project, *args, **kwargs)
        except NotFound:
            raise Http404("Not found") from None
        except Forbidden as exc:
            raise PermissionDenied(str(exc.message)) from None

    return login_required(wrapper)


# ---- one's projects ------------------------------------------------------------------------------


def _list_page(request, form=None, status=200):
    found, more = members.listed(request.user)
    context = {
        "projects": found,
        "more": more,
        "form": form or ProjectNameForm(),
        "nav": "projects",
    }
    return render(request, "dashboard/project_list.html", context, status=status)


@login_required
@require_GET
def project_list(request):
    return _list_page(request)


@login_required
@require_POST
def project_create(request):
    form = ProjectNameForm(request.POST)
    if not form.is_valid():
        return _list_page(request, form, status=400)
    try:
        project = members.create(request.user, form.cleaned_data["name"])
    except Refused as exc:
        form.add_error("name", exc.message)
        return _list_page(request, form, status=exc.status)
    messages.success(request, _g("Project “%(name)s” made; you are its owner.") % {"name": project})
    return HttpResponseRedirect(reverse("project_members", args=[project.slug]))


# ---- a project's members ---------------------------------------------------------------------


def _members_page(request, project, status=200, **forms):
    user = request.user
    manage = projects.may(user, Action.MANAGE_MEMBERS, project)
    cursor = MembersPageForm(request.GET)
    if not cursor.is_valid():
        messages.error(request, _form_error(cursor))
        cursor, status = MembersPageForm(), 400
    after = cursor.cleaned_data.get("after") if cursor.is_bound else None
    listed, next_after, n_members = members.members(project, after=after)
    context = {
        # (not `project`: that is the page's current project, the top bar's, context_processor)
        "this_project": project,
        "my_role": projects.role_of(user, project),
        "memberships": listed,
        "n_members": n_members,
        "next_after": next_after,
        "paged": after is not None,
        "roles": Role.choices,
        "may_manage": manage,
        "may_own": projects.may(user, Action.MANAGE_OWNERS, project),
        "may_settings": projects.may(user, Action.MANAGE_RETENTION, project),
        "invitations": invitations.listed(project) if manage else [],
        "add_form": forms.get("add_form") or AddMemberForm(),
        "invite_form": forms.get("invite_form") or InviteForm(),
        "nav": "projects",
    }
    return render(request, "dashboard/project_members.html", context, status=status)


def _members_url(project):
    return reverse("project_members", args=[project.slug])


def _refused(request, project, exc, **forms):
    """The members page, saying why the change was refused (its 403 and 404 are raised)."""
    if isinstance(exc, NotFound | Forbidden):
        raise exc
    messages.error(request, exc.message)
    return _members_page(request, project, status=exc.status, **forms)


@require_GET
@project_view
def project_members(request, project):
    return _members_page(request, project)


@require_POST
@project_view
def project_member_add(request, project):
    members.require(request.user, Action.MANAGE_MEMBERS, project)
    form = AddMemberForm(request.POST)
    if not form.is_valid():
        return _members_page(request, project, status=400, add_form=form)
    user = members.user_named(form.cleaned_data["user"])
    if user is None:
        form.add_error("user", _("No active user has that username or e-mail address."))
        return _members_page(request, project, status=400, add_form=form)
    try:
        members.add(request.user, project, user, form.cleaned_data["role"])
    except Refused as exc:
        return _refused(request, project, exc, add_form=form)
    messages.success(request, _g("%(user)s added.") % {"user": user.get_username()})
    return HttpResponseRedirect(_members_url(project))


def _member(project, user_id):
    membership = project.memberships.filter(user_id=user_id).select_related("user").first()
    if membership is None:
        raise Http404("No such member")
    return membership.user


@require_POST
@project_view
def project_member_role(request, project, user_id):
    members.require(request.user, Action.MANAGE_MEMBERS, project)
    user = _member(project, user_id)
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, _form_error(form))
        return _members_page(request, project, status=400)
    try:
        members.change_role(request.user, project, user, form.cleaned_data["role"])
    except Refused as exc:
        return _refused(request, project, exc)
    return HttpResponseRedirect(_members_url(project))


@require_POST
@project_view
def project_member_remove(request, project, user_id):
    members.require(request.user, Action.MANAGE_MEMBERS, project)
    user = _member(project, user_id)
    try:
        members.remove(request.user, project, user)
    except Refused as exc:
        return _refused(request, project, exc)
    messages.success(request, _g("%(user)s removed.") % {"user": user.get_username()})
    if user.pk == request.user.pk and not projects.may(request.user, Action.READ, project):
        return HttpResponseRedirect(reverse("project_list"))
    return HttpResponseRedirect(_members_url(project))


@require_POST
@project_view
def project_leave(request, project):
    try:
        members.leave(request.user, project)
    except Refused as exc:
        return _refused(request, project, exc)
    messages.success(request, _g("You left “%(name)s”.") % {"name": project})
    return HttpResponseRedirect(reverse("project_list"))


@require_POST
@project_view
def project_invite(request, project):
    members.require(request.user, Action.MANAGE_MEMBERS, project)
    form = InviteForm(request.POST)
    if not form.is_valid():
        return _members_page(request, project, status=400, invite_form=form)
    data = form.cleaned_data
    try:
        invitation, secret = invitations.invite(request.user, project, data["email"], data["role"])
    except Refused as exc:
        return _refused(request, project, exc, invite_form=form)
    url = request.build_absolute_uri(reverse("invitation", args=[secret]))
    try:
        invitations.send(invitation, url)
    except OSError:  # (smtplib's errors are OSErrors: refused, unreachable, timed out)
        invitation.delete()  # an invitation nobody received is no invitation
        messages.error(request, NOT_SENT)
        return _members_page(request, project, status=502, invite_form=form)
    messages.success(request, _g("Invitation sent to %(email)s.") % {"email": invitation.email})
    return HttpResponseRedirect(_members_url(project))


@require_POST
@project_view
def project_invitation_revoke(request, project, invitation_id):
    invitations.revoke(request.user, project, invitation_id)
    return HttpResponseRedirect(_members_url(project))


# ---- its settings -------------------------------------------------------------------------------


def _settings_page(request, project, status=200, **forms):
    user = request.user
    instance = conf.get()
    context = {
        # (not `project`: that is the page's current project, the top bar's, context_processor)
        "this_project": project,
        "settings_form": forms.get("settings_form")
        or ProjectSettingsForm(
            initial={
                "currency": project.currency,
                "retain_streams_days": project.retain_streams_days,
                "retain_events_days": project.retain_events_days,
                "language": project.language,
            }
        ),
        "instance_streams_days": instance.retain_streams_days,
        "instance_events_days": instance.retain_events_days,
        "may_rename": projects.may(user, Action.RENAME_PROJECT, project),
        "may_delete": projects.may(user, Action.DELETE_PROJECT, project),
        "stream_count": members.stream_count(project),
        "rename_form": forms.get("rename_form") or ProjectNameForm(initial={"name": project.name}),
        "delete_form": forms.get("delete_form") or DeleteProjectForm(project=project),
        "nav": "projects",
    }
    return render(request, "dashboard/project_settings.html", context, status=status)


@require_GET
@project_view
def project_settings(request, project):
    members.require(request.user, Action.MANAGE_RETENTION, project)
    return _settings_page(request, project)


@require_POST
@project_view
def project_configure(request, project):
    members.require(request.user, Action.MANAGE_RETENTION, project)
    form = ProjectSettingsForm(request.POST)
    if not form.is_valid():
        return _settings_page(request, project, status=400, settings_form=form)
    try:
        members.configure(request.user, project, **form.cleaned_data)
    except Refused as exc:
        form.add_error(None, exc.message)
        return _settings_page(request, project, status=exc.status, settings_form=form)
    messages.success(request, _g("Settings saved."))
    return HttpResponseRedirect(reverse("project_settings", args=[project.slug]))


@require_POST
@project_view
def project_rename(request, project):
    members.require(request.user, Action.RENAME_PROJECT, project)
    form = ProjectNameForm(request.POST)
    if not form.is_valid():
        return _settings_page(request, project, status=400, rename_form=form)
    try:
        members.rename(request.user, project, form.cleaned_data["name"])
    except Refused as exc:
        form.add_error("name", exc.message)
        return _settings_page(request, project, status=exc.status, rename_form=form)
    messages.success(request, _g("Renamed."))
    return HttpResponseRedirect(reverse("project_settings", args=[project.slug]))


@require_POST
@project_view
def project_delete(request, project):
    members.require(request.user, Action.DELETE_PROJECT, project)
    form = DeleteProjectForm(request.POST, project=project)
    if not form.is_valid():
        return _settings_page(request, project, status=400, delete_form=form)
    name = project.name
    try:
        n = members.delete(request.user, project)
    except Refused as exc:
        form.add_error(None, exc.message)
        return _settings_page(request, project, status=exc.status, delete_form=form)
    messages.success(
        request,
        ngettext(
            "Project “%(name)s” is being deleted, with its %(n)s stream: it is gone from "
            "every list now, and the rest goes in the background.",
            "Project “%(name)s” is being deleted, with its %(n)s streams: it is gone from "
            "every list now, and the rest goes in the background.",
            n,
        )
        % {"name": name, "n": number_format(n, force_grouping=True)},
    )
    return HttpResponseRedirect(reverse("project_list"))


# ---- an invitation's link ---------------------------------------------------------------------


def _invitation_or_answer(request, key):
    """(the invitation of `key`, None) or (None, the answer: 429 or the one "gone" page)."""
    ip = request.META.get("REMOTE_ADDR") or "-"
    invitation, retry = invitations.open(key, ip)
    if retry is not None:
        return None, gone(request, retry_after=retry, invitation=True)
    if invitation is None:
        return None, _gone(request)
    return invitation, None


def _gone(request):
    return gone(request, invitation=True)


@require_GET
def invitation(request, key):
    """The link's page: what it is an invitation to, and a button to join (a GET joins
    nothing: mail scanners open links)."""
    found, answer = _invitation_or_answer(request, key)
    if answer is not None:
        return answer
    if not projects.signed_in(request.user):
        messages.info(request, SIGN_IN_TO_JOIN)
        return redirect_to_login(request.get_full_path())
    current = projects.role_of(request.user, found.project_id)
    context = {
        "invitation": found,
        "key": key,
        "current_role": Role(current).label if current else None,
    }
    return private(render(request, "dashboard/invitation.html", context))


@require_POST
def invitation_accept(request, key):
    if not projects.signed_in(request.user):  # (back to the link's page, not to a POST's URL)
        return redirect_to_login(reverse("invitation", args=[key]))
    found, answer = _invitation_or_answer(request, key)
    if answer is not None:
        return answer
    try:
        membership = invitations.accept(found, request.user)
    except NotFound:
        return _gone(request)
    project = found.project
    messages.success(
        request,
        _g("You joined “%(name)s” as %(role)s.")
        % {"name": project, "role": membership.get_role_display()},
    )
    # the list in the project joined (the link names it: dashboard/project.py)
    return HttpResponseRedirect(f"{reverse('stream_list')}?{PARAM}={project.slug}")
