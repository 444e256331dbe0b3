"""How a check tells which mistake it saw: diagnosis (matching the stage's catalogue), inference (reading a mistake
off the structure of a wrong answer) and probes (the fixed inputs and judges of localisation). Below the stages,
which use them in their checks; feedback reads them, never the other way."""
