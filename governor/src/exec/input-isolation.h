// Keeps what a program does to its inputs away from the objects they come
// from (docs/guide.md, "What a program may do to its inputs"). Inputs used
// to be hard links to the store's read-only files: a program running as
// root, or one that called chmod, wrote through them into the object, and
// every later reader (and fetch) got the damage.
//
// One of two mechanisms, chosen at start (squall-governor
// --input-isolation auto|mount|copy; auto takes mount when it can):
//
// MOUNT: the governor runs in a mount namespace of its own (entered before
//   any thread exists: directly with CAP_SYS_ADMIN, otherwise inside a user
//   namespace that maps only its own uid and gid) and mounts its object store
//   a second time, read-only, as the store view (<work>/objects-ro). A file
//   input is a symbolic link to the object's file in the view; a dir input is
//   a read-only bind mount of the object's tree taken from the view. A write
//   through either fails with EROFS whatever the program's uid and whatever
//   modes it sets. The name of a file input may be removed or replaced like
//   any file; a dir input is a real directory (find, tar, du, cp -r see its
//   tree) whose name cannot be removed or renamed (EBUSY); tools that copy
//   links as links (tar without -h, cp -a) see a file input as the link it
//   is. Per input: one symlink, or one mount and one unmount, whatever its
//   size (the unmount waits out an RCU grace period, milliseconds, after
//   the task's outcome has gone: see TaskControl::setAftermath).
// COPY: each input is a private copy (FICLONE where the file system can,
//   else the bytes copied), read-only by its modes only: a program may
//   change its copy, never the object. Per input: its bytes.
//
// In both, an input marked writable (or replaced in place by an output) is a
// private copy the program may change; a dir input that other inputs are
// placed into, and an input placed inside a dir output (it becomes part of
// that output), are private copies too. A small blob the governor holds in
// memory is written to a file of the task's own: in mount mode in the store
// (seen through the view, so read-only like the rest), in copy mode in the
// sandbox.
//
// Links into the view that a program moves or copies into an output (`mv a
// out`, `cp -a a out/`) are replaced by the bytes they name when the output
// is taken, so no object ever holds a link into a governor's view.
//
// What this does not do: a program runs as the governor's user, so one that
// deliberately goes looking for the governor's work directory can still
// write there; run governors as a user of their own (or in a container) to
// keep hostile programs out. This is about programs that write to the files
// they were given.
#pragma once

#include "object-store.h"

#include <kj/function.h>
#include <kj/io.h>
#include <kj/refcount.h>
#include <kj/string.h>
#include <kj/vector.h>
#include <squall/proto/ids.h>
#include <squall/wire/common.capnp.h>

namespace squall {

// --input-isolation.
enum class IsolationChoice { AUTO, MOUNT, COPY };
kj::Maybe<IsolationChoice> parseIsolationChoice(kj::StringPtr text);

struct OwnNamespace {
  bool entered;
  // How ("mount namespace", "user and mount namespaces"), or why not.
  kj::String detail;
};

// Enters a mount namespace of the governor's own: mounts made in it stay in
// it, mounts the host makes later still appear in it (a slave of the
// host's). Without CAP_SYS_ADMIN it tries a user namespace mapping only the
// governor's uid and gid (programs then keep their uid, have no
// capabilities, and set-user-ID programs such as sudo do not raise
// privileges). Must run before the process has a second thread (a user
// namespace can only be entered then). When `entered` is false the governor
// may carry on copying inputs. Throws only if it failed half-way, in a user
// namespace it cannot leave without its identity: the caller must then stop.
OwnNamespace enterOwnMountNamespace();

// The object store's directory mounted again, read-only, at `path` (made
// here, removed again when this goes, together with the mount). Needs
// enterOwnMountNamespace() first. Built and dropped on the loop thread;
// path() from any thread.
class StoreView {
 public:
  // Throws FAILED saying why the mount could not be made.
  StoreView(kj::StringPtr storeDir, kj::String path);
  ~StoreView() noexcept(false);
  KJ_DISALLOW_COPY(StoreView);

  kj::StringPtr path() const { return viewPath; }
  // The view's name for `storePath`, a path in the store's directory.
  kj::String viewOf(kj::StringPtr storePath) const;

