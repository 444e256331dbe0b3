# Shared by this Makefile and the student repo's: which Python makes the venv, and the check that it can.
# The first of these that is Python 3.11+ with venv and that other users can run (its folders and its library open
# to them: the sandbox runs each submission under a uid of its own, a pyenv under /root is closed to it); else the
# first that is 3.11+ (a student's own machine needs no other user). PYTHON=... names another (checked too).
SHARED_PYTHONS ?= /usr/bin/python3  # looked for by path too: a pyenv shim may come first on the PATH
OTHERS_CAN_RUN := import os, stat, sys, sysconfig, importlib.util as u; \
	up = lambda p: [p] + ([] if p == os.path.dirname(p) else up(os.path.dirname(p))); \
	ok = lambda p, bits: all(os.stat(d).st_mode & stat.S_IXOTH for d in up(os.path.dirname(os.path.realpath(p)))) \
	and os.stat(p).st_mode & bits == bits; \
	print(sys.version_info >= (3, 11) and all(u.find_spec(m) for m in ("venv", "ensurepip")) \
	and ok(sys.executable, stat.S_IXOTH) and ok(sysconfig.get_path("stdlib"), stat.S_IROTH | stat.S_IXOTH))
PYTHON ?= $(firstword \
	$(foreach p,python3.13 python3.12 python3.11 python3 $(SHARED_PYTHONS),$(if $(filter True,$(shell \
	$(p) -c '$(OTHERS_CAN_RUN)' 2>/dev/null)),$(p))) \
	$(foreach p,python3.13 python3.12 python3.11 python3,$(if $(filter True,$(shell \
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
