"""The parent's side of running student code: the submission's snapshot and file reads, the static
explanation of the import rule, the launchers and namespaces that start children, and the runner
that talks to them. What a child itself may see lives in autograder/child/, copied whole."""