 private:
  kj::String storeDir;
  kj::String viewPath;
};

// How an input goes into a sandbox.
enum class InputPlacement {
  // Through the store view: a symlink (file) or a bind mount (dir). Only
  // with a StoreView, and only for inputs held as files.
  VIEW,
  // A private copy, read-only by its modes like the object (files 0444,
  // directories 0555).
  COPY,
  // A private copy its owner may change.
  WRITABLE,
};

// What placing one task's inputs left outside its sandbox: dir inputs
// mounted into it, and the store's files holding in-memory blobs for the
// view (a directory of the task's own in the store). Shared
// (kj::atomicRefcounted) between the task's promise chain and the pool jobs
// that prepare and remove the sandbox. release() detaches the mounts
// (lazily, so a program still inside one does not block) and removes the
// files; it runs before the sandbox is removed, or when the last reference
// goes. Any thread, one at a time.
class PlacedInputs final : public kj::AtomicRefcounted {
 public:
  // `storeFiles`: the task's directory in the store for in-memory blobs
  // placed through the view (made on first use).
  explicit PlacedInputs(kj::Maybe<kj::String> storeFiles = nullptr) : storeFiles(kj::mv(storeFiles)) {}
  KJ_DISALLOW_COPY(PlacedInputs);
  ~PlacedInputs() noexcept(false);

  void addMount(kj::AutoCloseFd mountRoot) { mounts.add(kj::mv(mountRoot)); }
  void release();

 private:
  // Descriptors of the mounts' roots: they name the mounts even if the
  // program renamed a directory above one.
  kj::Vector<kj::AutoCloseFd> mounts;
  kj::Maybe<kj::String> storeFiles;
};

// One input as the sandbox's preparation needs it.
struct InputSource {
  Id id;
  wire::ObjectKind kind;
  ObjectData data;
  InputPlacement placement;
  // For VIEW: the object's path in the store view.
  kj::Maybe<kj::String> viewPath;
  // For VIEW of a blob held in memory: the store file (in the task's
  // directory, see PlacedInputs) its bytes are written to first, so that
  // the program sees them read-only through the view like any other input.
  kj::Maybe<kj::String> storeFile;
};

// An input with a place in the sandbox.
struct SandboxInput {
  // Relative to the sandbox, normalised (safe-path.h's components joined).
  kj::String path;
  InputSource input;
};

// Settles how each input is placed; `inputs` come with WRITABLE where the
// task says so, anything else for the rest. An output at or inside an
// input's path makes it WRITABLE (the server insists on the flag; this
// holds without it). Without a view the others are COPY; with one, VIEW
// except for a dir input that another input or a named pipe is placed
// into, and an input inside a dir output (it becomes part of that output):
// those are COPY. Fills in the view paths; blobs held in memory get a file
// in `storeFiles` (the task's directory in the store, see PlacedInputs).
void choosePlacements(kj::ArrayPtr<SandboxInput> inputs, kj::ArrayPtr<const kj::String> outputPaths,
                      kj::ArrayPtr<const kj::String> fifos, kj::Maybe<const StoreView&> view,
                      kj::StringPtr storeFiles, kj::Maybe<InputSource&> stdinOnly);

// Places `input` as the new entry `name` of the directory `parentFd`
// (which must not have it yet: "<label> is already taken by an earlier
// input"). A mounted dir input is added to `placed`. Pool threads.
void placeInput(const InputSource& input, int parentFd, kj::StringPtr name, kj::StringPtr label,
                PlacedInputs& placed);

// A descriptor to feed `input` (a blob) on a program's stdin without giving
// it a name in the sandbox: the view's file, or an anonymous private copy in
// `scratchDir`. Pool threads.
kj::AutoCloseFd openStdinInput(const InputSource& input, kj::StringPtr scratchDir);

// If the entry `name` of `dirFd` is a symbolic link into the store view at
// `viewRoot`, replaces it by a private copy of what it names and returns
// true. Used on outputs, so that `mv input out` gives the input's bytes, not
// a link only this governor could follow. Pool threads.
bool replaceViewLink(kj::StringPtr viewRoot, int dirFd, const char* name, kj::StringPtr target);

}  // namespace squall
