"""Renderers of graded results: the terminal report, Gradescope's results.json, the HTML page and
the watch screen. They show results and advice; they do not compute them."""
