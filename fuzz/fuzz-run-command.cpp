// libFuzzer target: `squall run -c LINE` (tools/src/pipeline-command:
// splitShellPipe, planCommand, relativeLocalPaths, then describePlan as
// --dry-run does). The input is the line. Every stage the splitter keeps
// must lie within the line, in order.
#include "fuzz-util.h"

#include <kj/debug.h>
#include <pipeline-command.h>
#include <squall/client/client.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string line(reinterpret_cast<const char*>(data), size);
  squall::fuzz::expectingRefusals<squall::Error>([&]() {
    auto stages = squall::splitShellPipe(line);
    size_t last = 0;
    for (auto& stage : stages) {
      KJ_ASSERT(stage.column >= 1 && stage.column > last, stage.column, last);
      KJ_ASSERT(stage.column - 1 + stage.text.size() <= line.size(), stage.column, stage.text.size());
      last = stage.column;
    }
    squall::CommandOptions options;
    squall::describePlan(squall::planCommand(stages, options));
    squall::relativeLocalPaths(stages, SQUALL_SOURCE_DIR "/tests/data/pipelines");
  });
  return 0;
}
