"""The course's bonus policy, where the student repo can read it: "apart" (the bonus stages are graded and shown,
and add nothing to the total) or "folded" (their points count like any other stage's). The full repo keeps
"apart"; `make release BONUS=...` writes the instructor's choice into the student repo's copy of this file, so
its `make grade` totals the points as the autograder built with the same BONUS= does."""
BONUS = "apart"
