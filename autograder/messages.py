"""Every kit-wide sentence a student can see, in one place: the report's fixed wording, the next step, the hint
ladders' frames, the verdicts' and the grader's own words. A stage's own text (its checks' `Fail` strings, its
mistakes' explanations, hints and rule sentences) stays in its declaration, `autograder/stages/<stage>.py`.

A leaf: the standard library only, nothing of `autograder` (CONTRIBUTING.md, Layers), so every part may read it but
one: the child (`autograder/child/`) is copied alone into the sandbox and cannot import it, so what a child says
itself (the run-time guard's refusal, `child/guard.py` RULE; the invariants' words) stays there, the one exception.
Templates are `str.format` strings named for where they show (`{name}` is a value the caller fills in); a few
that choose their words by a count are small functions. `tests/test_messages.py` walks what the grader prints for
the stubs, the solutions and every catalogued mutant, and fails on a line that is not made of whole templates from
here or a stage module with values in their places (a template may fill another's place; a piece of one covers
nothing). To find a sentence: grep this file for a few of its words.
"""

# ---- the kit-wide rules, written in the student README (autograder/instructor/build.py) word for word ----------------
# A check names the sentence it enforces (declarations.Check.rule): the first and last for worked and reference
# checks unless it names its own. INPUTS_RULE is checked around every call of student code
# (autograder/child/invariants.py, api.StudentAPI).
WORKED_RULE = "Every number the two articles print about a calculation is checked, at the precision the article prints it"
INPUTS_RULE = "Your functions leave the arrays and tensors they are given as they were"
DEFAULTS_RULE = "Default argument values are part of the contract: keep the defaults of the stubs' signatures"
REFERENCE_RULE = ("Each function must match a hidden reference implementation within rtol=1e-4, atol=1e-5 on "
                  "random inputs of every shape its docstring allows")

# ---- a stage's status, and what blocks it (terminal, watch screen, HTML, Gradescope, notebook cells) ----------------
STATUS_WORD = {"passed": "passed", "failed": "failed", "not_started": "not started", "blocked": "blocked"}
BLOCKED_BY = "by {stage}"  # 'blocked by softmax', then the blocking stage's diagnoses in brackets
BLOCKED_IDS = " ({ids})"

# ---- the terminal report (report/terminal.py) -----------------------------------------------------------------------
REPORT_HEADING = "Grading {submission}  (seed {seed})"
REPORT_COLUMNS = "stage", "points", "status"  # the stage table's column heads ('#' before them)
REPORT_BONUS_HEADING = "bonus stages"
REPORT_CHECKS = "  ({passed}/{total} checks)"
REPORT_TOTAL, REPORT_BONUS, REPORT_WITH_BONUS = "total", "bonus", "with bonus"
REPORT_BONUS_FOLDED = "  (your course counts the bonus stages in the total)"
REPORT_BONUS_APART = "  (apart from the core points)"
REPORT_TWINS = ("({points} of these points are twins: {count} checks the autograder runs on inputs you have not seen, "
                "run here on fixed inputs and counted as it counts them{tail})")
REPORT_TWINS_FAILING = "; {count} fail, {points} points"
REPORT_TWINS_PASS = "; all pass"
REPORT_KIT_FAULTS = "The kit's own checks failed (not your code; counted as passed):"
REPORT_PROTECTIONS_OFF = ("Sandbox protections this machine turns off or weakens (on your own machine only your own "
                          "work is at risk; the course's grader runs with all of them):")
REPORT_NEXT_STEP = "Next step: "
REPORT_DIAGNOSIS = "Diagnosis {id}"
REPORT_DIAGNOSIS_TAIL = ": {explanation}. Reread {reread}."
REPORT_CHECK_CITE = " (reread {cite})"
REPORT_PRINTED = "your code printed (stdout and stderr, during this check):"
REPORT_MORE_LINES = "... {count} more lines (`make grade V=1` shows them)"


def report_more_failing(count: int) -> str:
    """The line under a stage whose failing checks are not all listed."""
    checks = "check" if count == 1 else "checks"
    return f"  ... and {count} more failing {checks} (`make grade V=1` shows them all)"


# ---- the graded record's own sentences (results.py) -----------------------------------------------------------------
IGNORED_FILES = ("Ignored (not stage modules, never run): {files}. Only the stage modules are graded; put helpers "
                 "inside them.")

# ---- the words for a diagnosis (feedback/advice.py: Gradescope, notebook cells) -------------------------------------
DIAGNOSIS_ONE = "{id}: {explanation} (reread {reread})"
DIAGNOSIS_MANY = "{diagnosis}: {count} mistakes at once, and the output matches them together: "
DIAGNOSIS_MANY_EACH = "{id}, {explanation} (reread {reread})"
DIAGNOSIS_MANY_JOIN = "; and "

