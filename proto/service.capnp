# The control plane: client <-> server and governor <-> server.
@0xc297aa071150fb57;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("squall::wire");

using Common = import "common.capnp";
using Id = Common.Id;
using ObjectSpec = Common.ObjectSpec;
using TaskSpec = Common.TaskSpec;
using TaskResult = Common.TaskResult;
using Failure = Common.Failure;
using ObjectKind = Common.ObjectKind;
using Resources = Common.Resources;
using ObjectInfo = Common.ObjectInfo;

# What a connection to the server's port bootstraps to. Both calls check the
# protocol version and the shared token before anything else.
interface Bootstrap {
  registerClient @0 (version :UInt32, token :Text) -> (service :ClientService);
  registerGovernor @1 (version :UInt32, token :Text, info :GovernorInfo,
                       control :GovernorControl)
      -> (upstream :GovernorUpstream, governorId :UInt32);
  # Shows the token and nothing else: a connection that has not
  # authenticated has its messages read a few at a time and small (16 KiB),
  # so a governor whose registration is larger (the inventory it sends
  # back after a server restart) calls this first, pipelined before it.
  # A refusal closes the connection once answered.
  # Answers the server's incarnation (SessionLog::incarnation): a governor
  # that was registered with a server of another one (started again on
  # another log) drops every task, result and object it holds before it
  # registers, since their ids name sessions this server never had.
  authenticate @2 (version :UInt32, token :Text) -> (incarnation :UInt64);
}

# ---------------------------------------------------------------- clients

interface ClientService {
  # Every call that names a session carries the `incarnation` of the server
  # that gave out its id (newSession's, or SessionState.incarnation from
  # getState): a server started again on another session log (or another
  # server at the same address) numbers its sessions from 1 again, and a
  # reference from another incarnation is refused (FAILED, naming both)
  # before its id is looked at. Only getState takes 0 there: the session
  # with that id now (attaching by a typed id; the answer says which
  # incarnation to use from then on). docs/recovery.md.
  #
  # A persistent session outlives this connection (anyone with the token
  # may re-attach to it by id); others are closed when their client goes.
  newSession @0 (name :Text, persistent :Bool) -> (session :UInt64, incarnation :UInt64);
  # Closing removes every object of the session (kept ones too) and cancels
  # its running tasks. Answered once what the server keeps of it is
  # durable; closing a session closed already (and kept) does nothing.
  closeSession @1 (session :UInt64, incarnation :UInt64);

  # A graph is sent through a Submission so that it can be split over as
  # many messages as needed: nothing is applied until commit() validates the
  # whole of it.
  submit @2 (session :UInt64, incarnation :UInt64) -> (submission :Submission);

  # Completes when every named task/object is finished (empty list: every
  # task submitted so far), or as soon as the session fails.
  wait @3 (session :UInt64, ids :List(UInt64), incarnation :UInt64) -> (result :WaitResult);
  # Completes when at least one of the named ids is finished (or the
  # session fails); returns all that are finished at that moment.
  waitSome @4 (session :UInt64, ids :List(UInt64), incarnation :UInt64)
      -> (result :WaitResult, finished :List(UInt64));

  # The bytes of a finished, kept object: small ones inline, others as the
  # address of a governor's data service that holds them.
  fetch @5 (session :UInt64, object :UInt64, incarnation :UInt64) -> (location :ObjectLocation);

