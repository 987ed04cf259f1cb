# Shared types: ids, object and task specs, results. Every process links the
# code generated from this file through libsquall-proto.
@0x85fb6499b8bef10b;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("squall::wire");

# Bumped whenever a schema change makes old peers misbehave; every
# registration carries it and a mismatch is refused with a clear message.
# 2: live stream reads (DataService.read `live`); results confirmed durable
# by GovernorControl.resultsDurable; heartbeats both ways (ping).
# 3: Resources.cpusAsked and Assignment.sharesCpus (stream groups share a
# cpu unless their members ask for their own).
# Also 3: getState, getTasks and findSession answer for closed sessions the
# server keeps (SessionState.closed).
# Also 3: writable inputs and outputs in place (TaskInput.writable).
# 4: actors (TaskSpec.config actor and actorCall, FunctionInfo.actor,
# ClientService.killActor; docs/actors.md).
# 5: tasks that submit tasks (TaskSpec.parent, ClientService.reserveIds and
# cancelTask, GovernorUpstream.lendCpus, GovernorInfo.seceded;
# docs/nested.md); named actors (ActorConfig.name, ClientService.findActor).
# 6: ClientService.submitGraph, which clients use for every submit that fits
# one message. Also 6: submitGraph's waitFor (compatible both ways: a
# server without it answers with no `waited`, and the client then waits).
# Also 6: actor calls sent to the actor's governor directly
# (DataService.callActor, TaskResult.direct, GovernorInfo.direct,
# ClientService.locateActor and recordDirect; docs/actors.md "Calls that
# skip the server"). Compatible both ways: an older server or governor
# answers them UNIMPLEMENTED, and the client then sends its calls through
# the server.
# 7: Bootstrap.authenticate; a connection that has not authenticated reads
# a few small messages at a time (a governor authenticates before its
# registration, which may be large), and one refused is closed.
# Also 7: session references carry the server's incarnation (ClientService
# calls' `incarnation`, newSession's answer, SessionState.incarnation): a
# server on another session log refuses a stale reference instead of taking
# it for its own session of the same id.
# 8: big constants skip the server: DataService.upload, ClientService
# placeData, GovernorControl.claimUploads, ObjectSpec.placedOn.
const protocolVersion :UInt32 = 9;

# Ids are chosen by the client: `n` is unique within one session across both
# tasks and objects. The server checks them at submit.
struct Id {
  session @0 :UInt64;
  n @1 :UInt64;
}

enum ObjectKind {
  blob @0;
  dir @1;
  stream @2;
}

struct Resources {
  cpus @0 :UInt32 = 1;
  # Unused (requests below carry every resource but cpus).
  memoryMb @1 :UInt64;
  gpus @2 :UInt32;
  custom @3 :List(Custom);
  struct Custom {
    name @0 :Text;
    amount @1 :UInt64;
  }
  # The user asked for `cpus` instead of taking the default. Tasks joined by
  # streams (a pipe) that did not ask share one cpu between them, as a
  # shell's pipe does; those that asked hold what they asked for.
  cpusAsked @4 :Bool;
  # What a task needs besides cpus, each resource once (docs/resources.md).
  requests @5 :List(ResourceRequest);
}

# An amount of one resource pool. Amounts are fixed-point: 10000 is one
# item of an indexed pool (a GPU) or one unit of a sum pool (a byte of
# mem); 5000 gpus is half a GPU.
struct ResourceRequest {
  name @0 :Text;
  amount @1 :UInt64;
  # The whole pool (amount is ignored).
  all @2 :Bool;
}

# A pool a governor offers: indexed (items with ids) or a sum.
struct ResourcePool {
  name @0 :Text;
  indexed @1 :Bool;
  ids @2 :List(Text);
  # A sum pool's size, in the units above.
  total @3 :UInt64;
}

struct ObjectSpec {
  id @0 :Id;
  kind @1 :ObjectKind;
  label @2 :Text;
  contentType @3 :Text;
  # Kept objects survive until unkept or their session closes; others are
  # removed as soon as no unfinished task reads them.
  keep @4 :Bool;
  # A constant's bytes (may arrive in several chunks, see Submission).
  # Objects produced by a task have isConstant = false.
  isConstant @5 :Bool;
  data @6 :Data;
  # A constant whose bytes skipped the server: uploaded by the client
  # (DataService.upload) to the governor named here, which holds them
  # unclaimed until this submit is applied (GovernorControl.claimUploads).
  # `data` is then empty; `placedSize` and `placedHash` (xxh3-64) are what
  # the governor checked. A blob only. docs/decisions.md.
  placedOn @7 :Text;
  placedSize @8 :UInt64;
  placedHash @9 :UInt64;
}

