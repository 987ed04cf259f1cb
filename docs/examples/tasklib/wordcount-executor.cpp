// The executor of docs/tasklib.md's word count, named "text": `count` (the
// map) turns one text into "word count" lines, `merge` (the reduce) adds up
// any number of those, `top` keeps the N most frequent, `words` is a
// stage of a streamed pipe (docs/examples/tasklib-stream.cpp). The client is
// docs/examples/tasklib-wordcount.cpp; tests/docs-test.cpp runs both.
// guide:begin
#include <squall/tasklib/tasklib.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

using Counts = std::map<std::string, uint64_t>;

// Calls `use` with each word of `text`: a run of ASCII letters, lower-cased.
template <typename Use>
void forEachWord(std::string_view text, Use&& use) {
  std::string word;
  for (size_t i = 0; i <= text.size(); i++) {
    if (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
    } else if (!word.empty()) {
      use(word);
      word.clear();
    }
  }
}

// Adds the "word count" lines of `text` (what count and merge write) to
// `counts`; a line of another shape fails the call, saying where.
void addCounts(std::string_view text, size_t input, Counts& counts) {
  for (size_t lineNumber = 1; !text.empty(); lineNumber++) {
    auto line = text.substr(0, text.find('\n'));
    text.remove_prefix(std::min(line.size() + 1, text.size()));
    auto space = line.rfind(' ');
    uint64_t n = 0;
    bool good = space != std::string_view::npos && space > 0;
    if (good) {
      auto [rest, error] = std::from_chars(line.data() + space + 1, line.data() + line.size(), n);
      good = error == std::errc() && rest == line.data() + line.size();
    }
    if (!good) {
      throw std::invalid_argument("input " + std::to_string(input) + " line " + std::to_string(lineNumber) +
                                  " is not 'word count': '" + std::string(line) + "'");
    }
    counts[std::string(line.substr(0, space))] += n;
  }
}

// "word count" lines, in the order of `counts`.
template <typename Pairs>
std::string countLines(const Pairs& counts) {
  std::string lines;
  for (auto& [word, n] : counts) lines += word + " " + std::to_string(n) + "\n";
  return lines;
}

int main(int argc, char** argv) {
  squall::Executor text("text");

  // State between calls: the stop words (the config of count) are parsed
  // once per process and again only when a call brings another list — as
  // a model or an index would be loaded once, not per call.
  std::string stopList;
  std::set<std::string> stopWords;

  // One text (input 0) → "word count" lines, sorted by word.
  text.add("count", [&stopList, &stopWords](squall::Call& call) {
    if (call.config() != stopList) {
      stopList = std::string(call.config());
      stopWords.clear();
      forEachWord(stopList, [&stopWords](const std::string& word) { stopWords.insert(word); });
    }
    Counts counts;
    forEachWord(call.input(0).text(), [&stopWords, &counts](const std::string& word) {
      if (stopWords.count(word) == 0) counts[word]++;
    });
    call.output(0).write(countLines(counts));
  });

  // Any number of count's (or merge's) outputs → one list, the most
  // frequent word first (ties by word). Merges of merges add up too.
  text.add("merge", [](squall::Call& call) {
    Counts total;
    for (size_t i = 0; i < call.inputCount(); i++) addCounts(call.input(i).text(), i, total);
    std::vector<std::pair<std::string, uint64_t>> sorted(total.begin(), total.end());
    std::stable_sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.second > b.second; });
    call.output(0).write(countLines(sorted));
  });

  // The first N (the config) lines of merge's output.
  text.add("top", [](squall::Call& call) {
    auto config = call.config();
    size_t n = 0;
    auto [rest, error] = std::from_chars(config.data(), config.data() + config.size(), n);
    if (error != std::errc() || rest != config.data() + config.size()) {
      throw std::invalid_argument("the config '" + std::string(config) + "' is not a number of lines");
    }
    auto lines = call.input(0).text();
    size_t end = 0;
    for (size_t i = 0; i < n && end < lines.size(); i++) {
      end = std::min(lines.find('\n', end), lines.size() - 1) + 1;
    }
    call.output(0).write(lines.substr(0, end));
  });

  // A stage of a streamed pipe: text as it comes (input 0: a live stream,
  // or a blob) → its words, one per line, sent on as they are found
  // (output 0, a stream). A word cut by the end of a read waits for the
  // rest.
  text.add("words", [](squall::Call& call) {
    auto& in = call.input(0);
    auto& out = call.output(0);
    std::string carry;
    auto send = [&carry, &out](std::string_view more, bool last) {
      carry.append(more);
      size_t cut = carry.size();
      while (!last && cut > 0 && std::isalpha(static_cast<unsigned char>(carry[cut - 1]))) cut--;
      std::string lines;
      forEachWord(std::string_view(carry).substr(0, cut), [&lines](const std::string& word) {
        lines += word + "\n";
      });
      out.write(lines);
      carry.erase(0, cut);
    };
    if (in.kind() == squall::DataKind::STREAM) {
      char buffer[1 << 16];
      for (size_t n; (n = in.read(buffer, sizeof buffer)) > 0;) send(std::string_view(buffer, n), false);
      send({}, true);
    } else {
      send(in.text(), true);
    }
  });

  return text.serve(argc, argv);
}
// guide:end
