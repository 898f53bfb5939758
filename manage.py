#!/usr/bin/env python
import os
import sys


def main():
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    # Before Django: Daphne's app config creates the server's event loop at setup.
    from streams.run import process

    process.install_event_loop()
    import django

    django.setup()
    process.tune()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
