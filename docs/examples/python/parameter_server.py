"""A parameter server from Python (docs/python.md): one actor holds the
weights of a line y = w0 + w1 * x; in each round four remote functions
compute gradients on their shards of the data from the weights the actor
gave out, and push them to it (as docs/actors.md does in C++)."""
import numpy as np

import squall


# guide:begin
@squall.remote
class ParameterServer:
    def __init__(self, weights, rate):
        self.weights = np.array(weights, dtype=float)
        self.rate = rate

    def push(self, gradient):
        self.weights -= self.rate * gradient
        return self.weights

    def get(self):
        return self.weights


@squall.remote
def gradient(weights, points):
    """Of the mean squared error of the line over the points."""
    x, y = points[:, 0], points[:, 1]
    error = weights[0] + weights[1] * x - y
    return np.array([2 * error.mean(), 2 * (error * x).mean()])


client = squall.Client()
with client.new_session("parameter server") as session:
    x = np.arange(100) / 100
    shards = [session.pickled(shard) for shard in np.array_split(np.column_stack([x, 3 + 2 * x]), 4)]
    server = ParameterServer.remote([0, 0], rate=0.1)
    for _ in range(200):
        weights = server.get.remote()
        for shard in shards:
            server.push.remote(gradient(weights, shard))  # applied in the order made
    final = server.get.remote()
    final.output.keep()
    session.submit()
    w0, w1 = final.output.value()
    print(f"y = {w0:.2f} + {w1:.2f} x")
# guide:end
