# The server's session log stores the outcomes of one scheduling pass for
# one session as one of these messages (a row per pass, not per task: the
# log must not slow the server down). Not sent over the network.
@0xd8ad74477d8cd9ca;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("squall::wire");

struct LoggedOutcomes {
  tasks @0 :List(LoggedTask);
  objects @1 :List(LoggedObject);
  # Objects the client no longer keeps (unkeep).
  unkept @2 :List(UInt64);
}

struct LoggedTask {
  task @0 :UInt64;
  # TaskNode::State of the server.
  state @1 :Int32;
  attempt @2 :UInt32;
  governor @3 :Text;
  startTimeUs @4 :UInt64;
  durationUs @5 :UInt64;
  exitStatus @6 :Int32;
  error @7 :Text;
  stdoutTail @8 :Text;
  stderrTail @9 :Text;
}

struct LoggedObject {
  object @0 :UInt64;
  # ObjectNode::State of the server.
  state @1 :Int32;
  size @2 :UInt64;
  hash @3 :UInt64;
  # Names of the governors holding it.
  locations @4 :List(Text);
}
