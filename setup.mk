# Shared by this Makefile and the student repo's: which Python makes the venv, and the check that it can.
# The first of these that runs and is Python 3.11+; PYTHON=... names another (checked too before the venv is made).
PYTHON ?= $(firstword $(foreach p,python3.13 python3.12 python3.11 python3,$(if $(filter True,$(shell \
	$(p) -c 'import sys; print(sys.version_info >= (3, 11))' 2>/dev/null)),$(p))) python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python

NEED_PYTHON = $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
	echo "The kit needs Python 3.11 to 3.13; PYTHON=$(PYTHON) is $$($(PYTHON) --version 2>&1 | head -n 1)."; \
	echo "Install one (python.org, brew install python@3.12, apt install python3.12-venv) and name it:"; \
	echo "  make grade PYTHON=python3.12"; exit 1; }
# the venv itself, then the requirements: torch from the CPU wheel index on Linux (TORCH_INDEX= changes it)
MAKE_VENV = test -x $(PY) || { $(NEED_PYTHON) && $(PYTHON) -m venv $(VENV); }
INSTALL   = $(PY) -m autograder.sandbox.install
