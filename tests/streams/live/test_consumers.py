"""The WebSocket consumers in-process (channels.testing), through the real ASGI stack:
origin validation, session/bearer auth, catch-up, dedupe, hole filling, slow clients."""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async

from streams.live import consumers, relay
from streams.models import ApiToken, Event, Stream
from streams.run import runner
from streams.shapes import event_message
from streams.store import event_row, rows
from tests.support.clients import ws

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("_disconnect_communicators"),  # tests/conftest.py: `ws`'s cleanup
]


async def frames_until_close(comm, timeout=10):
    """All JSON frames until the server closes; returns (frames, close code)."""
    frames = []
    while True:
        out = await comm.receive_output(timeout)
        if out["type"] == "websocket.close":
            return frames, out.get("code")
        frames.append(json.loads(out["text"]))


def indexes(frames):
    return [e["index"] for f in frames for e in f.get("events", [])]


def delta(i):
    return json.dumps(
        {"type": "response.output_text.delta", "sequence_number": i, "delta": f"w{i} "}
    )


@sync_to_async
def stored_stream(user, n, status="completed", start=0, stream=None, *, proxied=False, unsent=()):
    """A stream with events [start, start + n) stored (no recorder involved); `proxied`: as
    the proxy records them, each handed to the client 20 + i µs after its receipt (but those
    in `unsent`, which the client never got)."""
    if stream is None:
        source = Stream.Source.PROXY if proxied else Stream.Source.LIVE
        stream = Stream.objects.create(user=user, status=status, source=source)
    Event.objects.bulk_create(
        Event(
            stream=stream,
            index=i,
            type="response.output_text.delta",
            sequence_number=i,
            t_us=i * 100,
            sent_us=None if not proxied or i in unsent else i * 100 + 20 + i,
            data=delta(i),
        )
        for i in range(start, start + n)
    )
    Stream.objects.filter(pk=stream.pk).update(status=status, event_count=start + n)
    return stream


def checked(type_, sequence_number):
    return event_row.Checked(type_, sequence_number, None, None, True)


def payloads(start, n):
    return [
        event_message.message(i, i * 100, checked("response.output_text.delta", i), delta(i))
        for i in range(start, start + n)
    ]


async def publish_batch(stream_id, project_id, events, stream_fields=None):
    """What the recorder's writer does after a commit: `relay.publish`, awaited when it goes
    through the channel layer."""
    pending = relay.publish(stream_id, project_id, events, stream_fields)
    if pending is not None:
        await pending


def body(scenario="", model="auto", **metadata):
    metadata.setdefault("time_scale", 0.05)
    return rows.build_request_body(
        "Tell me about Utrecht", model, scenario=scenario, metadata=metadata
    )


async def created(user, b):
    return await sync_to_async(rows.new_row)(user, b)


@pytest.fixture
def capacity(settings):
    def set_capacity(n):
        # through the channel layer, not the in-process shortcut, which never drops
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, "RELAY_LOCAL_FANOUT": False}
        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels.layers.InMemoryChannelLayer",
                "CONFIG": {"capacity": n},
            }
        }

    return set_capacity


@pytest.fixture
def hole_reads(monkeypatch):
    """The (after, before) ranges consumers read from the database to fill holes left by
    dropped layer messages."""
    reads = []
    read_range = consumers.StreamConsumer.read_range

    async def spy(self, after, before):
        if before is not None:
            reads.append((after, before))
        return await read_range(self, after, before)

    monkeypatch.setattr(consumers.StreamConsumer, "read_range", spy)
    return reads


@pytest.fixture
def knobs(settings):
    def set_knobs(**values):
        settings.STREAMSCOPE = {**settings.STREAMSCOPE, **values}

    return set_knobs


