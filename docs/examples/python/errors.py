"""Failures (docs/python.md): a program's and a remote function's."""
import squall


@squall.remote
def divide(x, y):
    return x / y


client = squall.Client()
# guide:begin
with client.new_session("errors") as session:
    session.execute("echo 'no such file' >&2; exit 3", name="grumpy")
    session.submit()
    try:
        session.wait_all()
    except squall.TaskFailed as e:
        print(e.task_name, e.exit_status, e.stderr_tail, end="")

with client.new_session("remote errors") as session:
    divide(1, 0)
    session.submit()
    try:
        session.wait_all()
    except squall.TaskFailed as e:
        print(e.task_name, "|", str(e).splitlines()[-1])  # the remote traceback's last line
# guide:end
