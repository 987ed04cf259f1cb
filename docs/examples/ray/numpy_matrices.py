"""numpy arrays as tasks' results and arguments: two random matrices made
by tasks and multiplied by a third without passing through the driver;
zeros and an elementwise multiply of a put array."""

import numpy as np

import squall as ray

ray.init()


@ray.remote
def create_matrix(size):
    return np.random.normal(size=size)


@ray.remote
def multiply_matrices(x, y):
    return np.dot(x, y)


@ray.remote
def zeros(shape):
    return np.zeros(shape)


@ray.remote
def multiply(x, y):
    return np.multiply(x, y)


x_ref = create_matrix.remote([1000, 1000])
y_ref = create_matrix.remote([1000, 1000])
z_ref = multiply_matrices.remote(x_ref, y_ref)
print(ray.get(z_ref).shape)

empty = zeros.remote((2, 3))
print(ray.get(empty).shape, ray.get(empty).sum())

ones = ray.put(np.ones((10, 10)))
print(ray.get(multiply.remote(ones, 2.5)).sum())