class TestAccess:
    async def test_it_refuses_anonymous_connections(self, people):
        stream = await stored_stream(people.owner, 3)
        comm = ws(f"/ws/streams/{stream.pk}/?format=json")
        connected, _ = await comm.connect()
        assert not connected
        comm = ws("/ws/streams/?format=json")
        connected, _ = await comm.connect()
        assert not connected

    async def test_it_refuses_strangers(self, people):
        stream = await stored_stream(people.owner, 3)
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.stranger)
        connected, _ = await comm.connect()
        assert not connected

    async def test_it_refuses_foreign_origins(self, people):
        stream = await stored_stream(people.owner, 3)
        for origin in ("http://evil.example", None):
            comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.owner, origin=origin)
            connected, _ = await comm.connect()
            assert not connected, origin

    async def test_it_refuses_unknown_streams_and_bad_queries(self, people):
        stream = await stored_stream(people.owner, 3)
        for path in (
            f"/ws/streams/{stream.pk + 100}/",
            f"/ws/streams/{stream.pk}/?after=x",
            f"/ws/streams/{stream.pk}/?after=-5",
            f"/ws/streams/{stream.pk}/?format=xml",
            f"/ws/streams/{stream.pk}/?format=html",  # JSON is the only format
            "/ws/streams/?format=html",
        ):
            comm = ws(path, people.owner)
            connected, _ = await comm.connect()
            assert not connected, path

    async def test_staff_and_bearer_tokens_may_watch(self, people):
        stream = await stored_stream(people.owner, 3)
        for comm in (
            ws(f"/ws/streams/{stream.pk}/?format=json", people.staff),
            ws(f"/ws/streams/{stream.pk}/?format=json", token=people.owner.token),
        ):
            connected, _ = await comm.connect()
            assert connected
            frames, code = await frames_until_close(comm)
            assert indexes(frames) == [0, 1, 2] and code == 1000

    async def test_a_revoked_or_foreign_token_is_refused(self, people):
        stream = await stored_stream(people.owner, 3)
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", token=people.stranger.token)
        assert not (await comm.connect())[0]
        await ApiToken.objects.filter(user=people.owner).aupdate(revoked=True)
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", token=people.owner.token)
        assert not (await comm.connect())[0]


class TestCatchUp:
    async def test_a_finished_stream_is_sent_in_pages_then_closed_with_1000(self, people):
        stream = await stored_stream(people.owner, 4500)
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.owner)
        assert (await comm.connect())[0]
        frames, code = await frames_until_close(comm)
        assert code == 1000
        assert indexes(frames) == list(range(4500))
        assert max(len(f["events"]) for f in frames) == 2000
        assert frames[0]["status"] == "completed" and frames[0]["stream"]["event_count"] == 4500
        assert frames[-1]["terminal"] is True and frames[-1]["status"] == "completed"
        first = frames[0]["events"][0]
        assert first == {
            "index": 0,
            "type": "response.output_text.delta",
            "sequence_number": 0,
            "t_us": 0,
            "data": delta(0),
        }

    async def test_after_resumes_with_exactly_the_missing_events(self, people):
        stream = await stored_stream(people.owner, 50)
        comm = ws(f"/ws/streams/{stream.pk}/?format=json&after=41", people.owner)
        assert (await comm.connect())[0]
        frames, code = await frames_until_close(comm)
        assert indexes(frames) == list(range(42, 50)) and code == 1000

    @pytest.mark.parametrize("pages_before_pack", [0, 1, 2])
    async def test_a_viewer_reading_while_the_stream_is_packed_gets_every_event_once(
        self, people, monkeypatch, pages_before_pack
    ):
        """Issue 49: the stream's rows become blocks between two of the viewer's pages (or
        before its first): the reader serves both, each event once, in order."""
        import datetime as dt

        from streams.store import compact

        stream = await stored_stream(people.owner, 4500)
        real = consumers._events_between
        pages = []

        def page_then_pack(*args, **kwargs):
            if len(pages) == pages_before_pack:
                later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
                assert compact.pack(stream.pk, now=later) == 4500
            pages.append(real(*args, **kwargs))
            return pages[-1]

        monkeypatch.setattr(consumers, "_events_between", page_then_pack)
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.owner)
        assert (await comm.connect())[0]
        frames, code = await frames_until_close(comm)
        assert code == 1000
        assert indexes(frames) == list(range(4500))
        assert [e["data"] for f in frames for e in f["events"]] == [delta(i) for i in range(4500)]
        assert not await Event.objects.filter(stream_id=stream.pk).aexists()


