"""`bench relay --runner worker`: a `stream_worker` that publishes the way the bench's Daphne
was told to (STREAMSCOPE_BENCH_PATTERN), so both patterns can be measured with recording and
relaying in separate processes."""

import os

import django

from streams.run import process

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
process.install_event_loop()
django.setup()
process.tune()

from django.core.management import call_command  # noqa: E402

from streams.bench.relay import apply_pattern  # noqa: E402

apply_pattern(os.environ.get("STREAMSCOPE_BENCH_PATTERN", "batched"))
call_command("stream_worker")
