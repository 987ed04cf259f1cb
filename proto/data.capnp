# The data plane: governor <-> governor and governor -> client.
@0xd99693a4a0154165;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("squall::wire");

using Common = import "common.capnp";

# What a connection to a governor's data port bootstraps to.
interface DataBootstrap {
  open @0 (version :UInt32, token :Text) -> (service :DataService);
}

interface DataService {
  # Pushes the object's bytes from `offset` into `sink`, in chunks, with flow
  # control, then calls sink.done(); returns once done() has returned, so
  # the caller has every byte when read() completes. A dir is sent as a tar
  # archive (pax format, relative paths, symlinks kept as links); `size` is
  # the number of bytes sent.
  #
  # An id the governor does not hold fails at once (FAILED, naming the
  # object and the governor), unless `live` is set.
  #
  # `live`: the caller is one of the live readers of a stream whose
  # producer is assigned to this governor (InputLocation.live). If the
  # stream is not held as stored bytes, `offset` must be 0; the read waits
  # (a bounded time) for the producer to be assigned here, then the sink
  # gets every byte from the start as the producer writes it, at the pace
  # of the slowest reader (each write is awaited), then done(). If the
  # producer fails, read() throws with the producer's error. A reader that
  # goes away makes its sink's write() throw; the stream carries on for the
  # others. A live read of a stream already stored here reads those bytes.
  read @0 (id :Common.Id, offset :UInt64, sink :ByteSink, compress :Bool, live :Bool)
      -> (size :UInt64, kind :Common.ObjectKind);

  # An actor call sent here directly by its client, skipping the server
  # (docs/actors.md, "Calls that skip the server"): `call` holds one task
  # of type actorCall on an actor this governor hosts, its outputs' specs
  # and the constants it reads (nothing else). It takes its turn on the
  # actor behind the calls that reached the governor before it (by either
  # way), runs, and the answer is its result. The governor reports it to
  # the server in its next update (TaskResult.direct), which records it as
  # if it had been submitted and assigned.
  #
  # `refused` (the call was not run, and is not reported): the actor is
  # not here (it moved, ended and was forgotten), or the call is not one
  # this way takes; the client then sends it through the server.
  callActor @1 (call :Common.Graph) -> (result :Common.TaskResult, refused :Text);

  # Which of `tasks`, direct calls a client sent here, the governor has:
  # queued, running, or ended with a result the server may not have yet.
  # A client whose connection broke before a call was answered asks on a
  # new one: a call the governor does not have never reached it (it is
  # placed anew through the server), one it has is left to run here.
  heldCalls @2 (tasks :List(Common.Id)) -> (held :List(Common.Id));

  # A constant too big for a submit (ClientService.placeData chose this
  # governor): its `size` bytes go through `sink` into a temp file of the
  # store, hashed as they land. `incarnation` is the server's
  # (ClientService): a governor registered with another one refuses. So
  # does one whose disk cannot hold `size` bytes (FAILED, naming the sizes),
  # and one that holds or receives `object` already. The upload is held
  # unclaimed once finished: a submit naming it (ObjectSpec.placedOn)
  # claims it when applied (GovernorControl.claimUploads); one never
  # claimed is removed after a bounded time (the governor's --upload-ttl)
  # or by discardUploads. A sink dropped before finish() leaves nothing.
  #
  # `local`: the client may be on this governor's machine and would write
  # the bytes into the temp file itself (LocalFile); the answer's `file`
  # says where (unset: stream through `sink`). Either way finish() checks
  # the size and hash of what the file holds.
  upload @3 (object :Common.Id, size :UInt64, incarnation :UInt64, local :Bool)
      -> (sink :UploadSink, file :LocalFile);
  # Removes finished uploads not claimed (a submit that was refused).
  discardUploads @4 (objects :List(Common.Id)) -> ();

  # Where a blob held as a file is, for a client on this machine to read
  # without the connection (LocalFile). FAILED when the object is not held
  # here, or not as a file (a small one in memory, a dir, a live stream):
  # the client reads it with read() then.
  readLocal @5 (id :Common.Id) -> (file :LocalFile, size :UInt64);
}

# A file of a governor's store that a process on the same machine can open
# as /proc/<pid>/root<path> (the governor may be in a mount namespace of
# its own). The opener checks that it is this file: the same boot id (of
# the machine, /proc/sys/kernel/random/boot_id), device and inode;
# anything else (another machine, another pid namespace, the object moved
# meanwhile) and it uses the connection instead.
struct LocalFile {
  pid @0 :UInt32;
  path @1 :Text;
  device @2 :UInt64;
  inode @3 :UInt64;
  bootId @4 :Text;
}

interface UploadSink {
  write @0 (chunk :Data) -> stream;
  # After the last write: returns once every byte is on disk and the size
  # and xxh3-64 `hash` match what arrived (else FAILED, and nothing is
  # kept).
  finish @1 (hash :UInt64) -> ();
  wrote @2 (upTo :UInt64) -> stream;
  # A client on the governor's machine that writes the file itself
  # (upload's `local`) says how far it wrote, in order: the governor hashes
  # those bytes while the client writes on, so that finish has only the
  # tail left to check.
}

interface ByteSink {
  # rawSize == 0: `chunk` is raw bytes. Otherwise `chunk` is one LZ4 block
  # that decompresses to rawSize bytes. For a live stream a write completes
  # once the bytes were handed on (to the reading program's pipe), which is
  # the backpressure; it throws once the reader has gone.
  write @0 (chunk :Data, rawSize :UInt32) -> stream;
  # After the last write: returns once every write has been handled (a
  # streaming call's result alone does not say that).
  done @1 () -> ();
}
