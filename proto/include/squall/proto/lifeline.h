// The lifeline: how squall-server and squall-governor die with the process
// that started them (the test harness, `squall start`) however it ends,
// SIGKILL and crashes included. The starter makes a pipe and keeps its write
// end (close-on-exec, so no other program inherits it); the child inherits
// the read end and is told its number with --lifeline-fd. Nothing is ever
// written: when the starter ends, the kernel closes the write end and the
// read end sees end of file, and the child stops as on SIGTERM.
//
// A pipe rather than PR_SET_PDEATHSIG, which fires when the *thread* that
// spawned the child exits (tests add governors from helper threads).
// Loop thread only.
#pragma once

#include <kj/async-unix.h>
#include <kj/io.h>

namespace squall {

// Takes the inherited read end `fd` of a lifeline. Throws FAILED naming the
// problem when `fd` is not an open pipe. Marks it close-on-exec so the
// programs this process starts (a governor's tasks) do not inherit it.
kj::AutoCloseFd adoptLifeline(int fd);

// Resolves once every write end of the lifeline `fd` is closed: the process
// that started this one has gone. `fd` must outlive the promise.
kj::Promise<void> lifelineCut(kj::UnixEventPort& eventPort, int fd);

}  // namespace squall
