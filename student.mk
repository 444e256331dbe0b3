# The student's commands, in one file: the student repo's Makefile is this file (`make release` copies it,
# with setup.mk beside it), and the full repo's Makefile includes it. `make grade` sets itself up on first use.
include setup.mk
SUBMISSION ?= exercises
STAGE    ?=
SEED     ?= 0
# what the set-up step compiles to bytecode (the full repo adds attn_ref)
BYTECODE ?= autograder

.PHONY: help student-help setup grade hint submit worked watch report capstone

help: student-help
student-help:
	@echo "make setup                   make .venv: the grader, numpy, torch's CPU build (make grade does it on first use)"
	@echo "make grade [STAGE=masking]   grade exercises/ (sets up .venv on first use); V=1 shows every failing check"
	@echo "                             FRESH=1 measures the cost checks again (a pass on unchanged files is kept)"
	@echo "make hint [STAGE=masking]    the next hint, one rung per call"
	@echo "make submit                  write submission.zip (your stage modules and a manifest) to upload"
	@echo "make worked                  list the articles' numbers that are checked"
	@echo "make watch                   re-grade on every save (Ctrl-C to stop)"
	@echo "make report [STAGE=masking]  write report.html: failing cells, heatmaps of your weights"
	@echo "make capstone [STEPS=300]    train a small model built from your attention; capstone.html shows its heads"
	@echo "make capstone MODEL=gpt2     GPT-2 small's weights with your attention (downloads 550 MB to GPT2_DIR once)"

$(VENV)/.student: requirements-student.txt
	@$(MAKE_VENV)
	$(INSTALL) requirements-student.txt
	@$(PY) -m compileall -q $(BYTECODE) >/dev/null  # bytecode now: each grade starts ~25 ms sooner
	@touch $@

setup: $(VENV)/.student

grade: $(VENV)/.student
	@$(PY) -m autograder grade --submission $(SUBMISSION) --seed $(SEED) $(if $(STAGE),--stage $(STAGE)) \
		$(if $(JSON),--json $(JSON)) $(if $(V),--verbose) $(if $(REQUIRE),--require-pass $(REQUIRE)) $(if $(FRESH),--fresh)

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

# after stages heads and kv_cache pass: a model built from your CausalSelfAttention, trained here (or GPT-2's weights)
capstone: $(VENV)/.student
	@$(PY) -m autograder capstone --submission $(SUBMISSION) --seed $(SEED) $(if $(MODEL),--model $(MODEL)) \
		$(if $(STEPS),--steps $(STEPS)) $(if $(GPT2_DIR),--weights $(GPT2_DIR))
