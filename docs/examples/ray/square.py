"""The square of range(4), each in its own task."""

import squall as ray

ray.init()


@ray.remote
def square(x):
    return x * x


refs = [square.remote(i) for i in range(4)]
print(ray.get(refs))