struct TaskInput {
  object @0 :Id;
  label @1 :Text;
  # For execute: where the input appears in the sandbox (relative path).
  # A stream read live appears there as a named pipe (or, as the stdin
  # input, on the program's standard input).
  path @2 :Text;
  # For a stream read live: when this reader exits before the stream ends,
  # the producer then meets a broken pipe (SIGPIPE, or status 141 from a
  # shell). By default that is how pipes work (`producer | head`) and the
  # producer still finishes; set this to make it the producer's failure.
  earlyCloseIsError @3 :Bool;
  # For execute: the input is a private copy the program may change (a file
  # its owner may write, a tree it may change), never the object itself.
  # An output at or inside this input's path (in place: `sed -i f`, a tool
  # adding files to a directory) takes what the program left there; such an
  # output requires this flag (the client library sets it for you). Not for
  # a stream read live. Without it the input is read-only: see the guide
  # ("What a program may do to its inputs").
  writable @4 :Bool;
}

struct TaskSpec {
  id @0 :Id;
  # Free text; '/' groups tasks ("align/chr1").
  name @1 :Text;
  inputs @2 :List(TaskInput);
  outputs @3 :List(Id);
  resources @4 :Resources;
  # User attributes, JSON text, stored and shown, never interpreted.
  attributes @5 :Text;
  config :union {
    concat @6 :Void;
    sleep @7 :SleepConfig;
    execute @8 :ExecuteConfig;
    # Output 0 (a dir) holds input i (blob or dir) at inputs[i].path.
    makeDir @9 :Void;
    # Output 0 = the file (blob) or, when the path ends in '/', the
    # directory (dir) at this path inside input 0 (a dir).
    sliceDir @10 :Text;
    # Output 0 = the file (blob) / directory (dir) at this absolute path on
    # the governor; only under roots its operator allowed (--allow-path).
    load @11 :Text;
    loadDir @12 :Text;
    # Writes input 0 (blob or dir) to this absolute path on the governor,
    # under an allowed root. No outputs.
    store @13 :StoreConfig;
    # A function of an executor program (tasklib) the governor keeps warm.
    call @15 :CallConfig;
    # An actor: one instance of an actor type of an executor program, in a
    # process of its own on one governor, holding the task's resources for
    # its whole life. The task has no outputs; it runs until the actor is
    # killed (it then ends cancelled) or its session closes, or fails when
    # the actor cannot be started or died more than maxRestarts times. It
    # does not count among the tasks a wait for "every task" waits for.
    actor @16 :ActorConfig;
    # A method call on an actor (ActorCallConfig.actor, a task of type
    # actor): runs in the actor's process, on its resources (the call asks
    # for none), after every call on that actor submitted before it.
    actorCall @17 :ActorCallConfig;
  }
  policy @14 :TaskPolicy;
  # The task of the same session whose running function submitted this one
  # (its n), or 0 when a client did. Cancelling the parent, or its failing,
  # cancels it (docs/nested.md).
  parent @18 :UInt64;
}

struct CallConfig {
  # The task type executor/function, as governors announce it.
  executor @0 :Text;
  function @1 :Text;
  # Bytes handed to the function as its config.
  config @2 :Data;
}

# A function an executor offers (tasklib). An actor type is announced as
# one entry with `actor` set (its name is the type's, its outputs none),
# and each of its methods as an entry named "Type.method".
struct FunctionInfo {
  name @0 :Text;
  # Its outputs, in order: names when the function declared them, else
  # "0", "1", ... (then only their count means anything).
  outputs @1 :List(Text);
  # Whether the outputs were declared by name.
  named @2 :Bool;
  # An actor type (its constructor), not a function.
  actor @3 :Bool;
}

struct ActorConfig {
  # The executor and the actor type it registered ("stats" and "Counter"
  # for the task type stats/Counter).
  executor @0 :Text;
  type @1 :Text;
  # Bytes handed to the constructor as its config (with the task's inputs).
  config @2 :Data;
  # How often the governor starts the actor again (the constructor run
  # anew on the same inputs) after its process died; 0: never.
  maxRestarts @3 :UInt32;
  # How often a call that was running when the process died is run again
  # on the restarted actor before it fails; 0: it fails at once.
  maxCallRetries @4 :UInt32;
  # A named actor (empty: none): reached from other sessions by this name
  # (ClientService.findActor), unique among the server's live actors, and
  # it outlives its session: closing the session leaves the session open,
  # without its owner, until its named actors end (docs/actors.md).
  name @5 :Text;
}