class TestLive:
    @pytest.mark.parametrize("local_fanout", [True, False], ids=["local-fanout", "channel-layer"])
    async def test_a_late_joiner_gets_every_event_once_in_order(
        self, people, upstream, knobs, local_fanout
    ):
        knobs(RELAY_LOCAL_FANOUT=local_fanout)
        stream = await created(people.owner, body())
        task = runner.start(stream)
        while not await Event.objects.filter(stream=stream, index__gte=10).aexists():
            await asyncio.sleep(0.01)
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.owner)
        assert (await comm.connect())[0]
        in_memory = relay.local_fanout() is not None or not local_fanout
        assert (relay.stream_group(stream.pk) in relay.fanout.groups) == (
            local_fanout and in_memory
        )
        frames, code = await frames_until_close(comm)
        await task
        stream = await Stream.objects.aget(pk=stream.pk)
        assert code == 1000 and frames[-1]["status"] == "completed"
        assert indexes(frames) == list(range(stream.event_count))
        stored = [e async for e in Event.objects.filter(stream=stream).order_by("index")]
        got = [e for f in frames for e in f["events"]]
        assert [e["data"] for e in got] == [e.data for e in stored]
        assert [e["t_us"] for e in got] == [e.t_us for e in stored]
        # live frames carry batches, not single events
        assert len(frames) < stream.event_count / 2
        changed = {k for f in frames for k in f.get("stream", {})}
        assert {"ttft_ms", "resolved_model", "event_count"} <= changed

    async def test_dropped_layer_messages_are_filled_from_the_database(
        self, people, capacity, hole_reads
    ):
        capacity(2)
        stream = await stored_stream(people.owner, 10, status="streaming")
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.owner)
        assert (await comm.connect())[0]
        hello = await comm.receive_json_from()
        assert indexes([hello]) == list(range(10)) and hello["status"] == "streaming"
        await stored_stream(people.owner, 100, status="streaming", start=10, stream=stream)
        # 20 messages at once: a queue of 2 keeps the first two and drops the rest silently.
        await asyncio.gather(
            *(
                publish_batch(stream.pk, stream.project_id, payloads(10 + 5 * k, 5))
                for k in range(20)
            )
        )
        await stored_stream(people.owner, 5, status="completed", start=110, stream=stream)
        await asyncio.sleep(0.05)
        await publish_batch(
            stream.pk,
            stream.project_id,
            payloads(110, 5),
            {"status": "completed", "event_count": 115},
        )
        frames, code = await frames_until_close(comm)
        assert code == 1000 and frames[-1]["status"] == "completed"
        assert indexes([hello, *frames]) == list(range(115))
        assert hole_reads  # the layer did drop messages, and the holes came from the database

    async def test_a_lost_terminal_message_is_noticed_by_the_idle_check(self, people, knobs):
        knobs(RELAY_IDLE_CHECK_S=0.2)
        stream = await stored_stream(people.owner, 5, status="streaming")
        comm = ws(f"/ws/streams/{stream.pk}/?format=json&after=4", people.owner)
        assert (await comm.connect())[0]
        hello = await comm.receive_json_from()
        assert hello["events"] == []
        await stored_stream(people.owner, 3, status="failed", start=5, stream=stream)
        frames, code = await frames_until_close(comm, timeout=3)  # nothing was published
        assert indexes(frames) == [5, 6, 7] and frames[-1]["status"] == "failed" and code == 1000

    async def test_a_deleted_stream_ends_with_a_terminal_frame(self, people, knobs):
        knobs(RELAY_IDLE_CHECK_S=0.2)
        stream = await stored_stream(people.owner, 2, status="streaming")
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.owner)
        assert (await comm.connect())[0]
        await comm.receive_json_from()
        await Stream.objects.filter(pk=stream.pk).adelete()
        frames, code = await frames_until_close(comm, timeout=3)
        assert frames == [{"events": [], "status": "deleted", "terminal": True}] and code == 1000

    async def test_a_tiny_channel_capacity_loses_nothing(
        self, people, upstream, capacity, knobs, monkeypatch, hole_reads
    ):
        from channels.exceptions import ChannelFull
        from channels.layers import InMemoryChannelLayer

        capacity(2)
        knobs(BATCH_MAX_EVENTS=5)
        # Viewers whose loop is busy (a loaded server): each takes nothing off the layer until
        # its queue of 2 has overflowed (a batch was dropped for it) and its catch-up is done;
        # the writer then waits once until every viewer has emptied its queue, so the next
        # batch each one sees lies past a dropped one, however fast or slow the machine.
        dropped, consumers_seen, writer_held = set(), {}, []
        send, group_send = InMemoryChannelLayer.send, InMemoryChannelLayer.group_send

        async def counting_send(layer, channel, message):
            try:
                return await send(layer, channel, message)
            except ChannelFull:
                if message.get("type") == "stream.batch":
                    dropped.add(channel)
                raise

        async def once_held_group_send(layer, group, message):
            await group_send(layer, group, message)
            if len(dropped) == 3 and not writer_held:
                writer_held.append(group)
                await until(
                    lambda: all(
                        c.released and layer.channels[name].empty()
                        for name, c in consumers_seen.items()
                    )
                )

        async def until(condition):
            for _ in range(3000):
                if condition():
                    return
                await asyncio.sleep(0.01)
            raise AssertionError("the held viewers and writer did not meet within 30 s")

        dispatch = consumers.StreamConsumer.dispatch

        async def busy_dispatch(self, message):
            if message["type"] == "stream.batch":
                consumers_seen.setdefault(self.channel_name, self)
                if not getattr(self, "released", False):
                    self.released = False
                    await until(lambda: self.channel_name in dropped and not self.catching_up)
                    self.released = True
            await dispatch(self, message)

        monkeypatch.setattr(InMemoryChannelLayer, "send", counting_send)
        monkeypatch.setattr(InMemoryChannelLayer, "group_send", once_held_group_send)
        monkeypatch.setattr(consumers.StreamConsumer, "dispatch", busy_dispatch)
        stream = await created(people.owner, body("fast", events=3000, batch=20))
        viewers = [ws(f"/ws/streams/{stream.pk}/?format=json", people.owner) for _ in range(3)]
        for comm in viewers:
            assert (await comm.connect())[0]
        task = runner.start(stream)
        results = await asyncio.gather(*(frames_until_close(c, timeout=60) for c in viewers))
        await task
        for frames, code in results:
            assert code == 1000
            assert indexes(frames) == list(range(3000))
        assert writer_held and len(consumers_seen) == 3
        # every viewer filled the hole the layer left from the database
        assert len(hole_reads) >= 3, hole_reads

    async def test_large_event_data_is_read_from_the_database(self, people, upstream, knobs):
        knobs(RELAY_INLINE_MAX_BYTES=40)
        stream = await created(people.owner, body())
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.owner)
        assert (await comm.connect())[0]
        task = runner.start(stream)
        frames, code = await frames_until_close(comm)
        await task
        stored = [e.data async for e in Event.objects.filter(stream=stream).order_by("index")]
        assert [e["data"] for f in frames for e in f["events"]] == stored
        assert all(len(d) > 40 for d in stored)

    async def test_frames_are_json_without_a_format_and_carry_model_output_verbatim(
        self, people, upstream
    ):
        stream = await created(people.owner, body("xss"))
        await runner.run_stream(stream)
        comm = ws(f"/ws/streams/{stream.pk}/", people.owner)
        assert (await comm.connect())[0]
        frames, code = await frames_until_close(comm)
        assert code == 1000 and frames[-1]["terminal"] is True
        stored = [e.data async for e in Event.objects.filter(stream=stream).order_by("index")]
        assert [e["data"] for f in frames for e in f["events"]] == stored
        assert any("<script>" in d for d in stored)  # escaping is the page's business