  unkeep @6 (session :UInt64, objects :List(UInt64), incarnation :UInt64);
  # Cancels every unfinished task of the session; the session fails.
  cancel @7 (session :UInt64, incarnation :UInt64);
  # getState and getTasks also answer for a closed session the server
  # still keeps (see the status page's history, docs/status-page.md):
  # its state, counts and failure, and the tasks kept of it.
  getState @8 (session :UInt64, incarnation :UInt64) -> (state :SessionState);
  listGovernors @9 () -> (governors :List(GovernorStatus));
  # The newest session with this name that is not closed; without one,
  # the newest closed one the server keeps.
  findSession @10 (name :Text) -> (session :UInt64);
  # Details of tasks: the named ones, or (ids empty) up to `limit` of the
  # session's tasks in the states asked for (none asked: all states),
  # failures first.
  getTasks @11 (session :UInt64, ids :List(UInt64), states :List(TaskInfo.State),
                limit :UInt32, incarnation :UInt64) -> (tasks :List(TaskInfo));
  listSessions @12 () -> (sessions :List(SessionState));
  # Details of the session's objects with these ids (unknown ids throw).
  getObjects @13 (session :UInt64, ids :List(UInt64), incarnation :UInt64) -> (objects :List(ObjectStatus));
  # This connection owns the session from now: it is closed when this
  # connection goes (unless persistent). A client that lost its connection
  # (or whose server restarted) re-attaches its sessions with it.
  adoptSession @14 (session :UInt64, incarnation :UInt64);
  # Why a task of an open session is where it is (`squall explain`): for
  # one not running yet, what it waits for (inputs, resources and who holds
  # them, room on governors, its place in the queue); for one that ended,
  # how. `summary` is one line, `details` the facts behind it.
  explain @15 (session :UInt64, task :UInt64, incarnation :UInt64) -> (summary :Text, details :List(Text));
  # Ends an actor (a task of type actor, docs/actors.md): its process is
  # stopped, its task ends cancelled (not a failure), and its calls not yet
  # run fail saying it was killed. Killing an actor that has ended does
  # nothing.
  killActor @16 (session :UInt64, actor :UInt64, incarnation :UInt64);
  # `count` ids of the session that nobody else is given: [first, first +
  # count). A second submitter of a session (a client that attached to it,
  # a running function submitting children) numbers its tasks and objects
  # from such a block; the session's creator starts with [1, 2^20). Durable
  # on return, so a restarted server never hands out a block twice.
  reserveIds @17 (session :UInt64, count :UInt64, incarnation :UInt64) -> (first :UInt64);
  # Cancels one task, and every task it submitted (TaskSpec.parent), theirs
  # too: each ends cancelled (not a failure: the session goes on), tasks
  # reading what they would have made are skipped. A task that has ended
  # keeps its outcome; its children still running are cancelled.
  cancelTask @18 (session :UInt64, task :UInt64, incarnation :UInt64);
  # The live actor named `name` (ActorConfig.name): its session, its task
  # there, and its type ("executor/Type"). Throws naming the name when no
  # live actor has it.
  findActor @19 (name :Text) -> (session :UInt64, actor :UInt64, type :Text);
  # A graph small enough for one message, in one call: what submit(), one
  # Submission.add() and commit() do, with no Submission to make, call
  # twice more and release (a one-call submit, such as an actor call made
  # and waited for, cost the server three calls and their messages).
  # With `waitFor` (ids of tasks and objects, of this session), it also
  # waits for them once applied, as wait() does, and answers only then, with
  # `waited` set: a call made and waited for (Session::submitAndWait) is one
  # round trip, not two. An error of the submit itself is thrown as before
  # (nothing applied); `waited` says how the wait ended. A server that does
  # not know `waitFor` answers at once without `waited` (the client then
  # waits as before).
  submitGraph @20 (session :UInt64, objects :List(ObjectSpec), tasks :List(TaskSpec),
                   waitFor :List(UInt64), incarnation :UInt64)
      -> (tasks :UInt64, objects :UInt64, waited :WaitResult);
  # Where the actor (task `actor` of the session) runs: the data address of
  # its governor, where its calls may be sent directly
  # (DataService.callActor), and its type's methods there (a client checks
  # a call against them as a submit would). Empty while it is not placed
  # (or has ended).
  locateActor @21 (session :UInt64, actor :UInt64, incarnation :UInt64) -> (address :Text, methods :List(ActorMethod));
  # Records actor calls the client sent to the governor at `address`
  # directly (one call per graph, as sent), before a request of the client
  # names them (a submit reading their outputs, a fetch, a cancel): those
  # the server has not heard of yet are recorded as running there, their
  # results come in that governor's updates. With no such governor (it is
  # gone, or `address` is empty: the governor refused them, or the
  # connection to it broke before they were answered), they are placed as
  # if submitted now. Those it knows already are left as they are.
  # Durable on return; throws as a submit does when one is invalid
  # (nothing recorded).
  recordDirect @22 (session :UInt64, address :Text, calls :List(Common.Graph),
                   incarnation :UInt64) -> ();
  # Where to upload constants of these sizes (DataService.upload), one
  # place each: governors taken in turn, so that big constants spread. A
  # submit then names the governor (ObjectSpec.placedOn). Fails with no
  # governor connected.
  placeData @23 (session :UInt64, sizes :List(UInt64), incarnation :UInt64) -> (places :List(DataPlace));
  # What the session's functions and actors printed (docs/ray.md,
  # "Output"), from `since` (0: the oldest the server still holds): the
  # chunks, the `since` of the next call, and how many chunks before them
  # the server no longer holds (it keeps a bounded tail of each
  # session's). With `wait`, waits (up to some seconds) while nothing new
  # has come.
  watchOutput @24 (session :UInt64, since :UInt64, wait :Bool, incarnation :UInt64)
      -> (chunks :List(OutputChunk), next :UInt64, dropped :UInt64);
}

