// Directories: build one from blobs, let a program write one, slice a file
// out of it, and unpack a dir locally.
#include <squall/client/client.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

int main() {
  squall::Client client;
  auto local = std::filesystem::temp_directory_path() /
               ("squall-guide-dirs-" + std::to_string(getpid()));
  // guide:begin
  auto session = client.newSession("dirs");
  // A dir from objects placed at relative paths (deep paths are created).
  auto config = session.makeDir({{"etc/greeting.txt", session.blob("hello")},
                                 {"etc/name.txt", session.blob("squall")}});
  // A program reads the dir as a directory and writes one as its output.
  auto report = session.execute(
      squall::Program::shell("mkdir out && cat cfg/etc/greeting.txt > out/a.txt"
                             " && echo ', world' >> out/a.txt && ls cfg/etc > out/files.txt")
          .input(config.output(), "cfg")
          .output("out", squall::ObjectKind::DIR)
          .name("report"));
  // One file out of it (a path ending in '/' would take a subdirectory).
  auto greeting = session.sliceDir(report.output(), "a.txt");
  greeting.output().keep();
  report.output().keep();
  session.submit();
  std::printf("%s", greeting.output().fetch().c_str());  // hello, world
  report.output().fetchDir(local.string());              // unpacked here
  // guide:end
  std::ifstream files(local / "files.txt");
  std::string line;
  while (std::getline(files, line)) std::printf("listed: %s\n", line.c_str());
  std::filesystem::remove_all(local);
  return 0;
}
