"""What the Chat Completions and Anthropic Messages checkers share: the Responses checker's
shape and its timing, JSON and "nothing after the end" checks, with each format's events and
its end of stream left to the format (`_feed_object`, `_closed_without_end`)."""

from __future__ import annotations

from streams.core.checks import (
    MISSING,
    OUTPUT,
    TOOL_CALL,
    Checker,
    FeedResult,
    finding,
    parse_json,
    said,
    short,
)


class FormatChecker(Checker):
    """A checker of a format other than Responses: `feed` and `close` as `Checker`'s."""

    def feed(self, index, event_name, data, obj=MISSING, t_us=None) -> FeedResult:
        out: list = []
        first = self.event_count == 0
        self.event_count += 1
        if t_us is not None:
            self._timing(index, t_us, out)
        if obj is MISSING:
            sentinel = self._sentinel(index, data, out)
            if sentinel is not None:
                return self._done(sentinel)
            try:
                obj = parse_json(data)
            except ValueError as exc:
                out.append(finding("invalid_json", index, "JSON", short(data), str(exc)))
                if self.terminal_index is not None:
                    self._note_after_terminal(index, None, said("not_json"))
                return self._done(FeedResult(out))
        result = FeedResult(out, is_json=True, obj=obj)
        self._feed_object(index, event_name, data, obj, first, result)
        if result.kind == OUTPUT:
            self.output_deltas += 1
            if not self._first_output_seen:
                self._first_output_seen = result.first_output = True
        if result.first_tool_call or result.kind == TOOL_CALL:
            result.first_tool_call = not self._first_tool_call_seen
            self._first_tool_call_seen = True
        return self._done(result)

    def _sentinel(self, index, data, out) -> FeedResult | None:
        """A data line that is no JSON but a word of the format (Chat's `[DONE]`)."""
        return None

    def _feed_object(self, index, event_name, data, obj, first, result) -> None:
        """Apply one parsed event: its findings in `result.violations`, its kind, its type;
        `result.first_tool_call` True when it starts a tool call (counted here)."""
        raise NotImplementedError

    def close(self, connection_closed: bool = True, t_us: int | None = None) -> list:
        if self.closed:
            return []
        self.closed = True
        out: list = []
        if t_us is not None and self._last_t is not None:
            self._stall(None, t_us - self._last_t, out, said("before_close"))
        if self._after_terminal_n:
            out.append(self._after_terminal())
        if self.terminal_index is None:
            self._closed_without_end(connection_closed, out)
        self.violations.extend(out)
        return out

    def _closed_without_end(self, connection_closed, out) -> None:
        """The stream ended without the format's end: the status and the finding, when the
        upstream closed the connection (not when we stopped reading)."""
        raise NotImplementedError