struct ActorCallConfig {
  # The actor's task (a task of type actor in the same session).
  actor @0 :Id;
  # A method of the actor's type, as registered.
  method @1 :Text;
  # Bytes handed to the method as its config.
  config @2 :Data;
}

# An executor a governor keeps (--executor NAME=PROGRAM) and its functions.
struct ExecutorInfo {
  name @0 :Text;
  functions @1 :List(FunctionInfo);
}

struct StoreConfig {
  path @0 :Text;
  # Replace what is at `path` already (otherwise that is an error).
  overwrite @1 :Bool;
}

struct TaskPolicy {
  # Extra attempts after a failure (0: fail at the first).
  retries @0 :UInt32;
  # A failure does not fail the session; tasks that need the failed task's
  # outputs are skipped instead.
  allowFailure @1 :Bool;
  # The governor kills the task after this long (0: no limit).
  timeLimitMs @2 :UInt64;
  # How long the task is expected to run (0: unknown), a hint for the
  # scheduler's critical-path priority; never enforced.
  expectedMs @3 :UInt64;
  # What it asks (cpus, resources) may be more than any governor connected
  # now could ever give: it waits for one that can (a cluster that grows,
  # an autoscaler) instead of being refused at submit.
  waitForResources @4 :Bool;
}

struct SleepConfig {
  # Sleeps, then passes its first input through as its output (if any).
  milliseconds @0 :UInt64;
}

struct ExecuteConfig {
  # argv; when `shell` is set, args[0] is a line for /bin/sh -c.
  args @0 :List(Text);
  shell @1 :Bool;
  # Index into TaskSpec.inputs of the input fed on stdin; -1 for none.
  stdinInput @2 :Int32 = -1;
  # One per TaskSpec.outputs, same order.
  outputs @3 :List(OutputMapping);
  env @4 :List(EnvVar);

  struct OutputMapping {
    union {
      path @0 :Text;   # a file (or dir) the program writes in its sandbox
      stdout @1 :Void; # the program's standard output
    }
  }
  struct EnvVar {
    name @0 :Text;
    value @1 :Text;
  }
}

# What the server learns about an object when it finishes.
struct ObjectInfo {
  id @0 :Id;
  # Blob: its bytes. Dir: the sum of its regular files' sizes.
  size @1 :UInt64;
  # xxh3-64 of a blob's bytes; of a dir's sorted (path, kind, bytes) list.
  hash @2 :UInt64;
  # In a task's result: a small blob output's bytes, sent with it when
  # asked (Assignment.inlineOutputBytes), so that a client waiting for the
  # result needs no read from the governor. `inlined` says `data` holds
  # them (a blob may be empty).
  data @3 :Data;
  inlined @4 :Bool;
}

# A task's outcome as a governor reports it.
struct TaskResult {
  id @0 :Id;
  ok @1 :Bool;
  # Human-readable reason when !ok; carries exit status and stderr tail.
  error @2 :Text;
  # Process exit status; -1 when not a process or killed by a signal.
  exitStatus @3 :Int32 = -1;
  signal @4 :Int32;
  outputs @5 :List(ObjectInfo);
  startTimeUs @6 :UInt64;
  durationUs @7 :UInt64;
  # Bounded tail of the program's stderr.
  stderrTail @8 :Text;
  # Bounded tail of the program's stdout (when stdout is not an output).
  stdoutTail @9 :Text;
  # The task was killed for exceeding its time limit.
  timedOut @10 :Bool;
  # It never ran: an input could not be fetched because its source went
  # away (a governor lost as the task was placed). Not the task's failure:
  # the server places it again once it knows of the loss.
  inputUnavailable @11 :Bool;
  # Set for an actor call a client sent to this governor directly
  # (DataService.callActor): the call's graph, as the client sent it, for
  # the server to record (it may not have heard of the call yet).
  direct @12 :Graph;
}

# A piece of a session's graph: what one Submission.add() carries.
struct Graph {
  objects @0 :List(ObjectSpec);
  tasks @1 :List(TaskSpec);
}

# Why a session (or a wait) failed.
struct Failure {
  message @0 :Text;
  # The task whose failure caused it (n within session), or 0 if none.
  task @1 :UInt64;
  taskName @2 :Text;
  exitStatus @3 :Int32 = -1;
  stderrTail @4 :Text;
}