class TestSlowClients:
    async def test_a_long_outbox_is_no_reason_to_close_a_client_that_reads(self, people, knobs):
        # 100 events published before the sender runs once: our lag, not the client's
        knobs(RELAY_OUTBOX_MAX_EVENTS=50)
        stream = await stored_stream(people.owner, 5, status="streaming")
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.owner)
        assert (await comm.connect())[0]
        seen = indexes([await comm.receive_json_from()])
        await stored_stream(people.owner, 100, status="completed", start=5, stream=stream)
        # (in-process: delivered right here; through Redis the sends are awaited together)
        pending = [
            relay.publish(stream.pk, stream.project_id, payloads(5 + 10 * k, 10)) for k in range(10)
        ]
        pending.append(relay.publish(stream.pk, stream.project_id, [], {"status": "completed"}))
        await asyncio.gather(*(p for p in pending if p is not None))
        frames, code = await frames_until_close(comm)
        assert code == 1000 and seen + indexes(frames) == list(range(105))

    async def test_an_overflowing_outbox_closes_with_4008_and_the_client_resumes(
        self, people, knobs, monkeypatch
    ):
        class StuckTransport:
            # a client that stopped reading: the server's buffer never drains
            dataBuffer = b"x" * 10_000_000
            offset = 0
            _tempDataLen = 0

        knobs(RELAY_OUTBOX_MAX_EVENTS=50)
        stream = await stored_stream(people.owner, 5, status="streaming")
        monkeypatch.setattr(consumers, "find_transport", lambda send: StuckTransport())
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.owner)
        assert (await comm.connect())[0]
        hello = await comm.receive_json_from()
        seen = indexes([hello])
        for k in range(10):
            await stored_stream(
                people.owner, 10, status="streaming", start=5 + 10 * k, stream=stream
            )
            await publish_batch(stream.pk, stream.project_id, payloads(5 + 10 * k, 10))
            await asyncio.sleep(0.01)
        frames, code = await frames_until_close(comm, timeout=3)
        assert code == 4008
        seen += indexes(frames)
        monkeypatch.undo()
        await Stream.objects.filter(pk=stream.pk).aupdate(status="completed")
        comm = ws(f"/ws/streams/{stream.pk}/?format=json&after={seen[-1]}", people.owner)
        assert (await comm.connect())[0]
        frames, code = await frames_until_close(comm)
        assert seen + indexes(frames) == list(range(105)) and code == 1000


