// Shared by the libFuzzer targets (fuzz-*.cpp): what an expected refusal
// looks like, and a scratch directory of the process's own for the targets
// that must write files. Fuzz targets only; one thread.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <kj/exception.h>
#include <string>
#include <unistd.h>

namespace squall::fuzz {

// Runs `body`; a refusal with a clear error (a KJ exception, as the server
// and governor raise them) is the expected outcome for bad input, so it is
// swallowed. Anything else escapes and libFuzzer reports it.
template <typename Body>
void expectingRefusals(Body&& body) {
  try {
    body();
  } catch (const kj::Exception&) {
  }
}

// The same, where `Refusal` is a clear error too (squall::Error, as the
// client and the `squall` command raise them; its header cannot be included
// here, as the client's squall::Session is not the server's).
template <typename Refusal, typename Body>
void expectingRefusals(Body&& body) {
  try {
    expectingRefusals(body);
  } catch (const Refusal&) {
  }
}

// A directory under $TMPDIR (else /tmp) named after the target and the
// process, made on first use and removed at exit.
inline const std::filesystem::path& scratchDir(const char* target) {
  static std::filesystem::path dir = [target]() {
    const char* tmp = getenv("TMPDIR");
    std::filesystem::path base = tmp != nullptr && *tmp == '/' ? tmp : "/tmp";
    auto path = base / (std::string("squall-") + target + "-" + std::to_string(getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
    atexit([]() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    });
    return path;
  }();
  return dir;
}

}  // namespace squall::fuzz
