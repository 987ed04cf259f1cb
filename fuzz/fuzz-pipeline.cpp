// libFuzzer target: `squall run`'s pipeline files (tools/src/pipeline:
// parsePipeline, then planPipeline and describePlan as --dry-run does).
// The input is the TOML text. The file is placed in tests/data/pipelines
// of the source tree, so local inputs, `lines` and `files` resolve against
// the documentation's data files as in tests/pipeline-test.cpp.
#include "fuzz-util.h"

#include <pipeline.h>
#include <squall/client/client.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  squall::fuzz::expectingRefusals<squall::Error>([&]() {
    auto pipeline = squall::parsePipeline(text, SQUALL_SOURCE_DIR "/tests/data/pipelines/fuzz.toml");
    auto plan = squall::planPipeline(pipeline);
    squall::describePlan(plan);
  });
  return 0;
}
