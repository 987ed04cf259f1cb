"""Rain's hello world for squall (docs/python.md): two constants joined by
a task on a governor."""
import squall

# guide:begin
client = squall.Client()  # $SQUALL_SERVER, else 127.0.0.1:7210
with client.new_session("hello") as session:
    task = session.concat([session.blob(b"Hello "), session.blob(b"world!")])
    task.output.keep()
    session.submit()
    print(task.output.fetch())
# guide:end
