# Governor <-> executor process (a program built on tasklib/): Cap'n Proto
# two-party RPC over a Unix socket the governor makes (socketpair) and hands
# to the executor as a descriptor (--squall-executor-fd N). The executor
# serves one Executor as its bootstrap. The governor may send a call while
# another runs (calls of short functions queue on a busy process); the
# executor runs them one at a time in the order received. The socket
# carries file descriptors too (SCM_RIGHTS): a live stream reaches a
# function as one end of a pipe. See docs/tasklib.md.
@0xfcedf66a2463cb51;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("squall::wire");

using Common = import "common.capnp";

# Raised when the protocol changes incompatibly; describe() reports it.
# 4: actors (construct, FunctionInfo.actor, methods called as "Type.method").
# 5: call context (CallContext, the governor's ExecutorHost): functions that
# submit tasks (docs/nested.md).
# 6: an actor's method calls go over a calls channel of their own
# (openCalls, MethodCall, MethodAnswer), not through call().
# 7: queued calls are taken back through a table of call states both sides
# map (callStates, call's `state`), not by a message (drop) that a process
# busy in a function read only after running the calls it named.
const executorProtocolVersion :UInt32 = 7;

# Who a call runs for: the task's session and its n there. A function that
# submits tasks submits them into that session as the task's children.
struct CallContext {
  session @0 :UInt64;
  task @1 :UInt64;
  # NAME=VALUE that the call's resources give it (CUDA_VISIBLE_DEVICES,
  # OMP_NUM_THREADS, SQUALL_RESOURCE_*: docs/resources.md), as a program
  # task's environment has them: the executor sets them while the call
  # runs. Empty for an actor's calls (its process has its actor's).
  env @2 :List(Text);
}

# The governor's side, handed to each executor process once (Executor.host).
interface ExecutorHost {
  # The function running for the call of `context` waits for tasks it
  # submitted: the cpus its process holds go back to the governor (and the
  # server) meanwhile, and calls queued behind it go elsewhere. Answered at
  # once. (A method of an actor keeps its actor's resources: nothing is
  # given back.)
  secede @0 (context :CallContext) -> ();
  # It is done waiting: answered once it holds cpus again (it goes before
  # tasks that have not started).
  rejoin @1 (context :CallContext) -> ();
  # The function running for the call of `context` is about to submit
  # tasks of its own: answered once the server has recorded the call (one
  # a client sent this governor directly, docs/actors.md, is otherwise
  # recorded only with its result, and the server takes no children of a
  # task it does not know). At once for any other call.
  record @2 (context :CallContext) -> ();
}

# One end of a pipe, travelling as a file descriptor attached to the
# message (capnp's fd passing: the capability's getFd()). The holder
# dup()s it; the capability is released with the call's params.
interface PipeEnd {}

struct CallInput {
  kind @0 :Common.ObjectKind;
  size @1 :UInt64;
  # The input's label in the task spec (may be empty).
  label @2 :Text;
  union {
    # A file (blob) or directory (dir) of the governor's store: read-only,
    # never to be changed; the executor maps a blob instead of copying it.
    path @3 :Text;
    # A small blob the governor holds in memory, carried in the call.
    data @4 :Data;
    # A live stream (kind stream): the read end of a pipe the governor
    # feeds while the stream's producer runs; end of file is the stream's
    # end. (A stream that has ended and was kept comes as a blob path.)
    stream @5 :PipeEnd;
  }
}

# A file of the governor's store lent to one call (governor/src/store/
# warm-files.h): its memory is in place already, so writing a big output
# into it is several times faster than into a new file. An output of known
# size may take it: renamed to the output's path in outputDir (the same
# file system), cut or grown to that size, and every byte written (it holds
# old bytes; opened without O_TRUNC, which would free its pages). Not
# taken, it goes back to the governor after the call.
struct WarmFile {
  path @0 :Text;
  size @1 :UInt64;
}

struct CallOutput {
  union {
    # A file (blob) or directory (dir) the function left under the call's
    # outputDir: this name inside it. The governor adopts it by rename.
    file @0 :Text;
    # A small blob carried back in the answer.
    data @1 :Data;
    # A stream output: its bytes went through its pipe, now closed.
    stream @2 :Void;
  }
}