# ---- the next step (feedback/advice.py): one thing to do, computed once per grade -----------------------------------
NUDGE = " `make hint` gives a nudge."
SUBMIT = " Run `make submit` to package your work."
STEP_STAGE = "stage {number} ({name})"
STEP_ENVIRONMENT = "stages {stages} were not graded: {message}"
STEP_BLOCKED = "{head} is blocked {note}: fix {blocker} first (see above)."
STEP_MISSING_FILES = ("start {head}: {files} {verb} not in the submission; put the starter file back and replace its "
                      "stub." + NUDGE)
STEP_START = "start {head}: open {where} and replace the stub." + NUDGE
STEP_REFUSED = "fix {head}: {message}."
STEP_LOADING_HUNG = ("fix {head}: {file} never finished loading: line {line}, outside any function, was still running "
                     "when the time ran out (a loop that never ends?)." + NUDGE)
STEP_DEFAULT = "fix {head} at {where}: {message}. {rule}." + NUDGE
STEP_DIAGNOSED = "fix {head} {where}: {named}{explanation}.{repaired} Reread {reread}."
STEP_AT = "at {where}"
STEP_LOCATED = "fix {head} {where}: check '{check}' ({doc}) fails and {what}.{repaired}" + NUDGE
STEP_RAISES = "your code raises {type} ({message})"
STEP_OWN_OUTPUT_WRONG = "that function's own output is wrong"
STEP_CHECK = "fix {head}, check '{check}' ({doc}), at {where}." + NUDGE
STEP_UNREAD = ("fix {head}, check '{check}' ({doc}), at {where}: your {function} never reads its parameter `{param}`, "
               "which this check changes." + NUDGE)
STEP_IN_FUNCTION = "in {function}, at {where}{how}"  # 'in causal_mask, at exercises/masking.py:23'
STEP_REPAIRED = " {said}."  # an edit of a copy confirmed the parting line's change (feedback/repair.py)
STEP_STILL_FAILING = ("the stages just graded pass; stage {number} ({name}) is still {status}: open {file} and save it "
                      "to grade it again.")
STEP_NEXT_STAGE = " Next: stage {number} ({name}), `make grade STAGE={name}`."
STEP_SOME_PASS = "{these} {verb}.{after} Run `make grade` to see the whole kit."
STEP_CORE_PASS = "the core stages pass." + SUBMIT + " The bonus stages ({numbers}) are there if you want more."
STEP_ALL_PASS = "every stage passes." + SUBMIT

# ---- hints (feedback/hints.py, feedback/hint_ladders.py): `make hint` ------------------------------------------------
HINT_DEFAULT_QUESTION = "What does this function return for a 2 x 2 input you can work out by hand?"
HINT_WHERE_DEFAULT = "the function the next step names"
HINT_WHERE_FUNCTION = ", function "  # 'file.py:name' read as 'file.py, function name'
HINT_RUNG_LOOK = "Look at {where}. {question}"
HINT_RUNG_IDEA = "{explanation}."
HINT_RUNG_REREAD = "Reread {reread}, then run `make grade` again."
HINT_EDIT = "In {file}, line {line}, change `{before}` to `{after}` ({said})."
HINT_NONE_NEEDED = "Every stage you have graded passes: no hint needed. `make grade` checks the whole kit."
HINT_UNKNOWN_STAGE = "unknown stage {stage}; stages: {stages}"
HINT_FOR_MISTAKE = ("Hint {rung}/{of} for stage {number} ({stage}), about the mistake your last run named, {mistake}:\n"
                    "  {text}\n({more})")
HINT_FOR_STAGE = "Hint {rung}/{of} for stage {number} ({stage}):\n  {text}\n({more})"
HINT_MORE_GENERAL = "run `make hint` again for the stage's general hints"
HINT_MORE = "run `make hint` again for the next one"
HINT_LAST = "that was the last hint"

# ---- the verdict and the grader's own faults (grade/, grade/verdict.py) ---------------------------------------------
GRADER_FAULT_PLACE = " at the kit's {where}:{line}"
GRADER_FAULT = ("the grader's own check {check} failed ({type}: {error}{place}). This is a bug in the kit, not in your "
                "code, and it costs you no points. Please report it to your course staff with this line and the kit "
                "version ({version}).")
