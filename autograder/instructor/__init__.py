"""What never ships to students: the release and Gradescope builds, exercise generation, batch
regrade, the Gradescope entry point and the notebook editions. The student release skips this folder."""
