"""The Python examples of the docs: every ```python block of docs/*.md is
the shown part (between '# guide:begin' and '# guide:end') of a program in
docs/examples/python/, named by the marker line above it, and every such
program is shown; each runs against a real cluster (conftest.py) and prints
exactly its .out file, which a page may show too (tests/docs-test.cpp does
the same for the C++ examples)."""

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

SOURCE = pathlib.Path(os.environ.get("SQUALL_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
EXAMPLES = SOURCE / "docs" / "examples" / "python"
MARKER = "<!-- example: docs/examples/python/"


def shown_part(program):
    lines, inside = [], False
    for line in program.read_text().splitlines():
        if line.strip() == "# guide:begin":
            inside = True
        elif line.strip() == "# guide:end":
            inside = False
        elif inside:
            lines.append(line)
    return textwrap.dedent("\n".join(lines) + "\n")


def python_blocks():
    """(page, line number, marked file or None, block text) for every
    ```python block of docs/*.md."""
    for page in sorted((SOURCE / "docs").glob("*.md")):
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if line != "```python":
                continue
            end = lines.index("```", i + 1)
            marked = None
            if i > 0 and lines[i - 1].startswith(MARKER):
                marked = lines[i - 1][len(MARKER):].split()[0]
            yield page.name, i + 1, marked, "\n".join(lines[i + 1:end]) + "\n"


def test_every_python_block_is_a_tested_example_and_every_example_is_shown():
    shown = set()
    for page, line, marked, block in python_blocks():
        assert marked, f"{page} line {line}: a python block without an example marker above it"
        assert block == shown_part(EXAMPLES / marked), f"{page} line {line} differs from {marked}"
        shown.add(marked)
    programs = {p.name for p in EXAMPLES.glob("*.py")}
    assert programs and programs <= shown, f"not shown in docs/: {sorted(programs - shown)}"


def test_the_cmake_package_example_is_shown_as_it_is_built():
    """docs/install.md shows docs/examples/package/CMakeLists.txt, which
    the ctest package-example builds, less its opening comment."""
    page = (SOURCE / "docs" / "install.md").read_text().splitlines()
    marker = page.index("<!-- example: docs/examples/package/CMakeLists.txt -->")
    assert page[marker + 1] == "```cmake"
    block = page[marker + 2:page.index("```", marker + 2)]
    program = (SOURCE / "docs" / "examples" / "package" / "CMakeLists.txt").read_text().splitlines()
    while program[0].startswith("#"):
        program.pop(0)
    assert block == program


@pytest.mark.parametrize("name", sorted(p.stem for p in EXAMPLES.glob("*.py")))
def test_the_example_prints_what_its_out_file_says(cluster, name):
    run = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py")],
                         env={**os.environ, "SQUALL_SERVER": cluster.address},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == (EXAMPLES / f"{name}.out").read_text()


def test_the_readme_python_example_prints_what_its_comment_says(cluster, tmp_path):
    readme = (SOURCE / "README.md").read_text().splitlines()
    start = readme.index("```python")
    program = "\n".join(readme[start + 1:readme.index("```", start + 1)]) + "\n"
    (tmp_path / "readme.py").write_text(program)
    run = subprocess.run([sys.executable, str(tmp_path / "readme.py")],
                         env={**os.environ, "SQUALL_SERVER": cluster.address},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "13\n"