ERROR_AT = " at {where}"
ERROR_CALLED_FROM = ", in stage {number} ({stage})'s code, called from your {function} at {where}"
ERROR_NOT_IMPLEMENTED = "not implemented yet{where} ({message})"
ERROR_CONTRACT = "does not follow the contract: {message}"
ERROR_IN_GRADER = ("the grader could not use your objects: {type}: {message} (raised in the grader's own code while "
                   "using them, not on a line of yours; check the names and types the docstring asks for)")
ERROR_RAISED = "raised {type}: {message}{where}"
SYNTAX_ERROR_WHERE = "{message} ({file}, line {line})"
CHECK_ABORTED = "an earlier check of this stage did not finish ({said})"
CHECK_DID_NOT_FINISH = "your code did not finish: {said}"
CHECK_UNREADABLE = "could not read your result: {type}: {error}"
ENVIRONMENT = ("not run: the grader's environment could not run your code: {what}. This is not a problem with your "
               "code (none of it ran), and these checks' points are not your grade: on your own machine, reinstall "
               "the kit's environment (delete .venv, then `make grade`); on the course's grader, tell the course staff.")
NO_TORCH = "torch could not be loaded in the child ({error})"

# ---- comparisons (evidence/compare.py): a check's message when a value differs --------------------------------------
CLOSE_NOT_ARRAY = "{what}: expected an array, got {type}"
CLOSE_NOT_FLOAT = "{what}: expected a float array, got {type} of dtype {dtype}"
CLOSE_BATCH_INDEX = "batch index {index}, "
CLOSE_ROW_COLUMN = "{lead}row {row}, column {column}"
CLOSE_POSITION = "position {index}"
CLOSE_THE_VALUE = "the value"
CLOSE_INPUT = " (input: {inputs})"
CLOSE_SHAPE = "{what}: shape {got}, expected {expected}{input}"
CLOSE_NAN = "{what}: NaN at {where} ({count} NaN in all), expected {expected}{input}"
CLOSE_ROW = "; that row: expected {expected}, got {got}"
CLOSE_DIFFER = ("{what}: {bad} of {size} entries differ; worst at {where}: expected {expected}, got {got} "
                "(error {error:.3g}, allowed {allowed:.3g}){row}{input}")
CLOSE_READING = "\n(what the numbers show: {reading})"  # evidence/inference.py's reading of the difference
PRINTED_DIFFER = "{what}: the article prints {printed}, you get {got} (rounded to {decimals} decimals: {rounded})"
WITHIN_DIFFER = "{what}: the article prints {printed}, you get {got}; the allowed sampling error is {tol}"

# ---- the articles' worked numbers (stages/article_numbers.py: each quantity's words are declared there) -------------
WORKED_WHAT = "{quantity} (Article {article}, '{section}')"
WORKED_TITLE = "Article {article}, {section}: {quantity}"
WORKED_CITE = "Article {article}, '{section}'"

# ---- the stages' shared checks (stages/common.py) -------------------------------------------------------------------
RAISES_OTHER = "{what} raised {type}: {message}; expected ValueError"
RAISES_NOT = "{what} returned {got} instead of raising ValueError"
DEFAULTS_NOT_WRITTEN = "the stage's functions return None: write them first (their defaults count then)"
DEFAULTS_NO_DEF = ("{module}.py has no `def {name}` or `class {name}` at its top level that the name still holds (not "
                   "rebound by an assignment or import): the defaults are read from that definition")
DEFAULTS_UNREAD = (" ({names}: written in a way the grader does not read as a value; write the value itself, or a module "
                   "constant holding it)")
DEFAULTS_DIFFER = "{name}: the defaults {got} are not the contract's {want}{unread}"
IGNORES_INPUT = "{what} gave the same output for two different inputs: it ignores its input"

# ---- how memory grows with the length (stages/growth.py: the fused and tiled stages' cost rules) --------------------
GROWTH_DESCRIBED = ("at {name} = {sizes} the call's memory (its inputs and output, plus what the call itself added or "
                    "touched beyond the grader's own code: {added} MiB) was {memory} MiB: it grew {steps} per doubling of {name} "
                    "(fitted exponent {exponent:.2f}; a step counts once the call adds more than {noise} MiB)")
GROWTH_THEN = ", then "
GROWTH_TOO_FAST = ("your call's memory grew {step:.1f}x when {name} doubled (between {name} = {a:,} and {b:,}); "
                   "without {article} {name} x {name} matrix it grows 2x")
GROWTH_FELL = ("your call's memory fell from {before} MiB at {name} = {a:,} to {after} MiB at {b:,}: at the shorter "
               "length it kept memory that grows faster than {name} * d ({article} {name} x {name} matrix), which a "
               "longer length did not show")
