// The names users see for wire enums and task types, in error messages,
// task info and the status page. No threading rules.
#pragma once

#include <kj/string.h>
#include <squall/wire/common.capnp.h>

namespace squall {

// "blob", "dir", "stream"; "unknown" for a value from a newer peer.
inline kj::StringPtr kindName(wire::ObjectKind kind) {
  switch (kind) {
    case wire::ObjectKind::BLOB: return "blob";
    case wire::ObjectKind::DIR: return "dir";
    case wire::ObjectKind::STREAM: return "stream";
  }
  return "unknown";
}

// "concat", "execute", "make_dir", ...; "unknown" for a newer type.
inline kj::StringPtr taskTypeName(wire::TaskSpec::Reader spec) {
  switch (spec.getConfig().which()) {
    case wire::TaskSpec::Config::CONCAT: return "concat";
    case wire::TaskSpec::Config::SLEEP: return "sleep";
    case wire::TaskSpec::Config::EXECUTE: return "execute";
    case wire::TaskSpec::Config::MAKE_DIR: return "make_dir";
    case wire::TaskSpec::Config::SLICE_DIR: return "slice_dir";
    case wire::TaskSpec::Config::LOAD: return "load";
    case wire::TaskSpec::Config::LOAD_DIR: return "load_dir";
    case wire::TaskSpec::Config::STORE: return "store";
    case wire::TaskSpec::Config::CALL: return "call";
    case wire::TaskSpec::Config::ACTOR: return "actor";
    case wire::TaskSpec::Config::ACTOR_CALL: return "actor_call";
  }
  return "unknown";
}

// Executor and function names (tasklib, docs/tasklib.md): what a task type
// "executor/function" carries without quoting anywhere it is written.
constexpr const char* PLAIN_NAME_RULE = "use 1 to 128 letters, digits, '-', '_' and '.'";
inline bool isPlainName(kj::StringPtr name) {
  if (name.size() == 0 || name.size() > 128 || name == "." || name == "..") return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
              c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// "executor/Type": an actor's type, as governors announce it.
inline kj::String actorTypeName(wire::ActorConfig::Reader actor) {
  return kj::str(actor.getExecutor(), "/", actor.getType());
}

// "executor/function": a call task's type, as governors announce it.
inline kj::String callName(wire::CallConfig::Reader call) {
  return kj::str(call.getExecutor(), "/", call.getFunction());
}

}  // namespace squall
