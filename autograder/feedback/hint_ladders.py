"""A short hint ladder per diagnosis (issue 23), catalogued or inferred, built from its record.

Rung 1 names the function and asks the question the mistake answers wrongly; rung 2 gives the idea in
the catalogue's words; rung 3 sends the student to the section to reread. No rung holds code: the
explanations are prose, and `ladder` drops any rung that would quote a line of the student's stubs.
"""
from ..records import Mistake

QUESTIONS = {  # id prefix -> the question rung 1 asks
    "softmax-": "Which slice of the scores is each softmax taken over, and is it stable for large scores?",
    "inferred-softmax-axis": "Along which axis do your weights sum to 1, and along which should they?",
    "inferred-normalised-everything": "Does each query's row sum to 1 on its own?",
    "inferred-low-precision": "Is any value on its way converted to a smaller float type than it came in?",
    "scale-": "What exactly are the raw scores divided by, and which dimension does that number come from?",
    "inferred-temperature": "What exactly are the raw scores divided by, and which dimension does that number "
                            "come from?",
    "inferred-scaled-after-softmax": "Is any factor applied to the weights after softmax?",
    "mask-": "For query i, which keys j may it see? Write the rule out for a 3 x 5 mask by hand.",
    "inferred-mask-pattern": "For query i, which keys j may it see? Write the rule out for a 3 x 5 mask by hand.",
    "linear-attention": "Where do the weights become a weighted average?",
    "heads-": "Follow one head's columns through the reshapes: which positions and features end up together?",
    "inferred-layout": "Print the shape after every reshape and axis swap: is each axis where the docstring "
                       "says it is?",
    "inferred-no-output-projection": "After the heads are placed side by side, what is the last step?",
    "cache-": "After one call of forward with the cache, how many positions does it hold, and which?",
    "inferred-cache-contents": "After one call of forward with the cache, how many positions does it hold, and "
                               "which tensor is in each?",
    "fused-": "What does the fused call receive, and what does it build itself?",
}


def ladder(m: Mistake) -> list[str]:
    """The rungs for one diagnosis, from a question to the section to reread."""
    where = m.where.replace(":", ", function ") if m.where else "the function the next step names"
    question = next((q for prefix, q in QUESTIONS.items() if m.id.startswith(prefix)),
                    "What does this function return for a 2 x 2 input you can work out by hand?")
    return [f"Look at {where}. {question}",
            f"{m.explanation[0].upper() + m.explanation[1:]}.",
            f"Reread {m.reread}, then run `make grade` again."]