# A piece of what a task's process printed: whole lines mostly (a partial
# one when it flushed one, or stopped), of its standard output or error.
# `label` names the task as its output is prefixed ("square pid=123"),
# `governor` where it ran (filled by the server).
struct OutputChunk {
  task @0 :UInt64;
  stderr @1 :Bool;
  label @2 :Text;
  governor @3 :Text;
  text @4 :Text;
}

struct DataPlace {
  # The governor's name (for ObjectSpec.placedOn) and its data address.
  governor @0 :Text;
  address @1 :Text;
}

# A method of an actor type, and the count of outputs it makes.
struct ActorMethod {
  name @0 :Text;
  outputs @1 :UInt32;
}

# What the server knows of a data object.
struct ObjectStatus {
  id @0 :UInt64;
  kind @1 :Common.ObjectKind;
  label @2 :Text;
  contentType @3 :Text;
  keep @4 :Bool;
  state @5 :State;
  # Filled once finished: blob bytes / a dir's regular files' total, and
  # the xxh3-64 content hash (see Common.ObjectInfo).
  size @6 :UInt64;
  hash @7 :UInt64;
  # The task that makes it; 0 for a constant.
  producer @8 :UInt64;
  # Names of the governors holding a copy.
  locations @9 :List(Text);

  enum State {
    unfinished @0;
    finished @1;
    removed @2;
    # Never made: its producer failed (allowed to) or was skipped.
    failed @3;
  }
}

struct TaskInfo {
  id @0 :UInt64;
  name @1 :Text;
  state @2 :State;
  governor @3 :Text;
  startTimeUs @4 :UInt64;
  durationUs @5 :UInt64;
  exitStatus @6 :Int32 = -1;
  error @7 :Text;
  stdoutTail @8 :Text;
  stderrTail @9 :Text;
  # 1 for the first run; more after retries.
  attempt @10 :UInt32;
  attributes @11 :Text;
  outputs @12 :List(ObjectStatus);
  type @13 :Text;
  # Input object ids, in order.
  inputs @14 :List(UInt64);

  enum State {
    waiting @0;
    ready @1;
    running @2;
    finished @3;
    failed @4;
    cancelled @5;
    # Not run: an input's producer failed and was allowed to.
    skipped @6;
  }
}

interface Submission {
  add @0 (objects :List(ObjectSpec), tasks :List(TaskSpec)) -> stream;
  # Appends bytes to a constant declared in an earlier add().
  appendData @1 (object :UInt64, data :Data) -> stream;
  # Validates and applies the whole graph atomically; throws a FAILED
  # exception naming the problem if it is invalid (nothing applied).
  commit @2 () -> (tasks :UInt64, objects :UInt64);
}

struct WaitResult {
  union {
    ok @0 :Void;
    failed @1 :Failure;
  }
}

struct ObjectLocation {
  id @0 :Id;
  kind @1 :ObjectKind;
  size @2 :UInt64;
  union {
    data @3 :Data;
    governor @4 :Text;   # host:port of a DataService holding the object
    failed @5 :Failure;  # never made: its task failed (allowed to) or was skipped
  }
}

struct SessionState {
  id @0 :UInt64;
  name @1 :Text;
  state @2 :State;
  failure @3 :Failure;
  tasksWaiting @4 :UInt64;
  tasksReady @5 :UInt64;
  tasksRunning @6 :UInt64;
  tasksFinished @7 :UInt64;
  tasksFailed @8 :UInt64;
  tasksSkipped @9 :UInt64;
  # Lowest id never used in the session: where an attached client's new ids
  # start.
  nextId @10 :UInt64;
  # Closed (the server keeps what it shows of it). `state` is then failed
  # when it had failed before it was closed, else closed.
  closed @11 :Bool;
  # The server's incarnation (see ClientService): what every later call
  # naming this session carries.
  incarnation @12 :UInt64;
  enum State {
    open @0;
    failed @1;
    closed @2;
  }
}

