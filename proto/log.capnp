# The server's session log stores the outcomes of one scheduling pass for
# one session as one of these messages (a row per pass, not per task: the
# log must not slow the server down). Not sent over the network.
@0xd8ad74477d8cd9ca;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("squall::wire");

using Common = import "common.capnp";

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

# A closed session as the server keeps it (server/src/session-history.h):
# what the status page and `squall status` show of it once it is gone. One
# per closed session, bounded in size (the bounds are in that header).
struct KeptSession {
  id @0 :UInt64;
  name @1 :Text;
  # It had failed before it was closed; else it finished, or was closed
  # with unfinished tasks (counted cancelled).
  failed @2 :Bool;
  closedAtMs @3 :UInt64;
  # Tasks by TaskNode::State of the server (7 entries).
  counts @4 :List(UInt64);
  failure @5 :Common.Failure;
  # Its tasks, all of them up to a bound, else the failures and the
  # longest-running ones; failures first, then by id.
  tasks @6 :List(KeptTask);
  # The status page's views of it when it closed, as JSON text, exactly as
  # /api/sessions/N/graph and /api/sessions/N/timeline answered them (the
  # page draws a closed session with the code it draws an open one with).
  graph @7 :Text;
  timeline @8 :Text;
  # Session::changes and Session::nextId when it closed.
  changes @9 :UInt64;
  nextId @10 :UInt64;
}

struct KeptTask {
  # The stdout and stderr tails only for the first failures.
  outcome @0 :LoggedTask;
  name @1 :Text;
  # The task's type name (proto/spec-names.h).
  type @2 :Text;
}
