// The server's RPC surface: the per-connection Bootstrap, the client service
// and the governor upstream. Loop thread only.
#pragma once

#include "context.h"

#include <squall/proto/listener.h>
#include <squall/wire/service.capnp.h>

namespace squall {

// One per accepted connection.
// `gate` is the connection's: admitted when a call shows the token,
// refused (the connection closed) when one does not.
kj::Own<wire::Bootstrap::Server> newBootstrap(ServerContext& context, kj::Own<PeerGate> gate);

}  // namespace squall