struct GovernorStatus {
  id @0 :UInt32;
  name @1 :Text;
  dataAddress @2 :Text;
  cpus @3 :UInt32;
  cpusUsed @4 :UInt32;
  tasksAssigned @5 :UInt32;
  objects @6 :UInt64;
  # The functions its executors offer ("executor/function"), sorted.
  functions @7 :List(Text);
  # Its resources besides cpus (docs/resources.md), in RESOURCE_UNIT
  # units: all it has, and what the tasks assigned to it hold.
  resources @8 :List(ResourceStatus);
}

struct ResourceStatus {
  name @0 :Text;
  capacity @1 :UInt64;
  used @2 :UInt64;
}

# -------------------------------------------------------------- governors

struct GovernorInfo {
  name @0 :Text;
  # Where its DataService listens (host:port), for governors and clients.
  dataAddress @1 :Text;
  resources @2 :Resources;
  # Objects it still holds (after a server restart or a lost connection).
  inventory @3 :List(ObjectInfo);
  # Tasks it holds: queued, running, or finished with results the server
  # has not acknowledged yet (they follow in updates).
  tasks @4 :List(Id);
  # The executors it keeps warm and their functions (tasklib): call tasks
  # are placed only where their function is.
  executors @5 :List(Common.ExecutorInfo);
  # Its resource pools besides cpus (resources.cpus): detected and given
  # with --resource.
  pools @6 :List(Common.ResourcePool);
  # Of `tasks`, those running functions that gave their cpus back while
  # they wait for tasks they submitted (GovernorUpstream.lendCpus).
  seceded @7 :List(Id);
  # Actor calls clients sent it directly (DataService.callActor) whose
  # results are not durable at the server yet, and their outputs: the
  # server may not know them (they are recorded from the results), so it
  # neither cancels nor removes them.
  direct @8 :List(Id);
  # The server incarnation this governor was registered with before, 0 the
  # first time. A server of another one takes none of the governor's tasks
  # and objects (the governor drops them: Bootstrap.authenticate).
  incarnation @9 :UInt64;
}

# Server -> governor. Calls are batched: one per scheduling pass.
interface GovernorControl {
  assign @0 (tasks :List(Assignment), constants :List(ConstantData)) -> ();
  removeObjects @1 (objects :List(Id)) -> ();
  # Kills the tasks (process groups) and reports each as failed "cancelled".
  # `unknown`: those it does not have (ended already, or never reached it:
  # a direct call a client recorded as sent here), which it will not
  # report; the server frees their places. An older governor answers none.
  cancelTasks @2 (tasks :List(Id)) -> (unknown :List(Id));
  # The results of the governor's updates numbered up to `through` are in
  # the server's session log: the governor may forget them.
  resultsDurable @3 (through :UInt64) -> ();
  # The server's heartbeat: a governor that does not answer within the
  # server's --governor-timeout is given up (its work is done elsewhere).
  # The answer says what its object store holds (status page, /metrics).
  ping @4 () -> (store :StoreStats);
  # Takes back tasks it has not started (queued, or fetching their inputs),
  # so that the server can place them on a governor with free capacity
  # (work stealing). `retracted`: those it dropped; it never reports them.
  # The others were started (or are unknown) and run as assigned.
  retract @5 (tasks :List(Id)) -> (retracted :List(Id));
  # Fetches finished objects ahead of the task that will read them here
  # (docs/scheduling.md, prefetching), as it would fetch a task's inputs;
  # `held`: those it holds now. One it cannot fetch is left out (logged).
  prefetch @6 (objects :List(Prefetch)) -> (held :List(Id));
  # A submit naming these uploads (ObjectSpec.placedOn) was applied: they
  # become objects of the store. `missing`: those it does not hold
  # finished (it started over, or their time ran out).
  claimUploads @7 (objects :List(Id)) -> (missing :List(Id));
}

struct Prefetch {
  id @0 :Id;
  kind @1 :ObjectKind;
  size @2 :UInt64;
  # Data service addresses of governors holding it.
  sources @3 :List(Text);
}