GROWTH_HELD_SCORES = ("at {name} = {n:,} your call used {added} MiB beyond the grader's own (memory it made, touched, "
                      "or let go of after earlier calls made it): {share:.0%} of the {scores} MiB of the {name} x {name} "
                      "scores, where less than {limit:.0%} is allowed (a call without them uses a few MiB)")
GROWTH_VERDICT = ("{why}. One call raised peak memory by (or touched) {added} MiB more than the grader's own at {name} = "
                  "{sizes}, so its memory (with its inputs and output) was {memory} MiB: it grew {steps} per doubling of "
                  "{name} (fitted exponent {exponent:.2f}; a step counts once the call adds more than {noise} MiB)")

# ---- a confirmed edit of the parting line (feedback/repair.py): the next step's "Confirmed: ..." and the last hint ---
EDIT_NOT_REMOVED = "the mask's `~` removed"
EDIT_INVERTED = "the mask inverted (`~` added)"
EDIT_REVERSED = "the mask's comparison reversed"
EDIT_TRIL = "tril for triu (the mask built per row)"
EDIT_TRIU = "triu for tril"
EDIT_PER_ROW = "the mask's comparison read per row"
EDIT_DIAGONAL = "the diagonal moved by {shift:+d}"
EDIT_STRICT = "the mask's comparison made strict"
EDIT_EQUAL_IN = "the equal case let in"
EDIT_OWN_AXIS = "the function's own `{param}`"
EDIT_AXIS_BACK = "the axis argument changed back to {what}"
EDIT_IS_CAUSAL = "is_causal=True added to the call"
EDIT_OPERAND = "the operand `{now}` where `{was}` was"
EDIT_SQRT = "the division by the square root of d_k"
EDIT_COPY = "a copy of `{name}` made before the write"
CONFIRMED = "confirmed: with {words} on line {line}, {passes}"
CONFIRMED_ONE = "the failing {stage} check passes"
CONFIRMED_ALL = "all {count} failing {stage} checks pass"

# ---- what the numbers show (evidence/inference.py): a difference read off an output's structure ---------------------
READ_AXIS = "the sums that are 1 run along axis {axis} of {ndim} (over {which}), while the rows over the keys sum to {rows}"
READ_AXIS_QUERIES, READ_AXIS_BATCH = "the queries", "a batch axis"
READ_EVERYTHING = ("on [{n_q}, {n_k}] scores, all the weights together sum to 1, while each row should: the rows sum to "
                   "{rows}")
READ_TEMPERATURE = ("your {what} are {factor:.4g} times the right ones: the raw scores q.k are divided by {divisor:.4g}, "
                    "which is {name}, where sqrt(d_k) = {right:.4g} is right")
READ_LOG_WEIGHTS, READ_SCORES = "log-weights", "scores"
READ_AFTER_SOFTMAX = "each row is the right weights times a constant: the rows sum to {sums} instead of 1"
READ_NO_KEY, READ_EVERY_KEY = "no query sees any key (all False)", "every query sees every key (all True)"
READ_SEES = "query i sees keys {rule}"
READ_SYMMETRIC = "a symmetric pattern, rows "
READ_ROWS = "rows "
READ_TRANSPOSED = " (the transpose of the right mask)"
READ_INVERTED = " (the right mask inverted)"
READ_MASK = "for n_q={n_q}, n_k={n_k} your mask says {says}{extra}; the rule is {right}"

