"""A cluster of its own (docs/python.md): squall.LocalCluster starts a
server and governors on this machine for a script or a notebook."""
import squall


# guide:begin
@squall.remote
def square(x):
    return x * x


with squall.LocalCluster(governors=2, cpus=2) as cluster:
    with squall.Client(cluster.address) as client, client.new_session() as session:
        squares = [square(i) for i in range(10)]
        for task in squares:
            task.output.keep()
        session.submit()
        print(sum(task.output.value() for task in squares))
# guide:end
