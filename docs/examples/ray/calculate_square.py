"""A remote function mapped over a list, the results gathered in order."""

import squall as ray

ray.init()


@ray.remote
def calculate_square(x):
    return x * x


numbers = [1, 2, 3, 4, 5]
refs = [calculate_square.remote(n) for n in numbers]
results = ray.get(refs)
print(results)
print(sum(results))