# ---- the mistakes inferred from an output's structure (evidence/inference.py: where and line patterns there) ------
# no stage declares them: each id's explanation, section to reread and hint question
INFERRED_WORDS = {
    'inferred-softmax-axis': {
        'explanation': ("the weights are normalised along another axis than the keys, so a query's weights do not sum "
                             'to 1'),
        'reread': "Article A, 'How the scores become shares'",
        'question': 'Along which axis do your weights sum to 1, and along which should they?',
    },
    'inferred-normalised-everything': {
        'explanation': "the weights are normalised over the whole matrix at once instead of one query's row at a time",
        'reread': "Article A, 'How the scores become shares'",
        'question': "Does each query's row sum to 1 on its own?",
    },
    'inferred-temperature': {
        'explanation': ('the scores are divided by the wrong amount before softmax, so the weights are too sharp or too '
                             'flat'),
        'reread': "Article B, 'Scores, now with a divide'",
        'question': 'What exactly are the raw scores divided by, and which dimension does that number come from?',
    },
    'inferred-scaled-after-softmax': {
        'explanation': ("a factor is applied to the weights after softmax, so each query's weights no longer sum to 1; "
                             'scale the scores, before softmax'),
        'reread': "Article A, 'How the scores become shares'",
        'question': 'Is any factor applied to the weights after softmax?',
    },
    'inferred-mask-pattern': {
        'explanation': ('the mask lets each query see a different set of keys than the causal rule (query i sees keys j '
                             '<= n_k - n_q + i)'),
        'reread': "Article B, 'Causal attention'",
        'question': 'For query i, which keys j may it see? Write the rule out for a 3 x 5 mask by hand.',
    },
    'inferred-low-precision': {
        'explanation': ('the result is computed in a low-precision float type (float16 or bfloat16) somewhere, and its '
                             "rounding shows; keep the input's precision"),
        'reread': "the stub's docstring ('any float dtype')",
        'question': 'Is any value on its way converted to a smaller float type than it came in?',
    },
    'inferred-layout': {
        'explanation': ('the output holds the right numbers in the wrong arrangement: axes swapped, or a reshape where '
                             'the axes had to be moved first'),
        'reread': "Article B, 'Code that matches the hand numbers'",
        'question': 'Print the shape after every reshape and axis swap: is each axis where the docstring says it is?',
    },
    'inferred-no-output-projection': {
        'explanation': 'the output is the heads placed side by side, without the output projection applied',
        'reread': "Article B, 'Multi-head attention'",
        'question': 'After the heads are placed side by side, what is the last step?',
    },
    'inferred-cache-contents': {
        'explanation': ('the cache does not hold the keys and values of the positions it should: an entry is written '
                             'twice, skipped, or holds another tensor'),
        'reread': "Article B, 'What it costs as the sequence grows'",
        'question': ('After one call of forward with the cache, how many positions does it hold, and which tensor is '
                          'in each?'),
    },
}

# ---- what changed at the parting line (feedback/relations.py, feedback/localise.py): the next step's "{what}" ----
# The words are matched by feedback/repair.py (say "inverted", "shifted one diagonal", "instead of the last"...):
# change one, and its edit there with it. A step's label (feedback/steps.py, 'the masked scores') is a key and the
# step's name at once.
PART_MASK_INVERTED = "with the mask inverted (True where the reference hides: True must mean may attend)"
PART_MASK_TOP_LEFT = ("with the mask aligned top-left (query i sees keys j <= i); the queries are the last {n_q} of "
                      "{n_k} positions, so query i sees keys j <= i{offset:+d}")
PART_MASK_NEXT_KEY = "with the mask shifted one diagonal: each query also sees the next key"
PART_MASK_OWN_KEY = "with the mask shifted one diagonal: each query misses its own key"
PART_MASK_TRANSPOSED = "with the mask transposed (built per column, j >= i, instead of per row)"
PART_NO_MASK = "with no mask applied (every key visible to every query)"
PART_NO_SCALE = "with no scale: q k^T is not divided by sqrt(d_k)"
PART_OTHER_AXIS = "{how} over axis {axis} ({which} axis) instead of the last (each row over its keys)"
PART_WHOLE_ARRAY = "taken over the whole array at once (one value for all rows) instead of each row over its keys"
PART_WHOLE_MAX = "made with one maximum for the whole array instead of each row's own"
PART_NORMALISED, PART_TAKEN = "normalised", "taken"
PART_QUERIES_AXIS, PART_LEADING_AXIS = "the queries'", "a leading"
PART_LEFT_OUT = "left out: it equals the reference's {step}, the step before, unchanged"
PART_SWAPPED = "holds the reference's {other} where its {step} belongs (an operand swapped)"
PART_READ_BACK = "read in the memory order of the axes {perm}: a reshape where the axes had to be moved first"
PART_AXES_SWAPPED = "with axes {a} and {b} swapped (a transpose too many or too few)"
PART_AXES_ORDER = "with its axes in the order {perm}"
PART_DIVISOR = "made with q k^T divided by {name} instead of sqrt(d_k) = {right:g}"
PART_D_K, PART_D_K_SQUARED = "d_k = {value}", "d_k**2 = {value}"
PART_INVERSE_SQRT = "1/sqrt(d_k) = {value:g} (a multiplication where a division belongs)"
PART_SQRT_D_K, PART_N = "sqrt(d_k) = {value:g}", "n = {value}"
PART_TIMES, PART_DIVIDED = "times {name}", "divided by {name}"
PART_SQUARE_ROOT = "the square root of the reference's {step}"
PART_SQUARE_ROOT_VARIANCE = " (a standard deviation where the variance belongs)"
PART_SQUARE = "the square of the reference's {step}"
PART_SQUARE_DEVIATION = " (the variance where a standard deviation belongs)"
PART_FLOAT16 = "rounded to float16 (a smaller float type on the way)"
PART_RETURNED = "returned value"  # a probed function's `return` record, as the line shows it ('returned value[1]')
PART_LINE_IS = "line {line}: your `{name}` is {words}"
PART_LINE_DOES = "line {line}: your `{name}` {words}"
PART_LINE_EQUALS = "line {line}: your `{name}` equals the reference's {step} {words}"
PART_MUTATED = ("line {line}: your code writes into `{param}`, the array the caller passed in (an argument changed in "
                "place): work on a copy, or make a new array")