class TestList:
    async def test_users_see_their_own_streams_and_staff_all(self, people):
        mine = await stored_stream(people.owner, 1, status="streaming")
        theirs = await stored_stream(people.stranger, 1, status="streaming")
        owner = ws("/ws/streams/?format=json", people.owner)
        staff = ws("/ws/streams/?format=json", people.staff)
        assert (await owner.connect())[0] and (await staff.connect())[0]
        snap = await owner.receive_json_from()
        assert [s["id"] for s in snap["streams"]] == [mine.pk]
        snap = await staff.receive_json_from()
        assert [s["id"] for s in snap["streams"]] == [theirs.pk, mine.pk]
        new = await created(people.stranger, body())
        await relay.publish_created(new)
        await publish_batch(mine.pk, mine.project_id, [], {"status": "completed", "ttft_ms": 9.5})
        got = await owner.receive_json_from()
        assert got["streams"] == [{"id": mine.pk, "status": "completed", "ttft_ms": 9.5}]
        changes = {}
        for _ in range(2):
            for s in (await staff.receive_json_from())["streams"]:
                changes[s["id"]] = s
            if len(changes) == 2:
                break
        assert changes[new.pk]["status"] == "pending" and changes[mine.pk]["ttft_ms"] == 9.5
        assert await owner.receive_nothing(0.2)
        await owner.disconnect()
        await staff.disconnect()

    async def test_without_a_format_the_list_is_json_too(self, people):
        old = await stored_stream(people.owner, 1, status="completed")
        comm = ws(f"/ws/streams/?after={old.pk}", people.owner)
        assert (await comm.connect())[0]
        assert await comm.receive_json_from() == {"streams": []}  # nothing active nor newer
        new = await created(people.owner, body())
        await relay.publish_created(new)
        [item] = (await comm.receive_json_from())["streams"]
        assert item["id"] == new.pk and item["status"] == "pending"
        await comm.disconnect()


