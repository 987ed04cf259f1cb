"""A big array put in the object store once and passed by reference."""

import numpy as np

import squall as ray

ray.init()


@ray.remote
def sum_matrix(matrix):
    return np.sum(matrix)


matrix_ref = ray.put(np.ones((1000, 1000)))
print(ray.get(sum_matrix.remote(matrix_ref)))
print(ray.get(sum_matrix.remote(np.ones((100, 100)))))
ray.shutdown()
