// Path rules for every path that comes from outside the governor: task
// configs (input/output paths, make_dir / slice_dir paths, load / store
// paths), the entries of a constant's tar and of a fetched tar. Nothing
// named by such a path may lead outside the directory it is meant for.
//
// Relative paths are checked lexically (no "..", not absolute, no NUL, not
// empty) and then opened one component at a time with O_NOFOLLOW, or with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), from a descriptor of the
// root: a symbolic link is never followed while the governor places inputs,
// takes outputs, slices or unpacks.
//
// Absolute paths for load / store must lie under a root the operator allowed
// (--allow-path); they are opened with openat2(RESOLVE_BENEATH) from the
// root's descriptor, so symbolic links inside the root work but none leads
// out of it.
//
// Blocking (metadata syscalls); any thread. Failures a user must see are
// FAILED exceptions whose description is exactly the message.
#pragma once

#include <kj/array.h>
#include <kj/exception.h>
#include <kj/io.h>
#include <kj/string.h>
#include <kj/vector.h>

// Throws a FAILED exception whose description is exactly the arguments.
#define SQUALL_FAIL(...)                                                            \
  ::kj::throwFatalException(::kj::Exception(::kj::Exception::Type::FAILED, __FILE__, \
                                            __LINE__, ::kj::str(__VA_ARGS__)))

namespace squall {

// Why `path` is not a safe relative path ("it is empty", "it is absolute",
// "it contains '..'", "it contains a NUL byte"), or nullptr when it is one.
// "a/./b", "a//b" and a trailing '/' are tolerated (normalised away).
kj::Maybe<kj::StringPtr> relativePathProblem(kj::StringPtr path);

// The components of a path that passed relativePathProblem() ("." and empty
// ones dropped).
kj::Vector<kj::String> pathComponents(kj::StringPtr path);

// Joins components with '/'.
kj::String joinPath(kj::ArrayPtr<const kj::String> components, size_t count);

// openat2(2) with `resolve` flags (RESOLVE_*). Returns the descriptor or a
// negative errno.
int openat2Raw(int dirFd, kj::StringPtr path, int flags, uint64_t resolve, int mode = 0);

// Opens `path` (relative) below `rootFd` with RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS: fails (negative errno, ELOOP for a symlink anywhere
// on the way) rather than follow any link.
int openNoSymlinks(int rootFd, kj::StringPtr path, int flags, int mode = 0);

// The directory `components[0..count)` below `rootFd`, opened one component
// at a time with O_NOFOLLOW and created (0755) where missing when `create`.
// `what` names the path in errors, e.g. "output 'a/b'". Throws FAILED:
//   "<what> is inside 'a', which is a symbolic link"
//   "<what> is inside 'a', which is not a directory"
//   "<what> is inside 'a', which does not exist"          (create == false)
kj::AutoCloseFd openDirChain(int rootFd, kj::ArrayPtr<const kj::String> components, size_t count,
                             bool create, kj::StringPtr what);

// Opens a directory by absolute path without following a final symlink.
kj::AutoCloseFd openDirectory(kj::StringPtr path);

// Roots that load / load_dir / store may touch (--allow-path), resolved with
// realpath at startup and held open.
class AllowedRoots {
 public:
  AllowedRoots() = default;
  // Resolves and opens each root; throws FAILED naming the first bad one.
  explicit AllowedRoots(kj::ArrayPtr<const kj::String> roots);
  AllowedRoots(AllowedRoots&&) = default;
  AllowedRoots& operator=(AllowedRoots&&) = default;

  bool empty() const { return roots.size() == 0; }

  // Where an absolute task path lies: its root's descriptor, the path below
  // the root (empty for the root itself) and the normalised absolute path.
  struct Resolved {
    int rootFd;
    kj::StringPtr root;
    kj::String relative;
    kj::String normalised;
  };
  // Applies the rules; throws FAILED with `op` (e.g. "load") in the text:
  //   "load: no paths are allowed on this governor (start it with --allow-path DIR)"
  //   "load: path 'x' is not absolute"
  //   "load: path '/etc/passwd' is outside the allowed roots (--allow-path /data)"
  Resolved resolve(kj::StringPtr op, kj::StringPtr path) const;

  // "--allow-path /a --allow-path /b", for messages.
  kj::String describe() const;

 private:
  struct Root {
    kj::String path;
    kj::AutoCloseFd fd;
  };
  kj::Vector<Root> roots;
};

// The message for an openat2(RESOLVE_BENEATH) failure below an allowed root.
kj::String beneathError(kj::StringPtr op, kj::StringPtr path, kj::StringPtr root, int error);

}  // namespace squall