class TestRedaction:
    """An upstream that echoes the key it was sent: the key never reaches a viewer."""

    KEY = "sk-echoed-upstream-key-42"

    @pytest.fixture(autouse=True)
    def _key(self, settings):
        settings.UPSTREAM_API_KEY = self.KEY

    def echoing_stream(self, user, status="failed"):
        error = json.dumps({"type": "error", "message": f"Incorrect API key: {self.KEY}"})

        @sync_to_async
        def store():
            stream = Stream.objects.create(
                user=user,
                status=status,
                resolved_model=f"model-{self.KEY}",
                error_code="invalid_api_key",
                error_message=f"Incorrect API key provided: {self.KEY}",
                prompt="Hi",
            )
            Event.objects.create(
                stream=stream, index=0, type="error", sequence_number=0, t_us=5, data=error
            )
            Stream.objects.filter(pk=stream.pk).update(event_count=1)
            return stream

        return store()

    async def texts_until_close(self, comm):
        texts = []
        while (out := await comm.receive_output(10))["type"] != "websocket.close":
            texts.append(out["text"])
        return texts

    async def test_stored_event_data_and_error_message_are_redacted(self, people):
        stream = await self.echoing_stream(people.owner)
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.owner)
        assert (await comm.connect())[0]
        texts = await self.texts_until_close(comm)
        assert texts and not any(self.KEY in t for t in texts)
        first = json.loads(texts[0])
        assert first["stream"]["error_message"] == "Incorrect API key provided: [redacted]"
        assert first["stream"]["resolved_model"] == "model-[redacted]"
        assert "[redacted]" in first["events"][0]["data"]

    async def test_live_batches_and_fields_are_redacted(self, people):
        stream = await stored_stream(people.owner, 1, status="streaming")
        comm = ws(f"/ws/streams/{stream.pk}/", people.owner)
        assert (await comm.connect())[0]
        await comm.receive_json_from()
        data = json.dumps({"type": "error", "message": f"bad key {self.KEY}"})
        await Event.objects.acreate(
            stream=stream, index=1, type="error", sequence_number=1, t_us=9, data=data
        )
        fields = {"status": "failed", "event_count": 2, "error_message": f"key {self.KEY}"}
        await Stream.objects.filter(pk=stream.pk).aupdate(**fields)
        await publish_batch(
            stream.pk,
            stream.project_id,
            [event_message.message(1, 9, checked("error", 1), data)],
            fields,
        )
        texts = await self.texts_until_close(comm)
        assert texts and not any(self.KEY in t for t in texts)
        last = json.loads(texts[-1])
        assert last["stream"]["error_message"] == "key [redacted]" and last["terminal"]
        assert [e["data"] for f in map(json.loads, texts) for e in f["events"]] == [
            data.replace(self.KEY, "[redacted]")
        ]

    async def test_list_items_are_redacted(self, people):
        stream = await self.echoing_stream(people.owner, status="streaming")
        comm = ws("/ws/streams/", people.owner)
        assert (await comm.connect())[0]
        snapshot = await comm.receive_from()
        assert self.KEY not in snapshot
        assert json.loads(snapshot)["streams"][0]["resolved_model"] == "model-[redacted]"
        await publish_batch(stream.pk, stream.project_id, [], {"resolved_model": self.KEY})
        change = await comm.receive_from()
        assert json.loads(change) == {
            "streams": [{"id": stream.pk, "resolved_model": "[redacted]"}]
        }
        await comm.disconnect()


class TestFrameSizes:
    async def test_frames_stay_under_daphnes_message_limit(self, people):
        """Daphne will not send a message over 1 MiB: the consumer failed mid-stream and the
        viewer saw nothing more (a 60 000-event stream's final text did it)."""
        big = json.dumps({"type": "response.completed", "text": "é" * 600_000})  # 1.2 MB
        escaped = json.dumps({"type": "x", "text": 'a"\n' * 100_000})  # 300 000 characters
        datas = [escaped, escaped, big, escaped, *(delta(i) for i in range(4, 9))]

        @sync_to_async
        def store():
            stream = Stream.objects.create(user=people.owner, status="completed")
            Event.objects.bulk_create(
                Event(stream=stream, index=i, type="t", sequence_number=i, t_us=i, data=d)
                for i, d in enumerate(datas)
            )
            return stream

        stream = await store()
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.owner)
        assert (await comm.connect())[0]
        texts = []
        while (out := await comm.receive_output(10))["type"] != "websocket.close":
            texts.append(out["text"])
        assert max(len(t.encode()) for t in texts) <= consumers.MESSAGE_MAX_BYTES
        events = [e for t in texts for e in json.loads(t)["events"]]
        assert [e["index"] for e in events] == list(range(len(datas)))
        assert events[2]["data"] is None and events[2]["data_bytes"] == len(big.encode())
        assert [e["data"] for i, e in enumerate(events) if i != 2] == datas[:2] + datas[3:]
        assert json.loads(texts[-1])["terminal"] and out.get("code") == 1000


