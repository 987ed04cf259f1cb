"""Directories as data objects (docs/python.md): Rain's directory task for
squall."""
import os
import pathlib
import tempfile

import squall

client = squall.Client()
local = pathlib.Path(tempfile.mkdtemp())
(local / "notes").mkdir()
(local / "notes" / "todo.txt").write_text("write docs\n")
# guide:begin
with client.new_session("directories") as session:
    notes = session.directory(str(local / "notes"))  # a local dir, uploaded
    # A dir made of objects at paths (deep paths are made).
    site = session.make_dir({"index.html": session.blob(b"<h1>squall</h1>\n"),
                             "css/site.css": session.blob(b"h1 { color: teal }\n"),
                             "notes": notes})
    # A program that reads a dir and writes one ("out/": a dir output).
    report = session.execute("mkdir out && cd site && find . -type f | sort > ../out/files.txt",
                             inputs={"site": site}, outputs=["out/"], name="report")
    files = session.slice_dir(report, "files.txt")  # one file of it
    report.output.keep()
    files.output.keep()
    session.submit()
    print(files.output.fetch().decode(), end="")
    report.output.fetch_dir(str(local / "report"))  # unpacked here
    print(os.listdir(local / "report"))
# guide:end