# An actor's method call over its process's calls channel (openCalls): a
# plain Cap'n Proto message, not an RPC, with what call() takes (an actor's
# methods read and write no live streams, so nothing here is a
# capability). `serial` is the governor's count of the calls it sent on
# the channel, from 1; the answer repeats it.
struct MethodCall {
  serial @0 :UInt64;
  # "Type.method".
  function @1 :Text;
  config @2 :Data;
  inputs @3 :List(CallInput);
  outputKinds @4 :List(Common.ObjectKind);
  outputDir @5 :Text;
  context @6 :CallContext;
  warmFiles @7 :List(WarmFile);
}

# The answer to a MethodCall, in the order the calls came (for an actor
# that allows concurrent calls: as they end): what call() answers, or,
# when `failed`, the method's error (what it threw).
struct MethodAnswer {
  serial @0 :UInt64;
  outputs @1 :List(CallOutput);
  runUs @2 :UInt64;
  failed @3 :Bool;
  error @4 :Text;
}

interface Executor {
  # Who it is and what it offers.
  describe @0 () -> (version :UInt32, name :Text, functions :List(Common.FunctionInfo));

  # Runs `function` once on `inputs` with `config`, making one output of
  # each of `outputKinds` (blob, dir or stream; as many as the function
  # declares). `outputStreams` holds the write end of a pipe for each
  # stream output, in the order of the stream entries of `outputKinds`;
  # the governor reads it while the function runs.
  # `outputDir` is a path in the governor's store (the same file system, so
  # outputs are adopted by rename, not copied) that does not exist yet: the
  # executor makes it when an output needs it, and only then (an answer
  # without a file output leaves no directory behind). Answers with one
  # CallOutput per output, and how long the function ran (microseconds,
  # the function alone: what the governor judges a function short by). A
  # function that throws fails the call with its message.
  call @1 (function :Text, config :Data, inputs :List(CallInput),
           outputKinds :List(Common.ObjectKind), outputDir :Text,
           outputStreams :List(PipeEnd), context :CallContext, state :UInt32,
           warmFiles :List(WarmFile))
      -> (outputs :List(CallOutput), runUs :UInt64);

  # Makes this process the home of one actor: runs the constructor of the
  # actor type `type` on `inputs` and `config`. Afterwards `call` also
  # takes the type's methods, as "Type.method", run on that instance. A
  # process holds at most one actor, for its whole life (the governor gives
  # each actor a process of its own). A constructor that throws fails the
  # call with its message. `concurrency`: how many of its method calls may
  # be under way at once (0 or 1: one after another, each answered before
  # the next starts); above 1 they start in the order they came and their
  # answers come as they end, in any order (tasklib's
  # Call::allowConcurrentCalls).
  construct @2 (type :Text, config :Data, inputs :List(CallInput), context :CallContext)
      -> (runUs :UInt64, concurrency :UInt32);

  # The governor's side for this process's calls; sent once, before the
  # first call.
  host @3 (host :ExecutorHost);

  # The table of call states (a memfd of 1024 32-bit states, sealed at its
  # size; proto/include/squall/proto/call-states.h), sent once after host()
  # and before the first call. A call's `state` (1..1024; 0: none) names its
  # entry, QUEUED when sent. The governor takes back a call queued behind
  # one that overran or waits for tasks it submitted by moving it to DROPPED;
  # the executor moves a call to STARTED just before running it, and answers
  # one it finds DROPPED at once, without running it (it runs elsewhere).
  callStates @4 (table :PipeEnd);

  # The calls channel of the actor this process holds (or will: sent
  # beside construct): one end of a Unix socket the governor made, over
  # which it writes MethodCall messages (standard framing, back to back)
  # and reads one MethodAnswer for each, in order. The methods run in the
  # order their calls came, after the constructor, one at a time; each
  # answer is written before the next method starts, so a process that
  # dies in a method takes no answer but that one's (the governor reads
  # the answers written before it died, then the end of the channel).
  # An actor whose constructor allowed concurrent calls (construct's
  # `concurrency`) starts them in order but may have that many under way,
  # answering each as it ends.
  # Cheaper than call() per call: no question, Return and Finish, no
  # promise on either side (docs/benchmarks.md).
  openCalls @5 (channel :PipeEnd);
}
