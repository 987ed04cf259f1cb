// tasklib's Executor: what a program registers (functions, actor types,
// methods) and serve()'s command line. Serving itself is executor.cpp.
#include "internal.h"

#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <kj/debug.h>
#include <squall/proto/errors.h>
#include <squall/proto/spec-names.h>
#include <stdexcept>
#include <string>
#include <sys/prctl.h>
#include <unistd.h>

namespace squall {

using namespace detail;

// ------------------------------------------------------------ Executor

Executor::Executor(std::string name) : name_(std::move(name)) {
  if (!isPlainName(kj::StringPtr(name_.c_str(), name_.size()))) {
    throw std::invalid_argument("executor name '" + name_ + "': " + PLAIN_NAME_RULE);
  }
}

Executor::~Executor() = default;

Executor& Executor::add(std::string name, Function fn, size_t outputs) {
  std::vector<std::string> names;
  for (size_t i = 0; i < outputs; i++) names.push_back(std::to_string(i));
  std::string key = name;
  add(std::move(name), std::move(fn), std::move(names));
  functions_.find(key)->second.named = false;
  return *this;
}

namespace {

void checkOutputNames(const std::string& what, const std::vector<std::string>& names) {
  for (size_t i = 0; i < names.size(); i++) {
    for (size_t j = 0; j < i; j++) {
      if (names[i] == names[j]) throw std::invalid_argument(what + " names two outputs " + names[i]);
    }
  }
}

// An actor type's or method's name: a plain name without '.', since
// "Type.method" is split at its first '.'.
void checkActorName(const char* what, const std::string& name) {
  if (!isPlainName(kj::StringPtr(name.c_str(), name.size())) || name.find('.') != std::string::npos) {
    throw std::invalid_argument(std::string(what) + " name '" + name +
                                "': use 1 to 128 letters, digits, '-' and '_' (no '.': methods are called as "
                                "Type.method)");
  }
}

}  // namespace

Executor& Executor::add(std::string name, Function fn, std::vector<std::string> outputNames) {
  if (!isPlainName(kj::StringPtr(name.c_str(), name.size()))) {
    throw std::invalid_argument("function name '" + name + "': " + PLAIN_NAME_RULE);
  }
  if (functions_.count(name) != 0) throw std::invalid_argument("function " + name + " is added twice");
  if (actors_.count(name) != 0) throw std::invalid_argument("function " + name + ": an actor type has that name");
  // "Counter.add" would be both this function and a method of Counter.
  if (auto dot = name.find('.'); dot != std::string::npos && actors_.count(name.substr(0, dot)) != 0) {
    throw std::invalid_argument("function " + name + ": " + name.substr(0, dot) +
                                " is an actor type, whose methods are called so");
  }
  if (!fn) throw std::invalid_argument("function " + name + " has no body");
  checkOutputNames("function " + name, outputNames);
  functions_[name] = FunctionEntry{std::move(fn), std::move(outputNames), true};
  return *this;
}

void Executor::addActorType(std::string name, ActorFactory make) {
  checkActorName("actor type", name);
  if (actors_.count(name) != 0) throw std::invalid_argument("actor type " + name + " is added twice");
  if (functions_.count(name) != 0) throw std::invalid_argument("actor type " + name + ": a function has that name");
  auto after = functions_.lower_bound(name + ".");
  if (after != functions_.end() && after->first.compare(0, name.size() + 1, name + ".") == 0) {
    throw std::invalid_argument("actor type " + name + ": the function " + after->first +
                                " would be called as its method");
  }
  actors_[name] = ActorEntry{std::move(make), {}};
}

void Executor::addMethod(const std::string& type, std::string name, ActorMethod fn, std::vector<std::string> outputs,
                         bool named) {
  auto actor = actors_.find(type);
  KJ_ASSERT(actor != actors_.end(), "methods are added through the ActorType of a registered type");
  checkActorName("method", name);
  auto& methods = actor->second.methods;
  if (methods.count(name) != 0) throw std::invalid_argument("method " + type + "." + name + " is added twice");
  if (!fn) throw std::invalid_argument("method " + type + "." + name + " has no body");
  checkOutputNames("method " + type + "." + name, outputs);
  methods[name] = MethodEntry{std::move(fn), std::move(outputs), named};
}


int Executor::serve(int argc, char** argv) {
  const char* program = argc > 0 ? argv[0] : "executor";
  int fd = -1;
  for (int i = 1; i < argc; i++) {
    std::string_view arg = argv[i];
    if (arg == "--squall-describe") {
      auto line = [this](const std::string& name, const std::vector<std::string>& outputs, bool named) {
        std::string names;
        for (auto& o : outputs) names += (names.empty() ? "" : ", ") + o;
        printf("%s/%s -> %zu output%s%s%s%s\n", name_.c_str(), name.c_str(), outputs.size(),
               outputs.size() == 1 ? "" : "s", named ? " (" : "", named ? names.c_str() : "", named ? ")" : "");
      };
      for (auto& [name, entry] : functions_) line(name, entry.outputs, entry.named);
      for (auto& [type, actor] : actors_) {
        printf("%s/%s: actor type\n", name_.c_str(), type.c_str());
        for (auto& [name, method] : actor.methods) line(type + "." + name, method.outputs, method.named);
      }
      return 0;
    }
    std::string_view value;
    if (arg == "--squall-executor-fd" && i + 1 < argc) {
      value = argv[++i];
    } else if (arg.substr(0, 21) == "--squall-executor-fd=") {
      value = arg.substr(21);
    } else {
      fprintf(stderr, "%s: unknown argument '%s'\n", program, argv[i]);
      return 2;
    }
    char* end = nullptr;
    std::string text(value);
    long n = strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || n < 0 || n > 1 << 20) {
      fprintf(stderr, "%s: --squall-executor-fd wants a descriptor number, not '%s'\n", program, text.c_str());
      return 2;
    }
    fd = static_cast<int>(n);
  }
  if (fd < 0) {
    fprintf(stderr,
            "%s: this is the squall executor '%s'; a governor starts it (squall-governor --executor "
            "%s=PROGRAM). --squall-describe lists its functions and actor types.\n",
            program, name_.c_str(), name_.c_str());
    return 2;
  }
  // A governor that dies (even by SIGKILL) takes its executors with it,
  // however busy their function is.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 0;  // it went before that took hold
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { serveFd(fd); })) {
    if (e->getType() == kj::Exception::Type::DISCONNECTED) return 0;  // the governor went
    fprintf(stderr, "%s: %s\n", program, e->getDescription().cStr());
    return 1;
  }
  return 0;
}


}  // namespace squall
