// Splits a `squall run -c` line into stages and plans them as streamed
// tasks. See pipeline-command.h; the rules are documented in
// docs/pipelines.md ("One line: squall run -c").
#include "pipeline-command.h"

#include <algorithm>
#include <filesystem>

namespace squall {

namespace fs = std::filesystem;

namespace {

// What the scanner is inside. The command contexts (ROOT ... CASE) read
// words and operators; the others only look for their end.
enum class Context { ROOT, PAREN, BRACE, IF, LOOP, CASE, DOUBLE_QUOTE, PARAMETER, BACKQUOTE };

bool isPlainChar(char c) {
  return isalnum(static_cast<unsigned char>(c)) || std::string_view("._/+,:@%=-").find(c) != std::string_view::npos;
}

bool isOperatorChar(char c) { return std::string_view("|&;<>()").find(c) != std::string_view::npos; }

bool isBlank(char c) { return c == ' ' || c == '\t'; }

bool isAssignment(const std::string& word) {
  auto eq = word.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  for (size_t i = 0; i < eq; i++) {
    char c = word[i];
    if (!isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return !isdigit(static_cast<unsigned char>(word[0]));
}

std::string trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\n");
  if (begin == std::string::npos) return "";
  size_t end = text.find_last_not_of(" \t\n");
  return text.substr(begin, end - begin + 1);
}

// One open context and, for command contexts, the word being read.
struct Frame {
  Context context;
  size_t at;           // where it opened
  std::string opener;  // as written, for messages: "(", "if", "while", ...
  bool commandStart = true;  // the next word is in command position
  std::string word;
  bool inWord = false;
  bool quoted = false;  // the word has quotes, escapes or expansions
  bool plain = true;    // ... nor glob or brace characters
  bool functionParens = false;  // the () of `name()`
};

// Reads one line; lives for one splitShellPipe() call.
class PipeSplitter {
 public:
  explicit PipeSplitter(const std::string& line) : line(line) {}

  std::vector<PipeStage> split() {
    stack.push_back({Context::ROOT, 0, ""});
    size_t n = line.size();
    while (i < n) {
      auto& top = stack.back();
      char c = line[i];
      switch (top.context) {
        case Context::DOUBLE_QUOTE:
          if (c == '\\') {
            i += 2;
          } else if (c == '"') {
            stack.pop_back();
            i++;
          } else if (!expansion()) {
            i++;
          }
          break;
        case Context::BACKQUOTE:
          if (c == '\\') {
            i += 2;
          } else if (c == '`') {
            stack.pop_back();
            i++;
          } else {
            i++;
          }
          break;
        case Context::PARAMETER:
          if (c == '\\') {
            i += 2;
          } else if (c == '}') {
            stack.pop_back();
            i++;
          } else if (c == '"') {
            stack.push_back({Context::DOUBLE_QUOTE, i++, "\""});
          } else if (c == '\'') {
            skipSingleQuote();
          } else if (!expansion()) {
            i++;
          }
          break;
        default:
          commandChar();
          break;
      }
    }
    endWord();
    if (stack.size() > 1) {
      auto& open = stack.back();
      switch (open.context) {
        case Context::DOUBLE_QUOTE: fail(open.at, "the '\"' here is never closed");
        case Context::BACKQUOTE: fail(open.at, "the '`' here is never closed");
        case Context::PARAMETER: fail(open.at, "the '${' here is never closed");
        case Context::PAREN: fail(open.at, "the '" + open.opener + "' here is never closed by ')'");
        case Context::BRACE: fail(open.at, "the '{' here has no '}' (write '; }' to close it)");
        case Context::IF: fail(open.at, "the 'if' here has no 'fi'");
        case Context::LOOP: fail(open.at, "the '" + open.opener + "' here has no 'done'");
        case Context::CASE: fail(open.at, "the 'case' here has no 'esac'");
        case Context::ROOT: break;
      }
    }
    auto text = trim(line.substr(stageStart));
    if (text.empty()) {
      if (stages.empty()) fail(std::string::npos, "the command line is empty");
      fail(stageStart - 1, "the line ends with '|': the last stage is missing");
    }
    finishStage(text);
    return std::move(stages);
  }

 private:
  const std::string& line;
  size_t i = 0;
  std::vector<Frame> stack;  // stack[0] is the ROOT
  std::vector<PipeStage> stages;
  size_t stageStart = 0;
  PipeStage current;
  bool programSeen = false;

  [[noreturn]] void fail(size_t at, const std::string& message) const {
    if (at == std::string::npos) throw PipelineError("-c: " + message);
    size_t column = at + 1;
    size_t lineNumber = 1;
    for (size_t k = 0; k < at && k < line.size(); k++) {
      if (line[k] == '\n') {
        lineNumber++;
        column = at - k;
      }
    }
    std::string where = "column " + std::to_string(column);
    if (line.find('\n') != std::string::npos) where = "line " + std::to_string(lineNumber) + ", " + where;
    throw PipelineError("-c: " + where + ": " + message);
  }

  char peek(size_t offset = 1) const { return i + offset < line.size() ? line[i + offset] : '\0'; }

  size_t stageNumber() const { return stages.size() + 1; }

  void skipSingleQuote() {
    auto close = line.find('\'', i + 1);
    if (close == std::string::npos) fail(i, "the \"'\" here is never closed");
    i = close + 1;
  }

  // `$(`, `${` or a backquote at i: opens its context. False if none.
  bool expansion() {
    char c = line[i];
    if (c == '$' && peek() == '(') {
      stack.push_back({Context::PAREN, i, "$("});
      i += 2;
      return true;
    }
    if (c == '$' && peek() == '{') {
      stack.push_back({Context::PARAMETER, i, "${"});
      i += 2;
      return true;
    }
    if (c == '`') {
      stack.push_back({Context::BACKQUOTE, i++, "`"});
      return true;
    }
    return false;
  }

  void addToWord(char c, bool quoted) {
    auto& f = stack.back();
    if (!f.inWord) {
      f.inWord = true;
      f.word.clear();
      f.quoted = false;
      f.plain = true;
    }
    f.word += c;
    if (quoted) f.quoted = true;
    if (quoted || !isPlainChar(c)) f.plain = false;
  }

  // A word of a command context ended: reserved words open and close
  // contexts; the ROOT's words are recorded for the stage.
  void endWord() {
    auto& f = stack.back();
    if (!f.inWord) return;
    f.inWord = false;
    std::string word = f.word;
    size_t at = i - word.size();
    if (!f.quoted) {
      static const std::vector<std::string> keepStart = {"then", "do", "else", "elif", "!", "time"};
      if (f.context == Context::CASE && word == "esac") {
        stack.pop_back();
        stack.back().commandStart = false;
        return;
      }
      if (f.commandStart) {
        if (word == "if" || word == "while" || word == "until" || word == "{") {
          stack.push_back({word == "if" ? Context::IF : word == "{" ? Context::BRACE : Context::LOOP, at, word});
          return;
        }
        if (word == "for" || word == "select" || word == "case") {
          stack.push_back({word == "case" ? Context::CASE : Context::LOOP, at, word});
          stack.back().commandStart = false;
          return;
        }
        if ((word == "fi" && f.context == Context::IF) || (word == "done" && f.context == Context::LOOP) ||
            (word == "}" && f.context == Context::BRACE)) {
          stack.pop_back();
          stack.back().commandStart = false;
          return;
        }
        if (std::find(keepStart.begin(), keepStart.end(), word) != keepStart.end()) return;
      }
    }
    if (f.context == Context::ROOT) {
      if (f.commandStart && !programSeen && !isAssignment(word)) {
        programSeen = true;
        if (f.plain) {
          current.program = fs::path(word).filename().string();
          if (word.find('/') != std::string::npos) current.words.push_back(word);
        }
      } else if (f.plain) {
        current.words.push_back(word);
      }
    }
    if (!(f.commandStart && isAssignment(word))) f.commandStart = false;
  }

  // Note: endWord() may open or close a context; take stack.back() afresh
  // after it.
  void commandChar() {
    char c = line[i];
    if (isBlank(c)) {
      endWord();
      i++;
    } else if (c == '\n') {
      endWord();
      if (stack.back().context == Context::ROOT && !trim(line.substr(stageStart, i - stageStart)).empty()) {
        fail(i, "a new line ends the pipeline here; squall run -c runs one pipeline (end a line with "
                "'|' or '\\' to go on)");
      }
      stack.back().commandStart = true;
      i++;
    } else if (c == '#' && !stack.back().inWord) {
      while (i < line.size() && line[i] != '\n') i++;
    } else if (c == '\\') {
      if (peek() == '\n') {  // a line continuation: removed by the shell
        i += 2;
        return;
      }
      addToWord(c, true);
      if (i + 1 < line.size()) addToWord(line[i + 1], true);
      i += 2;
    } else if (c == '\'') {
      size_t from = i;
      skipSingleQuote();
      for (size_t k = from; k < i; k++) addToWord(line[k], true);
    } else if (c == '"') {
      addToWord(c, true);
      stack.push_back({Context::DOUBLE_QUOTE, i++, "\""});
    } else if (c == '$' || c == '`') {
      addToWord(c, true);
      if (!expansion()) i++;
    } else if (c == '(') {
      // `name()`: a function definition, whose body follows the ')'.
      bool afterWord = stack.back().inWord;
      endWord();
      stack.push_back({Context::PAREN, i++, "("});
      stack.back().functionParens = afterWord;
    } else if (c == ')') {
      endWord();
      auto context = stack.back().context;
      if (context == Context::PAREN) {
        bool function = stack.back().functionParens;
        stack.pop_back();
        stack.back().commandStart = function;
      } else if (context == Context::CASE) {
        stack.back().commandStart = true;  // the end of a pattern
      } else {
        fail(i, "this ')' closes nothing");
      }
      i++;
    } else if (c == '<' || c == '>') {
      redirection();
    } else if (isOperatorChar(c)) {
      endWord();
      if (stack.back().context == Context::ROOT) {
        rootOperator();
      } else {
        // Inside a group every operator is the group's business.
        while (i < line.size() && (line[i] == c || (c == '|' && line[i] == '&'))) i++;
        stack.back().commandStart = true;
      }
    } else {
      addToWord(c, false);
      i++;
    }
  }

  // `|`, `&` or `;` at the top of the line.
  void rootOperator() {
    char c = line[i];
    char next = peek();
    if (c == '|') {
      if (next == '|') {
        fail(i, "'||' joins two pipelines; squall run -c runs one (put it inside one stage's group, "
                "e.g. '( grep ERROR || true )')");
      }
      if (next == '&') fail(i, "'|&' is bash for '2>&1 |'; write that (stages run with /bin/sh)");
      auto text = trim(line.substr(stageStart, i - stageStart));
      if (text.empty()) {
        fail(i, stages.empty() ? "the line starts with '|': the first stage is missing"
                               : "nothing between this '|' and the one before");
      }
      finishStage(text);
      stageStart = ++i;
      stack[0].commandStart = true;
      return;
    }
    if (c == '&') {
      if (next == '&') {
        fail(i, "'&&' joins two pipelines; squall run -c runs one (group them in one stage: "
                "'{ a && b; }')");
      }
      if (next == '>') {
        fail(i, "'&>' is bash; in /bin/sh it runs the command in the background (write '> FILE 2>&1')");
      }
      fail(i, "'&' would run the pipeline in the background; squall run -c runs one pipeline and "
              "waits for it");
    }
    fail(i, "';' ends the pipeline; squall run -c runs one (group commands in one stage: "
            "'{ a; b; }' or '( a; b )')");
  }

  void finishStage(const std::string& text) {
    current.text = text;
    size_t begin = line.find_first_not_of(" \t\n", stageStart);
    current.column = begin + 1;
    if (text.rfind("call", 0) == 0 && (text.size() == 4 || isBlank(text[4]) || text[4] == '\n')) {
      readCall(begin + 4, begin + text.size());
    }
    stages.push_back(std::move(current));
    current = PipeStage();
    programSeen = false;
  }

  // The words of a call stage after `call`, in line[from, to): no shell
  // runs them, so quotes and backslashes are removed as sh would and what
  // sh would expand or redirect is refused. The splitter has checked that
  // quotes are closed.
  void readCall(size_t from, size_t to) {
    auto stage = "stage " + std::to_string(stageNumber()) + " calls a function, which no shell runs: ";
    std::vector<std::pair<std::string, size_t>> words;  // word, where it starts
    bool inWord = false;
    auto add = [&](size_t at, const std::string& text) {
      if (!inWord) words.emplace_back("", at);
      inWord = true;
      words.back().first += text;
    };
    for (size_t k = from; k < to;) {
      char c = line[k];
      if (isBlank(c) || c == '\n') {
        inWord = false;
        k++;
      } else if (c == '#' && !inWord) {
        while (k < to && line[k] != '\n') k++;
      } else if (c == '\\') {
        add(k, line[k + 1] == '\n' ? "" : line.substr(k + 1, 1));
        k += 2;
      } else if (c == '\'') {
        size_t close = line.find('\'', k + 1);
        if (close == std::string::npos || close >= to) fail(k, "the \"'\" here is never closed");
        add(k, line.substr(k + 1, close - k - 1));
        k = close + 1;
      } else if (c == '"') {
        add(k, "");
        for (k++; k < to && line[k] != '"';) {
          if (line[k] == '$' || line[k] == '`') {
            fail(k, stage + "'" + line[k] + "' would not be expanded (write '\\" + line[k] + "' to pass it on)");
          }
          bool escape = line[k] == '\\' && std::string_view("$`\"\\\n").find(line[k + 1]) != std::string_view::npos;
          if (escape) k++;
          if (!(escape && line[k] == '\n')) words.back().first += line[k];
          k++;
        }
        k++;
      } else if (c == '$' || c == '`') {
        fail(k, stage + "'" + c + "' would not be expanded (quote it, '\\" + c + "', to pass it on)");
      } else if (c == '<' || c == '>') {
        fail(k, stage + "its input is the stage before it (or --stdin) and its output goes to the stage "
                "after it, so a redirection does not apply");
      } else if (c == '(' || c == ')') {
        fail(k, stage + "quote '" + c + "' to pass it on");
      } else {
        add(k, std::string(1, c));
        k++;
      }
    }
    if (words.empty()) {
      fail(from - 4, "stage " + std::to_string(stageNumber()) + " calls no function: write call "
                     "EXECUTOR/FUNCTION [CONFIG...]");
    }
    if (auto problem = callNameProblem(words[0].first)) {
      fail(words[0].second, "stage " + std::to_string(stageNumber()) + ": " + *problem);
    }
    current.function = words[0].first;
    for (size_t w = 1; w < words.size(); w++) current.config += (w > 1 ? " " : "") + words[w].first;
    current.words.clear();  // a config, not files a shell opens
  }

  // `<` or `>` at i, in any command context: the ROOT's are checked.
  void redirection() {
    // A word of digits right before is the file descriptor ("2>").
    int fd = line[i] == '<' ? 0 : 1;
    if (stack.back().inWord) {
      auto& f = stack.back();
      bool digits = !f.quoted && !f.word.empty() &&
                    f.word.find_first_not_of("0123456789") == std::string::npos;
      if (digits) {
        fd = std::stoi(f.word.substr(0, 4));
        f.inWord = false;
      } else {
        endWord();
      }
    }
    size_t at = i;
    bool root = stack.back().context == Context::ROOT;
    bool duplicate = false;
    if (line[i] == '<') {
      if (peek() == '<') {
        if (root) fail(at, "here-documents ('<<') are not supported by squall run -c; give stage 1 "
                           "its input with --stdin FILE");
        i += peek(2) == '-' ? 3 : 2;
      } else {
        duplicate = peek() == '&';
        i += peek() == '&' || peek() == '>' ? 2 : 1;
      }
    } else {
      duplicate = peek() == '&';
      i += peek() == '>' || peek() == '|' || peek() == '&' ? 2 : 1;
    }
    while (i < line.size() && isBlank(line[i])) i++;
    size_t targetAt = i;
    // The target word, quotes and escapes included.
    while (i < line.size() && !isBlank(line[i]) && line[i] != '\n' && !isOperatorChar(line[i])) {
      if (line[i] == '\'') {
        skipSingleQuote();
      } else if (line[i] == '"') {
        auto close = i + 1;
        while (close < line.size() && line[close] != '"') close += line[close] == '\\' ? 2 : 1;
        if (close >= line.size()) fail(i, "the '\"' here is never closed");
        i = close + 1;
      } else if (line[i] == '\\') {
        i += 2;
      } else if (line[i] == '$' && (peek() == '(' || peek() == '{')) {
        break;  // an expansion: read by the command context
      } else {
        i++;
      }
    }
    std::string target = line.substr(targetAt, std::min(i, line.size()) - targetAt);
    if (!root) return;  // a redirection leaves the command position as it was
    if (target.empty() && !(i < line.size() && line[i] == '$')) {
      fail(at, "this redirection has no file name");
    }
    if (duplicate && (target.empty() || target == "-" ||
                      target.find_first_not_of("0123456789") == std::string::npos)) {
      return;  // 2>&1, >&2, <&0, 3>&-
    }
    if (fd == 0 && !stages.empty()) {
      fail(at, "stage " + std::to_string(stageNumber()) + " reads its stdin from a file, but its stdin "
               "is the output of stage " + std::to_string(stageNumber() - 1));
    }
    if (fd == 0) current.stdinRedirectColumn = at + 1;
    std::string bare = target;
    while (!bare.empty() && (bare[0] == '"' || bare[0] == '\'')) bare.erase(0, 1);
    if (!bare.empty() && bare[0] != '/' && bare[0] != '$' && bare[0] != '~') {
      fail(targetAt, "'" + target + "' is a relative path; each stage runs in a sandbox on a governor "
                     "that is removed when it ends, so name files by absolute path" +
                     (fd == 0 ? std::string(" (or send a local file to stage 1 with --stdin FILE)")
                              : std::string(" (write the last stage's output here with -o FILE)")));
    }
  }
};

std::string taskName(size_t index, const std::string& program) {
  std::string name = std::to_string(index + 1) + "-";
  for (char c : program) {
    if (isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.') name += c;
  }
  return name.back() == '-' ? name + "sh" : name;
}

}  // namespace

std::vector<PipeStage> splitShellPipe(const std::string& line) { return PipeSplitter(line).split(); }

PipelinePlan planCommand(const std::vector<PipeStage>& stages, const CommandOptions& options) {
  PipelinePlan plan;
  plan.name = options.name;
  plan.steps = stages.size();
  plan.fromCommandLine = true;
  for (size_t i = 0; i < stages.size(); i++) {
    auto& stage = stages[i];
    bool call = !stage.function.empty();
    bool last = i + 1 == stages.size();
    PlannedTask task;
    task.cpus = options.cpus;
    if (call) {
      task.kind = PlannedTask::Kind::CALL;
      auto dotted = stage.function;
      std::replace(dotted.begin(), dotted.end(), '/', '.');
      task.step = taskName(i, dotted);
      task.function = stage.function;
      task.config = stage.config;
    } else {
      task.kind = PlannedTask::Kind::EXECUTE;
      task.step = taskName(i, stage.program);
      task.shell = true;
      task.args = {stage.text};
      task.env = options.env;
    }
    task.name = task.step;
    if (i == 0 && !options.stdinFile.empty()) {
      if (stage.stdinRedirectColumn) {
        throw PipelineError("-c: column " + std::to_string(stage.stdinRedirectColumn) +
                            ": stage 1 reads its stdin from a file, and --stdin gives it one too");
      }
      PlannedInput in;
      in.isStdin = !call;
      in.localPath = options.stdinFile == "-" ? "/dev/stdin" : options.stdinFile;
      task.inputs.push_back(in);
    }
    if (i > 0) {
      PlannedInput in;
      in.isStdin = !call;
      in.task = i - 1;
      in.stream = true;
      task.inputs.push_back(in);
    }
    PlannedOutput out;
    out.name = call ? "out" : "stdout";
    // A function's output is a stream only when the next stage reads it.
    out.kind = call && last ? ObjectKind::BLOB : ObjectKind::STREAM;
    if (last) out.collect = options.outputFile.empty() ? "-" : options.outputFile;
    task.outputs.push_back(out);
    plan.tasks.push_back(std::move(task));
  }
  return plan;
}

std::vector<std::string> relativeLocalPaths(const std::vector<PipeStage>& stages, const std::string& dir) {
  std::vector<std::string> found;
  for (size_t i = 0; i < stages.size(); i++) {
    for (auto& word : stages[i].words) {
      if (word.empty() || word[0] == '-' || word[0] == '/' || word == "." || word == ".." ||
          isAssignment(word)) {
        continue;
      }
      std::error_code ec;
      if (fs::exists(fs::symlink_status(fs::path(dir) / word, ec))) {
        found.push_back("stage " + std::to_string(i + 1) + ": '" + word + "'");
      }
    }
  }
  return found;
}

}  // namespace squall
