// For programs that already run a KJ event loop on a thread (a tasklib
// executor): lets squall Clients made on that thread use it instead of
// making their own (KJ allows one loop per thread). Their waits then run
// that loop, so they must not be called from inside one of its callbacks:
// tasklib runs functions outside them (docs/nested.md).
#pragma once

namespace kj {
class AsyncIoProvider;
class WaitScope;
}  // namespace kj

namespace squall {
namespace client {

// From now on, Clients made on this thread use `provider` and `waitScope`
// (both outlive them). Call before the thread's first Client.
void shareThreadLoop(kj::AsyncIoProvider& provider, kj::WaitScope& waitScope);
// Clients made afterwards make their own loop again; none may be left on
// the shared one.
void unshareThreadLoop();

}  // namespace client
}  // namespace squall
