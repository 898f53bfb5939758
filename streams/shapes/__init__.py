"""Outward shapes: what a stream, a list row, an event and a frame look like to whoever reads
them (the API, exports, WebSocket frames, the pages' values), built from what `streams.store`
keeps. `public`: a stream's fields, the list's items and frames, the output, and the one JSON
encoder; `event_message`: an event's live message and its frame. Between the store and the
exits: it knows nothing of who asks (`streams.access`) nor of the channel layer.
"""
