"""Programs as tasks (docs/python.md): Rain's program pipeline for squall."""
import squall

client = squall.Client()
# guide:begin
with client.new_session("pipeline") as session:
    fruit = session.blob(b"pear\napple\nfig\napple\n", label="fruit")
    # sort | uniq -c as two tasks: the second reads the first's stdout.
    sort = session.execute(["sort"], stdin=fruit, stdout=True, env={"LC_ALL": "C"}, name="sort")
    count = session.execute(["uniq", "-c"], stdin=sort, stdout=True, name="count")
    # A shell line with an input file and an output file in its sandbox.
    longest = session.execute("awk '{ print length, $0 }' in.txt | sort -n | tail -n 1 > out.txt",
                              inputs={"in.txt": fruit}, outputs=["out.txt"], name="longest")
    # A factory: one Program, its slot bound per task.
    upper = squall.Program("tr a-z A-Z < in.txt").input_slot("in", "in.txt").stdout_output()
    shouted = session.execute(upper, slots={"in": count})
    shouted.output.keep()
    longest.output.keep()
    session.submit()
    print(shouted.output.fetch().decode(), end="")
    print(longest.output.fetch().decode(), end="")
# guide:end