PART_MUTATED_EVIDENCE = "the call changed its argument `{param}` in place"
PART_NOT_KEPT = ("line {line}: the value `{callee}` returns here ({step}) is not kept: no variable takes it, so "
                 "`{function}` later works on what was there before")
PART_RETURN_ORDER = ("holds what the function should return in place {j}, not {i}: the values are returned in another "
                     "order than the docstring's")
PART_RETURN_SLOT = "returned value [{i}]"
PART_STOPS = "and stops there: the steps after it ({steps}) are left out"
PART_NO_TRACE = "no values could be traced, so this is the function's first line"
PART_EVIDENCE = "(the evidence: {evidence})"  # added to the first failing check's message under an inferred diagnosis
PART_RAISED = "raised {type}: {message}"
PART_CACHE_OVERFILLED = ("feeding 6 tokens in chunks of 3, 1 and 2 into a cache of max_len 6 filled it before the end "
                         "({message}): forward writes more positions than it is given")
# a scaled_dot_product_attention call that attends other than the reference's (relations.sdpa_difference)
SDPA_LINE_MADE = ("line {made}: this makes the {argument} of your scaled_dot_product_attention call on line {call}, "
                  "which {words}")
SDPA_LINE = "line {call}: your scaled_dot_product_attention call {words}"
SDPA_NO_MASK = "sets neither is_causal nor attn_mask: every query sees every key, the later ones too"
SDPA_CAUSAL_NOT_ASKED = "sets is_causal=True where causal=False: every query must see every key"
SDPA_TOP_LEFT = ("uses is_causal=True with {t_q} queries and {t_k} keys: is_causal aligns top-left (query i sees keys "
                 "j <= i), while the queries are the last {t_q} positions (j <= i{offset:+d}): pass the bottom-right "
                 "mask as attn_mask instead")
SDPA_MASK = "passes an attn_mask {words}"  # a mask change's words after 'with the mask '
SDPA_OTHER_KEYS = ("passes an attn_mask that lets the queries see other keys than the causal ones (query i sees keys "
                   "j <= i{offset:+d})")
SDPA_DROPOUT_EVAL = "passes dropout_p={p:g} while training={training}: dropout belongs in training only"
SDPA_DROPOUT = "passes dropout_p={p:g} where training=True asks for dropout_p={dropout:g}"
SDPA_SCALE = "passes scale={scale:.4g}, where the default 1/sqrt(D) = {right:.4g} is right"

# ---- what a stage module may use (sandbox/static_check.py; the rule itself is child/guard.py's RULE, which the
# child states alone at run time: a child cannot read this module) ---------------------------------------------------
RULE_WHEN = ". A module that does is refused before any of it runs, or stopped with this rule when it tries at run time"
REFUSED_FILE = ("{file} was refused before any of it ran: {shown}. Only numpy, torch, math, typing, a few pure "
                "helpers and your other stage modules may be used (README, 'What your code may use')")
REFUSED_MORE = "; and {count} more"
REFUSED_LINE = "line {line}: {what}"
REFUSED_LIBRARY_OWN = "{what} (numpy's or torch's own)"  # 'changing np.allclose', 'setattr() on torch'
REFUSED_CHANGING = "changing {target}"
REFUSED_NOT_STAGE = "{statement} ({module}.py is not one of the stage modules)"
REFUSED_RELATIVE = " (a stage module is imported relatively: `from .{stage} import ...`)"
REFUSED_BUILT_NAME = "{function}() with an attribute name built from strings"
REFUSED_PROC = "a path under /proc"
NOT_A_STAGE_MODULE = "not a stage module: ignored"

# ---- a child's end and limits (sandbox/runner.py): a check's message when the run, not the value, failed -----------
# sandbox.runner.environment_fault reads a crash's message back: '(exit code N' / '(it ...' and 'its last output: '
BUDGET_SPENT = "not run: the whole grade's time budget ({budget:g} s) ran out before this check could finish"
GRADE_CANCELLED = "not run: the grade was cancelled"
WORKER_RETIRED = "grading stopped: this worker was retired (the grade was cancelled)"
SIGNAL_WORDS = {"SIGXFSZ": "wrote more output than allowed", "SIGXCPU": "used up its CPU time",
                "SIGSEGV": "crashed (segmentation fault)", "SIGABRT": "aborted",
                "SIGKILL": "was killed (memory or time limit, or it ended itself)"}