struct Assignment {
  task @0 :TaskSpec;
  # Parallel to task.inputs.
  inputs @1 :List(InputLocation);
  # Kinds of task.outputs, same order.
  outputKinds @2 :List(ObjectKind);
  # 1 for the first run, counting up with retries (SQUALL_ATTEMPT for
  # programs).
  attempt @3 :UInt32 = 1;
  # Parallel to task.outputs; for stream outputs only (0 / false otherwise):
  # how many readers will attach to read it live (the bytes start to flow
  # once all of them have: each gets every byte), and whether its bytes are
  # also written to the store as they flow (it is kept, or read by a task
  # after it ends) so that it is held like a blob once it has ended.
  liveReaders @4 :List(UInt32);
  persist @5 :List(Bool);
  # A member of a stream group that did not ask for cpus and runs on its
  # group's cpu: it holds none of the governor's cpus of its own.
  sharesCpus @6 :Bool;
  # The server's order (its b-level: the longest expected path from the
  # task to a sink). A governor starts its ready tasks highest first, in
  # arrival order among equals, so a task on the critical path that became
  # ready late does not wait behind a queue of side work.
  priority @7 :Float64;
  # Some output is kept (a client may fetch it): blob outputs of at most
  # this many bytes in all go with the result (ObjectInfo.data), so that a
  # fetch is answered without a read from the governor; 0: none.
  inlineOutputBytes @8 :UInt32;
}

struct InputLocation {
  kind @0 :ObjectKind;
  size @1 :UInt64;
  # Empty when the governor holds it already (or it comes in `constants` of
  # the same call); otherwise data service addresses of governors holding it.
  sources @2 :List(Text);
  # A stream read while its producer runs (kind = stream). `sources` is then
  # empty when the producer runs on this governor, else the one data address
  # of the producer's governor, whose DataService.read gives the bytes as
  # they come. A stream that has ended and was persisted is a plain input
  # (live = false, kind = blob).
  live @3 :Bool;
}

struct ConstantData {
  id @0 :Id;
  kind @1 :ObjectKind;
  # A dir's data is a tar archive (as fetch gives it), unpacked by the
  # governor with the same path rules as task outputs.
  data @2 :Data;
}

# Governor -> server. Results are batched: a governor sends the next batch
# when the previous one is acknowledged.
interface GovernorUpstream {
  # Returns once the results are applied. `durable`: they are in the
  # server's session log already (or it keeps none); otherwise the server
  # calls GovernorControl.resultsDurable with this update's `number` (or a
  # later one) once they are. Until then the governor keeps them and sends
  # them again if it has to register again (a server crash), so that it
  # forgets only what survives one. Numbers increase for the governor's
  # lifetime.
  # `ranDry`: since the last update, a task's end left cpus of the
  # governor free with no task ready to take them (the server may queue
  # more tasks there; docs/scheduling.md "Queue depth").
  update @0 (results :List(TaskResult), number :UInt64, ranDry :Bool) -> (durable :Bool);
  # The governor's heartbeat. Both calls fail DISCONNECTED once the server
  # has given the governor up: it must register again.
  ping @1 () -> ();
  # A running task (a function waiting for the tasks it submitted) gave its
  # cpus back (`lent`) so that other tasks run on them meanwhile, or took
  # them again (docs/nested.md).
  lendCpus @2 (task :Id, lent :Bool) -> ();
  # What tasks' processes printed, for their sessions' watchers
  # (ClientService.watchOutput); `dropped`: chunks the governor dropped
  # since its last call, being too far behind.
  output @3 (chunks :List(TaskOutput), dropped :UInt64) -> ();
  # A call a client sent this governor directly (DataService.callActor)
  # whose function submits tasks of its own: recorded now, as it would be
  # with its result (TaskResult.direct). Fails as that record would.
  recordDirect @4 (call :Common.Graph) -> ();
}

# A governor's OutputChunk: its task's full id; the server adds its name.
struct TaskOutput {
  task @0 :Id;
  stderr @1 :Bool;
  label @2 :Text;
  text @3 :Text;
}

# What a governor's object store holds (GovernorControl.ping).
struct StoreStats {
  objects @0 :UInt64;
  # Its memory tier (--store-memory): bytes and objects held there, its
  # capacity (0: no tier), and what was spilled to disk since it started.
  memoryBytes @1 :UInt64;
  memoryCapacity @2 :UInt64;
  memoryObjects @3 :UInt64;
  spilledBytes @4 :UInt64;
  spilledObjects @5 :UInt64;
  # Files of removed objects it keeps in memory for new ones to be written
  # into (store/warm-files.h): bytes, within the tier's capacity.
  warmBytes @6 :UInt64;
}
