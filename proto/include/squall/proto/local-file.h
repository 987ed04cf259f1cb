// Files of a governor's store that a client on the same machine reads or
// writes itself (wire::LocalFile in data.capnp): the governor describes
// one, the client opens it as /proc/<pid>/root<path> and checks it is that
// file. Any thread.
#pragma once

#include <kj/io.h>
#include <kj/string.h>
#include <squall/wire/data.capnp.h>

namespace squall {

// This machine's boot id (/proc/sys/kernel/random/boot_id), read once;
// empty where it cannot be read (then no file is ever taken as local).
kj::StringPtr machineBootId();

// Fills `out` for the open file `fd` at `path` (as this process sees it).
void describeLocalFile(int fd, kj::StringPtr path, wire::LocalFile::Builder out);

// Opens the described file with `flags` (O_RDONLY, O_WRONLY) when it is on
// this machine and is that file (boot id, device, inode); null otherwise,
// with nothing left open. Never follows a last-component link.
kj::Maybe<kj::AutoCloseFd> openLocalFile(wire::LocalFile::Reader file, int flags);

}  // namespace squall