SIGNAL_OTHER = "was killed"
CHILD_EXIT_CODE = "exit code {code}"
CHILD_SIGNAL = "it {words}: signal {number}"
CHILD_DIED = "{why} ({detail})"
CHILD_LAST_OUTPUT = "; its last output: "
CHILD_EXITED_BEFORE = "the child process had already exited"
CHILD_BAD_START = "the child did not start properly"
CHILD_OUT_OF_TURN = "the child answered out of turn"
CHILD_EXITED = "the process exited"
SERVER_GONE = "the fork server stopped answering while a measuring child ended"
CHILD_LINGERED = ("after answering, the process that ran this call kept running for {seconds:.0f} s instead of ending, so "
                  "its memory could not be measured")
CHILD_NEVER_LOADED = ("{file} never finished loading in an earlier check (its body was still running line {line} at the "
                      "time limit), so it is not loaded again")
CHILD_TIMEOUT = "no answer within {timeout:g} s{lent} (an endless loop, or far too slow){at}"
CHILD_TIMEOUT_AT = ": it was running {file}:{line}, in {function}"
CHILD_TIMEOUT_LENT = ", besides {seconds:.1f} s it waited for a CPU"
CHILD_REPLY_TOO_LARGE = ("sent an answer larger than {mib} MiB without ending it; the grader stopped reading (return "
                         "arrays, numbers or tuples of them)")
CHILD_SCRATCH_FULL = ("wrote {size:.0f} MiB in {entries:,}{more} files in its own folder, past the {cap} MiB and {limit:,} "
                      "files a child may leave there; the grader ended it (your code may not write files)")
PRINTED_CUT = "\n[... more output not shown: at most {limit:,} characters a check]"
START_NO_INTERPRETER = "the interpreter that runs the children could not be started ({what})"
START_ENDED = "it ended"
START_MISSING_PACKAGE = "the package {package} is missing from the Python that runs the children ({exe}; {how})"
START_NOT_FOUND = "the interpreter that runs the children was not found or cannot be reached ({exe}; {how})"
START_NOT_EXECUTABLE = "the interpreter that runs the children cannot be executed ({exe}; {how})"
START_FAILED = "the child process ended before loading any of the submission ({exe}; {how})"
# what this machine's sandbox turns off (report: REPORT_PROTECTIONS_OFF, one line each)
OFF_NAMESPACES = ("no namespaces here (Linux's unshare): children share this machine's /tmp, network and process list, "
                  "and see the files your user can read")
OFF_LANDLOCK = ("no Landlock here (Linux 5.13 or later): a file a library opens from its own C code, such as torch's "
                "from_file, is not refused (the run-time guard refuses Python's own opens)")
OFF_SECCOMP = ("no seccomp filter here (Linux on x86_64 or aarch64): new processes and sockets are refused by the "
               "run-time guard only")
OFF_FORK = ("watch and regrade start a new interpreter per child instead of forking a warm one (forking after numpy and "
            "torch is not safe here): slower, the same grades")

# ---- a call that changed its caller's arrays (api.inputs_changed; INPUTS_RULE above) -----------------------------
INPUTS_CHANGED_ONE = "{function} changed its argument {names} in place"
INPUTS_CHANGED_MANY = "{function} changed its arguments {names} in place"
INPUTS_CHANGED = ("{said}: after the call the caller's array holds other values. {rule}: compute into new arrays "
                  "(`x = x - m`, not `x -= m`, `out=x` or `x[i] = ...` on an argument)")

# ---- the header of every stub file (instructor/make_exercises.py writes it into exercises/) ------------------------
STUB_HEADER = ("# Your code goes here: replace each `raise NotImplementedError(...)` with your own. `make grade` checks\n"
               "# it and names the next step;" + NUDGE + "\n")

# ---- the commands' own lines (cli.py: `make grade`, `make hint`, `make worked`, `make submit`) ----------------------
CLI_WINDOWS = """\
This kit runs on Linux, macOS and Windows through WSL2, not on Windows itself: its sandbox needs
process limits and signals that Windows does not have. To use WSL2 (Ubuntu):
  1. In PowerShell as administrator: wsl --install   (then restart, and open "Ubuntu")
  2. In Ubuntu: sudo apt update && sudo apt install -y make python3.12 python3.12-venv git
  3. Clone the repository inside Ubuntu (e.g. ~/attention, not /mnt/c/...) and run the same make
     commands there (make grade, make submit). Editors such as VS Code open WSL folders directly."""
