"""A counter actor: incr called ten times without waiting, then get sees
all ten, since one handle's calls run in the order they were made."""

import squall as ray

ray.init()


@ray.remote
class Counter:
    def __init__(self):
        self.value = 0

    def incr(self):
        self.value += 1
        return self.value

    def get(self):
        return self.value


counter = Counter.remote()
for _ in range(10):
    counter.incr.remote()
print(ray.get(counter.get.remote()))
print(ray.get([counter.incr.remote() for _ in range(3)]))
