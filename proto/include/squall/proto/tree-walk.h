// Walks of directory trees that hold a fixed number of descriptors and use
// no recursion, whatever the depth. A program may leave a tree thousands of
// levels deep; a walk that kept one descriptor per level ran out of them
// (EMFILE), one that recursed per level overflowed the stack. Here a walk
// keeps one directory open (its DirCursor), the names of each directory on
// its way down (in memory) and the path of the current entry.
//
// TreeLimits bound a tree that becomes a dir object (or comes from one), so
// that everything done to a dir object later (hashing, sending, placing it
// as an input) stays bounded too. The governor takes them from its flags
// (--max-dir-depth, --max-dir-entries; docs/guide.md); removing a tree uses
// none, so whatever a program or a crash left can always go.
//
// Blocking (file system calls); any thread. Used by the governor's trees
// and tar archives and by the client's tar writer.
#pragma once

#include <cstdint>
#include <kj/io.h>
#include <kj/string.h>
#include <string>
#include <sys/stat.h>
#include <sys/types.h>
#include <vector>

namespace squall {

struct TreeLimits {
  // Levels below the root: the entry "a/b/c" is at depth 3.
  uint32_t maxDepth = 256;
  // Entries in the whole tree (directories, files and links; the root not
  // counted).
  uint64_t maxEntries = 1000000;
  // Bytes of an entry's path relative to the root: PATH_MAX less its NUL,
  // so that every entry of a dir object can be opened by its path.
  size_t maxPathLength = 4095;

  // No bounds: for removing whatever is there.
  static TreeLimits none() { return TreeLimits{UINT32_MAX, UINT64_MAX, SIZE_MAX}; }
};

// Throws FAILED, naming the limit, its value and the entry, when an entry
// at `path` (relative to the root), `depth` levels down, the `count`-th of
// its tree, breaks `limits`. `what` names the tree ("output 'out'"):
//   "output 'out': directory depth 257 exceeds the limit of 256
//    (--max-dir-depth) at 'd/d/…/d'"
void checkTreeLimits(const TreeLimits& limits, kj::StringPtr what, kj::StringPtr path, size_t depth,
                     uint64_t count);

// Names in the directory open at `dirFd` ("." and ".." left out), in byte
// order.
std::vector<std::string> listDir(int dirFd);

// A directory descriptor that moves down and up a tree one level at a
// time: one descriptor at any depth (two while it moves). Going up opens
// ".." and checks that it is the directory it came down from (device and
// inode), so a tree moved meanwhile is an error, never a walk elsewhere.
class DirCursor {
 public:
  explicit DirCursor(kj::AutoCloseFd top);
  KJ_DISALLOW_COPY(DirCursor);

  int fd() const { return current.get(); }
  // Levels below the directory it started at.
  size_t depth() const { return above.size(); }
  // Into the subdirectory `name`, never through a symbolic link.
  void enter(kj::StringPtr name);
  // Back to the parent; only below the start.
  void leave();

 private:
  struct Identity {
    dev_t dev;
    ino_t ino;
  };
  kj::AutoCloseFd current;
  // Of each directory above, the nearest last.
  std::vector<Identity> above;
};

// A pre-order walk of the tree open at `root`: each directory's entries in
// byte order of their names. A directory's own entries follow it only when
// enter() is called while it is the current entry; after the last of them
// comes a LEAVE for it. Entries are counted and checked against the limits
// as they are met (a directory's names as they are listed), so an
// oversized tree fails early, naming the limit.
class TreeWalk {
 public:
  enum class Step {
    // An entry: dirFd() is its directory, name(), path() and stat() it.
    ENTRY,
    // An entered directory is done and left: dirFd() is its parent, name()
    // and path() the directory.
    LEAVE,
    // The whole tree is done.
    END,
  };

  // Cheap: the root is listed at the first next(). `what` names the tree in
  // errors.
  TreeWalk(kj::AutoCloseFd root, kj::StringPtr what, TreeLimits limits);
  KJ_DISALLOW_COPY(TreeWalk);

  Step next();
  // Descends into the current entry, a directory; its entries come next.
  void enter();
  // Looks at the current entry again (after the caller replaced it).
  void restat();

  int dirFd() const { return cursor.fd(); }
  kj::StringPtr name() const { return currentName; }
  // Relative to the root.
  kj::StringPtr path() const { return kj::StringPtr(currentPath.c_str(), currentPath.size()); }
  const struct stat& stat() const { return currentStat; }
  // Of the current entry: 1 for the root's own entries.
  size_t depth() const { return levels.size(); }

 private:
  struct Level {
    std::vector<std::string> names;
    size_t index = 0;
    // Length of the path of this level's directory (0 for the root).
    size_t pathLength = 0;
  };

  DirCursor cursor;
  kj::String what;
  TreeLimits limits;
  std::vector<Level> levels;
  bool started = false;
  bool enterPending = false;
  uint64_t count = 0;
  kj::String currentName;
  std::string currentPath;
  struct stat currentStat;

  void pushLevel(size_t pathLength);
};

}  // namespace squall
