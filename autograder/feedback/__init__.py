"""What the student is told beyond pass or fail: diagnosis (catalogued and inferred mistakes),
localisation (the function and line), advice (the one next step) and hints (the ladder)."""
