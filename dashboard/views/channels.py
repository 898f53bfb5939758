"""Notification channels (/channels/, docs/alerts.md): the project's channels (an admin's:
made, changed, tested, deleted here, with each one's delivery log; everyone else in the
project sees their names only). What a channel is and who may do what:
streams/notify/channels.py, on the one rule (streams/access/projects.py)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods, require_POST

from dashboard.forms.channels import ChannelChangeForm, ChannelDeleteForm, ChannelForm
from dashboard.project import abilities, project_of, working
from streams.access.projects import Action
from streams.notify import channels, deliver
from streams.notify.targets import Refused


def _private(response):
    # a page that may show a signing secret, or a channel's log, is kept by no cache
    response["Cache-Control"] = "private, no-store"
    return response


def _managed(request, channel_id):
    try:
        return channels.managed(request.user, channel_id)
    except channels.NotFound:
        raise Http404("No such channel") from None
    except channels.NotAllowed:
        raise PermissionDenied("Your role in this project does not manage its channels.") from None


@login_required
@require_http_methods(["GET", "POST"])
def channel_list(request):
    project = project_of(request)
    manages = abilities(request.user, project)[Action.MANAGE_CHANNELS]
    form = ChannelForm(request.POST or None) if manages else None
    status = 200
    if request.method == "POST":
        target_project = working(request, Action.MANAGE_CHANNELS)
        if form is None:
            form = ChannelForm(request.POST)
        if form.is_valid():
            d = form.cleaned_data
            try:
                channel, secret = channels.create(
                    target_project, d["name"], d["kind"], d["target"], created_by=request.user
                )
            except Refused as exc:
                form.add_error(exc.field, str(exc))
            else:
                if secret:
                    context = {"channel": channel, "secret": secret, "nav": "channels"}
                    return _private(render(request, "dashboard/channel_created.html", context))
                messages.success(request, _("Channel %(name)s made.") % {"name": channel.name})
                return HttpResponseRedirect(reverse("channel_detail", args=[channel.pk]))
        status = 400
    rows = list(channels.visible(request.user, project))
    last = channels.last_deliveries([c.pk for c in rows]) if manages else {}
    context = {
        "rows": [(c, last.get(c.pk)) for c in rows],
        "form": form,
        "manages": manages,
        "nav": "channels",
    }
    return _private(render(request, "dashboard/channel_list.html", context, status=status))


def _detail_page(request, channel, form=None, delete_form=None, status=200):
    initial = {"name": channel.name, "enabled": channel.enabled}
    context = {
        "channel": channel,
        "form": form or ChannelChangeForm(initial=initial),
        "delete_form": delete_form or ChannelDeleteForm(),
        "log": channels.log_of(channel),
        "nav": "channels",
    }
    return _private(render(request, "dashboard/channel_detail.html", context, status=status))


@login_required
@require_http_methods(["GET", "POST"])
def channel_detail(request, channel_id):
    channel = _managed(request, channel_id)
    if request.method == "GET":
        return _detail_page(request, channel)
    form = ChannelChangeForm(request.POST)
    if form.is_valid():
        d = form.cleaned_data
        try:
            channels.update(channel, name=d["name"], target=d["target"], enabled=d["enabled"])
        except Refused as exc:
            form.add_error(exc.field, str(exc))
        else:
            messages.success(request, _("Channel saved."))
            return HttpResponseRedirect(reverse("channel_detail", args=[channel.pk]))
    return _detail_page(request, channel, form=form, status=400)


@login_required
@require_POST
def channel_test(request, channel_id):
    channel = _managed(request, channel_id)
    deliver.send_test(channel, request.user)
    messages.success(request, _("Test notification queued: it appears in the log below once sent."))
    return HttpResponseRedirect(reverse("channel_detail", args=[channel.pk]))


@login_required
@require_POST
def channel_delete(request, channel_id):
    channel = _managed(request, channel_id)
    form = ChannelDeleteForm(request.POST)
    if not form.is_valid():
        return _detail_page(request, channel, delete_form=form, status=400)
    name = channel.name
    channels.delete(channel)
    messages.success(request, _("Channel %(name)s deleted.") % {"name": name})
    return HttpResponseRedirect(reverse("channel_list"))
