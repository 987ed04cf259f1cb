"""Actors from Python (docs/python.md): a counter whose increments run one
after another on its state, and a method with two outputs."""
import squall


# guide:begin
@squall.remote
class Counter:
    def __init__(self, start=0):
        self.value = start

    def increment(self, by=1):
        self.value += by
        return self.value

    @squall.method(outputs=2)
    def halves(self):
        return self.value // 2, self.value - self.value // 2


client = squall.Client()
with client.new_session("actors") as session:
    counter = Counter.remote(10)  # an actor: an instance living on a governor
    increments = [counter.increment.remote() for _ in range(5)]
    low, high = counter.halves.remote().outputs
    for task in increments:
        task.output.keep()
    high.keep()
    session.submit()
    print([task.output.value() for task in increments], "->", high.value())
    counter.kill()  # or leave it to the session's end
# guide:end
