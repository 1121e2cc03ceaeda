"""README's "Use weir from Python" example runs as written and prints what it says."""

import pathlib
import re
import subprocess
import sys


def test_the_readme_example_runs_as_written():
    readme = (pathlib.Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("## Use weir from Python", 1)[1]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    ran = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.split("\n")
    assert lines[:2] == ["49", "[0, 1, 4, 9, 16]"]
    assert sorted(lines[2:4]) == ["16", "9"]
