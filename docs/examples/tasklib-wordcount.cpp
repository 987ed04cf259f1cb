// docs/tasklib.md's word count, map and reduce: a book cut into parts, each
// part counted by text/count on a governor's warm executor, all at once;
// the counts added up by text/merge; the ten most frequent words printed.
// Needs governors started with --executor text=PROGRAM, PROGRAM built from
// docs/examples/tasklib/wordcount-executor.cpp. The book: argv[1], or the
// one the build names (tests/data/pipelines/data/book.txt).
#include <squall/client/client.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : SQUALL_EXAMPLE_BOOK;
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    std::fprintf(stderr, "cannot read the book %s\n", path);
    return 1;
  }
  std::stringstream read;
  read << file.rdbuf();
  const std::string book = read.str();
  squall::Client client;
  // guide:begin
  auto session = client.newSession("wordcount");
  const std::string stopWords = "a and for him in it of out the up while";
  // The map: four parts cut at line ends, counted in parallel.
  std::vector<squall::DataObject> counts;
  const size_t parts = 4;
  size_t start = 0;
  for (size_t i = 1; i <= parts && start < book.size(); i++) {
    size_t end = book.find('\n', std::max(start, book.size() * i / parts));
    end = i == parts || end == std::string::npos ? book.size() : end + 1;
    auto part = session.blob(book.substr(start, end - start), "part " + std::to_string(i));
    counts.push_back(session.call("text/count", {part}, stopWords).output());
    start = end;
  }
  // The reduce: every part's counts added up, then the first ten.
  auto merged = session.call("text/merge", counts);
  auto top = session.call("text/top", {merged.output()}, "10");
  top.output().keep();
  session.submit();
  std::printf("%s", top.output().fetch().c_str());
  // guide:end
  return 0;
}
