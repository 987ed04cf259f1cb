"""Python functions as tasks (docs/python.md): @squall.remote with numbers,
a numpy array, bytes and several outputs."""
import numpy as np

import squall


# guide:begin
@squall.remote
def scale(values, factor):
    return values * factor


@squall.remote(outputs=2)
def stats(values):
    return float(values.mean()), float(values.std())


@squall.remote(outputs="bytes")
def report(mean, std):
    return f"mean {mean:.2f}, std {std:.2f}\n"


client = squall.Client()
with client.new_session("remote") as session:
    data = session.pickled(np.arange(10.0))  # uploaded once, unpickled where used
    scaled = scale(data, 3)
    mean, std = stats(scaled).outputs
    text = report(mean, std)
    scaled.output.keep()
    text.output.keep()
    session.submit()
    print(scaled.output.value())  # a numpy array again
    print(text.output.fetch().decode(), end="")
# guide:end
