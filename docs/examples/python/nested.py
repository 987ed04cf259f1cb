"""Tasks that submit tasks (docs/nested.md): a @squall.remote function that
calls itself; the inner calls are the task's children, in its session."""
import squall


# guide:begin
@squall.remote
def fib(n):
    if n < 2:
        return n
    a, b = fib.remote(n - 1), fib.remote(n - 2)  # inside a task: into its own session
    a.output.keep()
    b.output.keep()
    squall.current_session().submit()
    return a.output.value() + b.output.value()  # while it waits, its cpu runs others


client = squall.Client()
with client.new_session("nested") as session:
    top = fib(10)
    top.output.keep()
    session.submit()
    print(top.output.value())
    session.wait_all()  # the calls fib made are tasks of this session too
    finished = session.state().finished
    print("tasks:", finished)  # fib(10) and the 176 calls under it
# guide:end
