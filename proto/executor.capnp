# Governor <-> executor process (built on tasklib), over a Unix socket.
@0xfcedf66a2463cb51;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("squall::wire");

using Common = import "common.capnp";

# Bootstrapped by the governor's executor socket.
interface ExecutorRegistry {
  register @0 (version :UInt32, name :Text, functions :List(Text),
               executor :Executor) -> ();
}

interface Executor {
  # Inputs are files/dirs at `inputPaths`; outputs are written under
  # `outputDir` as files named by their index ("0", "1", ...).
  run @0 (task :Common.TaskSpec, inputPaths :List(Text), outputDir :Text)
      -> (result :Common.TaskResult);
}
