// `squall run -c LINE`: a shell pipe (`zcat /data/big.gz | grep ERROR |
// sort | uniq -c`) run as one task per stage, each stage's stdout flowing to
// the next stage's stdin as a live stream.
//
// Two pure stages, unit-tested alone (no server, no I/O):
//   splitShellPipe()  LINE -> stages, split on the `|` at the top level of
//                     the line (not in quotes, escapes, $(...), `...`,
//                     ( ), { }, if/fi, loops, case/esac); rejects what
//                     would not mean the same once each stage runs alone;
//   planCommand()     stages -> a PipelinePlan (the same plan a pipeline
//                     file gives, so PipelineBuilder and --dry-run serve
//                     both).
// Every problem is a PipelineError whose message names the column (and
// line, for a line with new lines in it). docs/pipelines.md documents the
// rules ("One line: squall run -c").
#pragma once

#include "pipeline.h"

#include <string>
#include <utility>
#include <vector>

namespace squall {

struct PipeStage {
  std::string text;     // the stage's shell code, trimmed
  size_t column = 1;    // 1-based offset of `text` in the line
  std::string program;  // the first command word (after NAME=value words); "" if none is plain
  // Unquoted words of the stage's top level with nothing for the shell to
  // expand (no $, quotes, globs, ...): where a relative local path could
  // hide. Redirection targets are checked by the splitter itself.
  std::vector<std::string> words;
  size_t stdinRedirectColumn = 0;  // where the stage redirects its stdin ('<'), 0 = it does not
  // A stage `call EXECUTOR/FUNCTION [CONFIG...]` calls a function instead
  // of running a shell line: its words after the function, quotes removed
  // as sh would, joined by single spaces, are the config. Empty for a
  // shell stage.
  std::string function;
  std::string config;
};

// Splits `line` into its stages. Throws PipelineError ("column 12: ...").
std::vector<PipeStage> splitShellPipe(const std::string& line);

struct CommandOptions {
  std::string name = "command";  // the session name
  std::string stdinFile;         // local file for stage 1's stdin; "" = /dev/null
  std::string outputFile;        // local path for the last stage's output; "" = squall's stdout
  std::optional<uint32_t> cpus;  // each stage's; unset: the stages share one
  std::vector<std::pair<std::string, std::string>> env;  // given to every stage
};

// The tasks of a split line: stage i is `/bin/sh -c TEXT`, reading stage
// i-1's stdout stream on its stdin; the last stage's stdout is a kept stream
// collected to options.outputFile (or "-", squall's stdout). A call stage
// is a call task with one input (stage i-1's output, read live; for stage
// 1 the --stdin file or none) and one output, a stream when a stage after
// it reads it, else a blob.
PipelinePlan planCommand(const std::vector<PipeStage>& stages, const CommandOptions& options);

// The local names in `stages` that exist relative to `dir` (a stage runs in
// a sandbox on a governor, where they would not): "stage 2: 'big.gz'".
std::vector<std::string> relativeLocalPaths(const std::vector<PipeStage>& stages, const std::string& dir);

}  // namespace squall
