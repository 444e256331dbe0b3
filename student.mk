# The student's commands, in one file: the student repo's Makefile is this file (`make release` copies it,
# with setup.mk beside it), and the full repo's Makefile includes it. `make grade` sets itself up on first use.
include setup.mk
SUBMISSION ?= exercises
STAGE    ?=
SEED     ?= 0
# what the set-up step compiles to bytecode (the full repo adds attn_ref)
BYTECODE ?= autograder

.PHONY: help student-help grade hint submit worked watch report

help: student-help
student-help:
	@echo "make grade [STAGE=masking]   grade exercises/ (sets up .venv on first use); V=1 shows every failing check"
	@echo "make hint [STAGE=masking]    the next hint, one rung per call"
	@echo "make submit                  write submission.zip (your stage modules and a manifest) to upload"
	@echo "make worked                  list the articles' numbers that are checked"
	@echo "make watch                   re-grade on every save (Ctrl-C to stop)"
	@echo "make report [STAGE=masking]  write report.html: failing cells, heatmaps of your weights"

$(VENV)/.student: requirements-student.txt
	@$(MAKE_VENV)
	$(INSTALL) requirements-student.txt
	@$(PY) -m compileall -q $(BYTECODE) >/dev/null  # bytecode now: each grade starts ~25 ms sooner
	@touch $@

grade: $(VENV)/.student
	@$(PY) -m autograder grade --submission $(SUBMISSION) --seed $(SEED) $(if $(STAGE),--stage $(STAGE)) \
		$(if $(JSON),--json $(JSON)) $(if $(V),--verbose) $(if $(REQUIRE),--require-pass $(REQUIRE))

hint: $(VENV)/.student
	@$(PY) -m autograder hint $(STAGE) --submission $(SUBMISSION)

submit: $(VENV)/.student
	@$(PY) -m autograder submit --submission $(SUBMISSION) --output submission.zip

worked: $(VENV)/.student
	@$(PY) -m autograder worked

watch: $(VENV)/.student  ## re-grade on every save (Ctrl-C to stop)
	@$(PY) -m autograder watch --submission $(SUBMISSION)

report: $(VENV)/.student  ## grade and write report.html: the stage table, failing cells, attention heatmaps
	@$(PY) -m autograder grade --submission $(SUBMISSION) --seed $(SEED) --html report.html $(if $(STAGE),--stage $(STAGE))
