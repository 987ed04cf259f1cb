// Directory trees as data objects: copying them (hard links or copies),
// sealing them (check the entry kinds, make read-only, hash), hashing and
// removing them. Every walk goes through directory descriptors with
// O_NOFOLLOW: a symbolic link inside a tree is an entry (kept as a link,
// its target never read), never a way out of the tree. Walks are TreeWalks
// (squall/proto/tree-walk.h): a few descriptors and no recursion whatever
// the depth; trees that become dir objects are checked against TreeLimits
// as they are walked.
//
// A tree may hold regular files, directories and symbolic links; anything
// else (fifo, socket, device) is refused with a message naming the entry.
//
// The tree hash (ObjectInfo.hash of a dir) is xxh3-64 over the entries in
// byte order of their relative paths (the root itself excluded), each fed as
//   path '\0' kind            with kind 'd', 'f' or 'l'
//   then for 'f': the size as 8 bytes little-endian, then the bytes;
//        for 'l': the link target and '\0'.
// Modes and times are not part of it, so a tree and its tar round trip hash
// alike. The size is the sum of the regular files' sizes.
//
// Blocking; run on the libuv pool (UvBridge::runOnPool). Any thread.
#pragma once

#include "file-ops.h"

#include <squall/proto/tree-walk.h>

#include <kj/function.h>
#include <kj/io.h>
#include <kj/string.h>
#include <string>
#include <vector>

namespace squall {

enum class FileCopy {
  // Hard-link files (sharing the read-only inode of an object), copying only
  // where linking is impossible (another filesystem, link limits).
  LINK,
  // Copy the bytes (sharing blocks where the file system can, see
  // cloneFileFd) into new files the owner may write.
  COPY,
};

// A new descriptor (close-on-exec) for what `fd` refers to.
kj::AutoCloseFd duplicateFd(int fd);
// The subdirectory `name`, not following a link.
kj::AutoCloseFd openChildDir(int dirFd, const std::string& name);
// The target of the symbolic link `name` in `dirFd`.
kj::String readLinkAt(int dirFd, const char* name);

// "a fifo", "a socket", ... for a st_mode that is not a file, dir or link.
kj::StringPtr entryKindName(uint32_t mode);

// Makes a new directory `name` in `dstParentFd` holding a copy of the tree
// open at `srcDirFd`. `what` names the source in errors ("input 3/4"):
//   "<what> contains 'x/p', a fifo; only regular files, directories and
//    symbolic links are allowed"
// A source that breaks `limits` fails the copy (checkTreeLimits' message).
void copyTree(int srcDirFd, int dstParentFd, kj::StringPtr name, FileCopy how, kj::StringPtr what,
              const TreeLimits& limits);

// Copies the tree open at `srcDirFd` into the (empty) directory `dstDirFd`.
void copyTreeContents(int srcDirFd, int dstDirFd, FileCopy how, kj::StringPtr what,
                      const TreeLimits& limits);

// Copies the rest of the open file `from` into `to`; hashes what it copies
// when `hash` is set (the hash is 0 otherwise).
HashedSize copyFileFd(int from, int to, bool hash);

// Copies the whole open file `from` into the empty file `to`: shares its
// blocks (FICLONE) where the file system can, copies the bytes otherwise.
void cloneFileFd(int from, int to);

// Hard-links the open regular file `fd` at `to` (through /proc/self/fd), or
// copies it when that is impossible (unlinked, another filesystem).
void linkFdOrCopy(int fd, kj::StringPtr to);


// Called for each symbolic link met while sealing, before it is recorded:
// it may replace the link by a file or directory of the same name and then
// returns true (the entry is then sealed as what it has become).
using LinkHook = kj::Function<bool(int dirFd, const char* name, kj::StringPtr target)>;

// Checks the kinds of all entries of the tree open at `rootFd`, makes it
// read-only (files lose their write bits, directories become 0555) and,
// when `hash` is set, computes its size and tree hash. `what` names the
// tree in errors. A tree that breaks `limits` fails, naming the limit: it
// does not become a dir object.
HashedSize sealTree(int rootFd, kj::StringPtr what, const TreeLimits& limits, bool hash = true,
                    kj::Maybe<LinkHook&> onLink = nullptr);

// Size and tree hash, without changing anything; no limits.
HashedSize hashTree(int rootFd);

// rm -rf of the entry `name` in `parentFd`, never following a link; missing
// is fine. Read-only directories are made writable first. Any depth, a few
// descriptors.
void removeTreeAt(int parentFd, kj::StringPtr name);

// rm -rf of `path` in the same way; throws FAILED naming the path and what
// could not be removed.
void removeTree(kj::StringPtr path);

// What freshDirectory() could not remove, moved aside.
struct LeftBehind {
  kj::String movedTo;
  kj::String error;
};

// Makes `path` an empty directory (made with its parents when missing) for
// a new run: whatever an earlier run left there goes, of any depth (a crash
// mid-collect leaves a temporary tree of whatever the task made). What
// cannot be removed is moved aside, beside `path`, and returned for the
// caller to log; throws only when `path` cannot be made an empty directory.
// The directory is made 0700 (its parents too, where missing): what the
// governor keeps there is no other user's to read.
kj::Maybe<LeftBehind> freshDirectory(kj::StringPtr path);

// The last `max` bytes of an open file as text.
kj::String readTailFd(int fd, size_t max);

}  // namespace squall
