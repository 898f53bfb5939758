# Two commands from a fresh Debian machine with Python 3.11:
#   make run    install, migrate, create an admin login and serve on http://127.0.0.1:8000/
#               (another address or port: make run ADDR=127.0.0.1:8080)
#   make test   install test dependencies (apt: chromium, postgresql, redis-server) and run
#               the whole suite twice: SQLite + in-memory layer, then PostgreSQL + Redis
PY ?= python3
VENV ?= .venv
ADDR ?= 127.0.0.1:8000

.PHONY: run install install-test test lint messages

# Debian's python3 lacks the venv module until python3-venv is installed.
$(VENV)/bin/python:
	$(PY) -m venv $(VENV) || { rm -rf $(VENV); \
	  S=""; [ "$$(id -u)" -ne 0 ] && S=sudo; \
	  $$S apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$S apt-get install -y -qq python3-venv \
	  && $(PY) -m venv $(VENV); }
	$(VENV)/bin/pip install -q --upgrade pip

install: $(VENV)/bin/python
	$(VENV)/bin/pip install -q -e .
	$(MAKE) messages

install-test: $(VENV)/bin/python
	bash .ci/apt-deps
	$(VENV)/bin/pip install -q -e ".[test]"
	$(MAKE) messages

# The Dutch catalogs (*.po, committed) compiled to *.mo with gettext's msgfmt, installed from
# Debian's packages when missing (the pages are English without them).
messages:
	command -v msgfmt >/dev/null || { S=""; [ "$$(id -u)" -ne 0 ] && S=sudo; \
	  $$S apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$S apt-get install -y -qq gettext; }
	$(VENV)/bin/python manage.py compilemessages -i .venv -v 0

run: install
	$(VENV)/bin/python manage.py serve $(ADDR)

lint:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: install-test lint
	bash .ci/test-suite
