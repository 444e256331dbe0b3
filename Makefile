# Every entry point of the kit. `make grade` and `make test` set themselves up on a fresh machine.
BYTECODE := autograder attn_ref
include student.mk  # the student's commands (grade, hint, submit, worked, watch, report), shipped as the release's Makefile

.PHONY: setup exercises check-exercises readme test test-fast sweep lint clean

help: instructor-help
instructor-help:
	@echo "instructors:"
	@echo "make setup                   the venv every instructor command and test needs (they run it themselves too)"
	@echo "make test                    the project's own tests, after make lint (make test-fast: the quick tier)"
	@echo "make sweep                   the cost rules' 20-seed sweeps (gates lose, correct code keeps): about 6 minutes"
	@echo "make lint                    ruff (ruff.toml)"
	@echo "make exercises               regenerate exercises/ from solutions/ (check-exercises: fail if stale)"
	@echo "make readme                  README.md's generated parts (stage table, catalogue, test counts)"
	@echo "make release                 the student repo in dist/student"
	@echo "make autograder [SECRET=..] [HIDDEN_VISIBILITY=visible]  the Gradescope zip (its secret beside it: dist/autograder.secret); gradescope-local SUBMISSION=PATH runs it here"
	@echo "make classroom-local SUBMISSION=PATH  the release's GitHub Classroom workflow run here on one submission"
	@echo "make regrade DIR=folder      grade a folder of submissions in parallel"
	@echo "make nbgrader / make otter   the notebook editions in dist/"
	@echo "make bench [QUICK=1]         speed figures; make gpu-check: the CUDA check"

setup: $(VENV)/.instructor  ## the venv with everything the instructors' commands and the tests need (CONTRIBUTING.md)

$(VENV)/.dev: requirements-dev.txt $(VENV)/.student
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

$(VENV)/.instructor: requirements-instructor.txt $(VENV)/.dev
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-instructor.txt
	@touch $@

exercises: $(VENV)/.student
	$(PY) -m autograder.instructor.make_exercises

check-exercises: $(VENV)/.student
	$(PY) -m autograder.instructor.make_exercises --check

readme: $(VENV)/.dev  ## README.md's generated parts: the stage table, the catalogue, the test counts
	$(PY) -m autograder.instructor.tables

# The tiers (CONTRIBUTING.md): a test's markers say where it runs. Most tests wait on grading children, so four
# workers keep two cores busy; the tests marked `serial` need the machine to themselves and run after, one at a time.
WORKERS ?= 4
FAST_WORKERS ?= 2  # the quick tier keeps both cores computing (grading children, little waiting): a third worker
                  # only adds its own start and contention (parallel part 115 s on 2 workers, 130 s on 3, same machine)
PYTEST   = PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q
test: $(VENV)/.instructor lint  ## every test: the parallel part on $(WORKERS) workers, then the serial ones
	$(PYTEST) -n $(WORKERS) --dist worksteal --durations=40 -m "not serial and not sweep" tests
	$(PYTEST) --durations=10 -m "serial and not sweep" tests || test $$? -eq 5  # 5: no test marked serial

test-fast: $(VENV)/.instructor lint  ## before each commit: every module, no builds of whole channels (CONTRIBUTING.md)
	$(PYTEST) -n $(FAST_WORKERS) --dist worksteal -m "not slow and not serial and not sweep" tests
	$(PYTEST) -m "serial and not slow and not sweep" tests || test $$? -eq 5  # 5: no such test, which is fine

sweep: $(VENV)/.instructor  ## the cost rules over 20 seeds each: size gates lose, correct code keeps (about 6 minutes on 2 cores)
	$(PYTEST) -n $(WORKERS) --dist worksteal -m "sweep" -rA tests

lint: $(VENV)/.dev  ## ruff, configured in ruff.toml
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) submission.zip .pytest_cache

# ---- instructor builds: the student repo and the Gradescope autograder ------------------------
.PHONY: release autograder gradescope-local classroom-local
release: $(VENV)/.student
	$(PY) -m autograder.instructor.build release --out dist/student $(if $(BONUS),--bonus $(BONUS))

autograder: $(VENV)/.student
	$(PY) -m autograder.instructor.build autograder --out dist/autograder.zip $(if $(SECRET),--secret $(SECRET)) \
		$(if $(HIDDEN_VISIBILITY),--hidden-visibility $(HIDDEN_VISIBILITY)) $(if $(BONUS),--bonus $(BONUS))

gradescope-local: $(VENV)/.student
	@test "$(origin SUBMISSION)" != file || (echo "usage: make gradescope-local SUBMISSION=PATH"; exit 2)
	$(PY) -m autograder.instructor.build gradescope-local --submission $(SUBMISSION) --zip dist/autograder.zip

classroom-local: $(VENV)/.student  ## the release's Classroom workflow run here on one submission, and its total
	@test "$(origin SUBMISSION)" != file || (echo "usage: make classroom-local SUBMISSION=PATH"; exit 2)
	$(PY) -m autograder.instructor.classroom_local --submission $(SUBMISSION)

.PHONY: regrade
regrade: $(VENV)/.student  ## make regrade DIR=folder-of-submissions [OUT=results-folder] [JOBS=n] [SECRET_FILE=path] [BONUS=apart|folded] [ITEM=name] [SAME_UID=1] [TRUST=1]
	@$(PY) -m autograder regrade $(DIR) $(if $(SECRET_FILE),--secret-file $(SECRET_FILE)) $(if $(ANONYMIZE),--anonymize) \
		$(if $(TRUST),--trust) $(if $(FORK_SERVER),--fork-server) $(if $(OUT),--out $(OUT)) $(if $(JOBS),--jobs $(JOBS)) \
		$(if $(BONUS),--bonus $(BONUS)) $(if $(SAME_UID),--same-uid) $(if $(ITEM),--item "$(ITEM)")

.PHONY: mutants
$(VENV)/.mutants: requirements-mutants.txt $(VENV)/.dev
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-mutants.txt
	@touch $@

mutants: $(VENV)/.mutants  ## which small mistakes the grader catches, remotely and locally (bench/mutants.md); not a test
	$(PY) bench/mutants.py $(if $(LIMIT),--limit $(LIMIT)) $(if $(FILES),--files $(FILES))

.PHONY: bench gpu-check
bench: $(VENV)/.dev  ## latency and throughput figures (bench/results.json); not a test
	$(PY) bench/bench.py $(if $(QUICK),--quick)

gpu-check: $(VENV)/.student  ## the torch stages on CUDA (fp32/fp16/bf16), fused-kernel proof, cost table
	$(PY) bench/gpu_check.py

.PHONY: nbgrader
nbgrader: $(VENV)/.instructor  ## the nbgrader course directory in dist/nbgrader, with its gradebook.db
	$(PY) -m autograder.instructor.notebooks nbgrader --out dist/nbgrader $(if $(BONUS),--bonus $(BONUS))
	cd dist/nbgrader && PATH="$(CURDIR)/$(VENV)/bin:$$PATH" nbgrader db assignment add attention

.PHONY: otter
otter: $(VENV)/.instructor  ## otter-grader master notebook + `otter assign` in dist/otter (student notebook, autograder zip)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m autograder.instructor.notebooks otter --out dist/otter $(if $(BONUS),--bonus $(BONUS))
