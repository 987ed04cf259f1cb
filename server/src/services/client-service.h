// The service a client gets once it has shown the token
// (Bootstrap.registerClient): sessions, submits, waits, fetches, actors.
// Loop thread only.
#pragma once

#include "context.h"

#include <squall/wire/service.capnp.h>

namespace squall {

// `peer`: the client's address, for logs.
kj::Own<wire::ClientService::Server> newClientService(ServerContext& context, kj::String peer);

}  // namespace squall