CLI_ERROR = "error: {error}"
CLI_UNKNOWN_STAGE = "error: unknown stage {stages}; stages: {known}"
CLI_NOTE = "note: {note}"
CLI_WROTE = "wrote {path}"
CLI_REQUIRED_FAILING = "required to pass, and not passing: {stages}"
KEPT_PASSES = ("Not measured again: {checks}. These checks of memory or CPU time, read from outside your code, "
               "passed in earlier grades of files with the very same contents (last measured {at}), so they are "
               "taken back for a few grades (8 at most, or an hour); any edit measures them again, and "
               "`make grade FRESH=1` measures them now.")
# (passes of measured checks, kept: grade/kept.py)
CLI_WORKED = "{id:<28} {stage:<13} Article {article}, {section}: {quantity} = {expected}"
CLI_SUBMIT_WROTE = "wrote {output} from {source}/"
CLI_SUBMIT_WARNING = "  warning: {problem}"

# ---- the other renderers (report/watch_screen.py, report/html.py, report/gradescope_json.py): their own words;
# the rest is the terminal report's wording above -------------------------------------------------------------------
BONUS_MARK = " (bonus)"  # after a bonus stage's name in a table
PRINTED_HEADING = REPORT_PRINTED[0].upper() + REPORT_PRINTED[1:]  # 'Your code printed ...' where it opens a paragraph
WATCH_TOP = "[{bar}] {done}/{total} core stages pass, {score:g}/{top:g} points   (watching; Ctrl-C to stop)"
WATCH_STAGE = "  stage {number} {name}: {status}{blocked} ({score:g}/{max_score:g})"
WATCH_STAGE_GRADING = "  stage {number} {name}: grading ..."
WATCH_GRADING_USERS, WATCH_GRADING = "grading the stages that use it ...", "grading ..."
WATCH_MACHINE = "  (this machine: {note})"
HTML_TITLE = "Attention kit: grade report"
HTML_HEADING = "Attention, stage by stage"
HTML_GRADED = "Graded {submission} (seed {seed})"
HTML_FAILING = "Failing checks"
HTML_HINTS_FOR = "Hints for {stage}"
HTML_PANELS = "yours", "reference", "|difference|"  # a heatmap's panels
HTML_NOT_AVAILABLE = "not available:\n{error}"
HTML_MATRIX_CUT = "(the first {rows} x {cols} of {n_rows} x {n_cols})"
HTML_HINT_SUMMARY = "stage {number}: {name}: hint {rung}/{of}{about}"
HTML_HINT_ABOUT = ", about the mistake this run named ({mistake})"
HTML_HINT_MORE = "`make hint STAGE={stage}` gives this one, then the next"
HTML_HINT_LAST = "the last rung of this ladder"
HTML_NO_STEP = "(no step of this shape)"
HTML_SDPA_STEP = "the scaled_dot_product_attention call"  # the trace's row for a call whose arguments part
HTML_NOT_KEPT = "(not kept)"  # the trace's name for a value no variable takes
HTML_NO_STEP_LABEL = "no step of its shape"
HTML_PART_HERE = "the values part here, {where}"
HTML_STEPS_STAGE = "{stage}: in {function}"
HTML_STEPS_COLUMNS = "step", "your line", "your value", "the reference's"
HTML_STEPS_HEADING = "Where your values part from the reference's"
HTML_STEPS_INTRO = ("Each row is a value one of your lines made (the first head, at most 8 x 8), beside the reference's "
                    "value of the same step.")
HTML_PICTURES = "Pictures: “she saw the cat”"
HTML_HINTS = "Hints"
HTML_HINTS_INTRO = "The next hint of each stage that does not pass yet, one rung at a time (as {command} gives them)."
GRADESCOPE_PASSED = "passed"
GRADESCOPE_NOTE = ". {note}"
GRADESCOPE_DIAGNOSIS = "**Diagnosis** {diagnosis}"
GRADESCOPE_SEE = "See {cite}."
GRADESCOPE_TOTAL_FOLDED = "**{total:g}/{max_total:g}** (core {score:g}/{max_score:g} and bonus {bonus:g}/{max_bonus:g} together)"
GRADESCOPE_TOTAL = "**{score:g}/{max_score:g}**"
GRADESCOPE_BONUS_APART = " (bonus {bonus:g}/{max_bonus:g}, apart from the core points)"
GRADESCOPE_NEXT_STEP = "**Next step:** "
GRADESCOPE_TEST_NAME = "{number}. {stage}: {name}"
GRADESCOPE_BONUS_APART_TEST = " (bonus, {points:g} apart)"  # a bonus check's name where the bonus is kept apart
