"""The Python examples of README.md and docs/python.md run as written and print what they say."""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).parents[2]


def run_example(doc, after):
    section = (ROOT / doc).read_text().split(after, 1)[1]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    ran = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.split("\n")


def test_the_docs_example_runs_as_written():
    lines = run_example("docs/python.md", "## Use it")
    assert lines[:2] == ["49", "[0, 1, 4, 9, 16]"]
    assert sorted(lines[2:4]) == ["16", "9"]


def test_the_readme_example_runs_as_written():
    lines = run_example("README.md", "From Python")
    assert lines[0] == "[0, 1, 4, 9, 16]"
