// The server's RPC surface: the per-connection Bootstrap, the client service
// and the governor upstream. Loop thread only.
#pragma once

#include "context.h"

#include <squall/wire/service.capnp.h>

namespace squall {

// One per accepted connection.
kj::Own<wire::Bootstrap::Server> newBootstrap(ServerContext& context, kj::StringPtr peer);

}  // namespace squall