def proxied_stream(user, n, status="completed", start=0, stream=None, unsent=()):
    """A stream recorded by the proxy: events [start, start + n), each handed to the client
    20 + i µs after its receipt (but those in `unsent`, which the client never got)."""
    return stored_stream(user, n, status, start, stream, proxied=True, unsent=unsent)


class TestProxied:
    """A proxied stream's events also say when the proxy handed them to its client (sent_us):
    stored reads select it, and the recorder's payloads of proxied chunks carry it."""

    async def test_stored_events_carry_sent_us(self, people):
        stream = await proxied_stream(people.owner, 5, unsent={4})
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.owner)
        assert (await comm.connect())[0]
        frames, code = await frames_until_close(comm)
        events = [e for f in frames for e in f["events"]]
        assert code == 1000 and [e["index"] for e in events] == list(range(5))
        assert [e.get("sent_us") for e in events] == [20, 121, 222, 323, None]
        assert "sent_us" not in events[4]  # never handed over: no key, not null

    async def test_payloads_that_carry_sent_us_are_sent_as_they_are(self, people):
        # (index, type, sequence_number, t_us, data, sent_us): what the recorder publishes
        # for proxied chunks
        stream = await proxied_stream(people.owner, 1, status="streaming")
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.owner)
        assert (await comm.connect())[0]
        await comm.receive_json_from()
        await proxied_stream(people.owner, 2, status="streaming", start=1, stream=stream)
        live = [(*p, 7000 + p[0]) for p in payloads(1, 2)]
        await publish_batch(stream.pk, stream.project_id, live, {"status": "completed"})
        frames, _ = await frames_until_close(comm)
        assert [e["sent_us"] for f in frames for e in f["events"]] == [7001, 7002]

    async def test_other_streams_frames_have_no_sent_us(self, people):
        stream = await stored_stream(people.owner, 2, status="streaming")
        comm = ws(f"/ws/streams/{stream.pk}/?format=json", people.owner)
        assert (await comm.connect())[0]
        await comm.receive_json_from()
        await stored_stream(people.owner, 1, status="streaming", start=2, stream=stream)
        await publish_batch(stream.pk, stream.project_id, payloads(2, 1), {"status": "completed"})
        frames, _ = await frames_until_close(comm)
        assert [sorted(e) for f in frames for e in f["events"]] == [
            ["data", "index", "sequence_number", "t_us", "type"]
        ]


class TestSharedFrames:
    async def test_the_viewers_of_a_stream_share_one_encoded_frame_per_batch(
        self, people, monkeypatch
    ):
        """Each viewer encoded every batch itself: the viewers' cost grew per viewer per
        batch. The frame is the one each would have made, byte for byte."""
        encoded = []
        encode = consumers.stream_frame

        def counting(events, **kwargs):
            encoded.append(len(events))
            return encode(events, **kwargs)

        monkeypatch.setattr(consumers, "stream_frame", counting)
        if relay.local_fanout() is None:  # (tier 2: Redis hands each viewer its own copy)
            pytest.skip("one frame is shared through the in-process fan-out (docs/relay.md)")
        stream = await stored_stream(people.owner, 10, status="streaming")
        viewers = [ws(f"/ws/streams/{stream.pk}/?format=json", people.owner) for _ in range(3)]
        for comm in viewers:
            assert (await comm.connect())[0]
            assert indexes([await comm.receive_json_from()]) == list(range(10))
        encoded.clear()
        await stored_stream(people.owner, 5, status="streaming", start=10, stream=stream)
        fields = {"event_count": 15, "output_deltas": 15}
        await publish_batch(stream.pk, stream.project_id, payloads(10, 5), fields)
        texts = [(await comm.receive_output(10))["text"] for comm in viewers]
        assert encoded == [5]  # once, for three viewers
        assert texts == [event_message.stream_frame(payloads(10, 5), stream=fields)] * 3
        # the end is each viewer's own (its status judged, the database asked if need be)
        await stored_stream(people.owner, 1, status="completed", start=15, stream=stream)
        await publish_batch(
            stream.pk,
            stream.project_id,
            payloads(15, 1),
            {"status": "completed", "event_count": 16},
        )
        for comm in viewers:
            frames, code = await frames_until_close(comm)
            assert code == 1000 and indexes(frames) == [15] and frames[-1]["terminal"]
