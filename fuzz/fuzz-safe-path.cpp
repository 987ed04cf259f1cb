// libFuzzer target: the lexical path rules for paths that come from outside
// (governor/src/safe-path: task config paths and tar entries;
// proto's checkSandboxPath: sandbox paths the server checks at submit).
// A path either is refused with a reason or comes apart into components
// none of which can lead out ("..", empty, or holding '/' or NUL); and a
// path one rule accepts, the other accepts too once normalised.
#include "fuzz-util.h"

#include <iterator>
#include <kj/debug.h>
#include <safe-path.h>
#include <squall/proto/sandbox-path.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = kj::heapString(reinterpret_cast<const char*>(data), size);
  auto sandboxProblem = squall::checkSandboxPath(path);
  KJ_IF_MAYBE(problem, squall::relativePathProblem(path)) {
    KJ_ASSERT(problem->size() > 0);
    return 0;
  }
  auto components = squall::pathComponents(path);
  for (auto& c : components) {
    KJ_ASSERT(c.size() > 0 && c != "." && c != "..", path, c);
    KJ_ASSERT(c.findFirst('/') == nullptr && c.findFirst('\0') == nullptr, path, c);
  }
  auto joined = squall::joinPath(components, components.size());
  KJ_ASSERT(squall::relativePathProblem(joined) == nullptr || components.size() == 0, path, joined);
  std::string normalised = squall::normalisedSandboxPath(std::string_view(path.begin(), path.size()));
  KJ_ASSERT(normalised == std::string_view(joined.begin(), joined.size()), path, joined);
  // What the governor takes, the server's submit check takes too.
  KJ_ASSERT(sandboxProblem == nullptr || path.size() > 4096, path);

  // Made below a root of its own, one component at a time, as outputs and
  // make_dir entries are; nothing may appear outside it.
  auto& scratch = squall::fuzz::scratchDir("safe-path");
  auto root = scratch / "root";
  std::filesystem::create_directory(root);
  {
    auto rootFd = squall::openDirectory(root.c_str());
    squall::fuzz::expectingRefusals([&]() {
      squall::openDirChain(rootFd, components, components.size(), true, "fuzz");
    });
  }
  std::filesystem::remove_all(root);
  KJ_ASSERT(std::distance(std::filesystem::directory_iterator(scratch), {}) == 0, path);
  return 0;
}
