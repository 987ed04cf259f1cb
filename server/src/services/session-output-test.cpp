// SessionOutput: numbering, the bounded tail, what a watcher gets from
// where it asks, waits that end with output or a timeout.
#include "session-output.h"

#include <capnp/message.h>
#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <chrono>
#include <set>
#include <string>

namespace squall {
namespace {

struct Answer {
  std::vector<std::string> texts;
  uint64_t next = 0;
  uint64_t dropped = 0;
};

Answer fill(const SessionOutput& output, uint64_t session, uint64_t since) {
  capnp::MallocMessageBuilder message;
  auto results = message.initRoot<wire::ClientService::WatchOutputResults>();
  output.fill(session, since, results);
  Answer answer;
  for (auto chunk : results.getChunks()) answer.texts.push_back(chunk.getText().cStr());
  answer.next = results.getNext();
  answer.dropped = results.getDropped();
  return answer;
}

TEST(SessionOutputTest, AWatcherGetsEachChunkOnceInOrderFromWhereItAsks) {
  SessionOutput output(nullptr, 1);
  output.add(1, 10, false, "f pid=1", "g0", "one\n");
  output.add(1, 11, true, "g pid=2", "g0", "two\n");
  output.add(2, 20, false, "h pid=3", "g1", "other session\n");
  auto first = fill(output, 1, 0);
  EXPECT_EQ(first.texts, (std::vector<std::string>{"one\n", "two\n"}));
  EXPECT_EQ(first.next, 3u);
  EXPECT_EQ(first.dropped, 0u);
  EXPECT_TRUE(fill(output, 1, first.next).texts.empty());
  output.add(1, 10, false, "f pid=1", "g0", "three\n");
  auto second = fill(output, 1, first.next);
  EXPECT_EQ(second.texts, (std::vector<std::string>{"three\n"}));
  EXPECT_EQ(second.next, 4u);
  EXPECT_EQ(fill(output, 2, 0).texts, (std::vector<std::string>{"other session\n"}));
}

// Numbers go on from the clock: a watcher's number from before a server
// restart is older than every chunk after it, so it gets them all.
TEST(SessionOutputTest, AWatcherFromBeforeARestartGetsEverythingAfterIt) {
  auto nowUs = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  SessionOutput clocked;
  clocked.add(1, 1, false, "f", "g", "first\n");
  EXPECT_GE(fill(clocked, 1, 0).next, nowUs + 1);
  SessionOutput before(nullptr, 1000);
  before.add(1, 1, false, "f", "g", "old\n");
  uint64_t since = fill(before, 1, 0).next;
  SessionOutput after(nullptr, 5000);
  after.add(1, 1, false, "f", "g", "new\n");
  EXPECT_EQ(fill(after, 1, since).texts, (std::vector<std::string>{"new\n"}));
}

TEST(SessionOutputTest, TheTailIsBoundedAndAWatcherBehindIsToldHowMuchWentMissing) {
  SessionOutput output(nullptr, 1);
  std::string line(1000, 'x');
  size_t count = 3 * SessionOutput::MAX_SESSION_BYTES / line.size();
  for (size_t i = 0; i < count; i++) output.add(1, 1, false, "f", "g", line);
  size_t held = 0;
  uint64_t since = 1;
  uint64_t dropped = 0;
  for (int answers = 0; answers < 100; answers++) {
    auto answer = fill(output, 1, since);
    if (answers == 0) dropped = answer.dropped;
    if (answer.texts.empty()) break;
    held += answer.texts.size();
    since = answer.next;
  }
  EXPECT_LE(held * line.size(), SessionOutput::MAX_SESSION_BYTES);
  EXPECT_GT(held, 0u);
  EXPECT_EQ(dropped + held, count);
  // One chunk bigger than the tail keeps its end.
  output.add(3, 1, false, "f", "g", std::string(SessionOutput::MAX_SESSION_BYTES, 'a') + "END");
  auto big = fill(output, 3, 0);
  ASSERT_EQ(big.texts.size(), 1u);
  EXPECT_EQ(big.texts[0].size(), SessionOutput::MAX_SESSION_BYTES);
  EXPECT_EQ(big.texts[0].substr(big.texts[0].size() - 3), "END");
}

TEST(SessionOutputTest, OutputOfAClosedSessionIsDroppedAndForgottenTailsWakeTheirWatchers) {
  std::set<uint64_t> open = {1};
  SessionOutput output([&open](uint64_t id) { return open.count(id) != 0; }, 1);
  output.add(2, 1, false, "f", "g", "nobody\n");
  EXPECT_EQ(output.sessionCount(), 0u);
  auto io = kj::setupAsyncIo();
  auto waiting = output.whenPast(1, 0, io.provider->getTimer(), 30 * kj::SECONDS);
  EXPECT_FALSE(waiting.poll(io.waitScope));
  output.forget(1);
  EXPECT_TRUE(waiting.poll(io.waitScope));
  waiting.wait(io.waitScope);
}

TEST(SessionOutputTest, AWaitEndsWithTheNextChunkOrAfterItsTime) {
  SessionOutput output(nullptr, 1);
  auto io = kj::setupAsyncIo();
  auto& timer = io.provider->getTimer();
  auto waiting = output.whenPast(1, 0, timer, 30 * kj::SECONDS);
  EXPECT_FALSE(waiting.poll(io.waitScope));
  output.add(1, 1, false, "f", "g", "hello\n");
  EXPECT_TRUE(waiting.poll(io.waitScope));
  waiting.wait(io.waitScope);
  // Past what it holds: waits, and the timeout answers.
  auto timed = output.whenPast(1, 2, timer, 10 * kj::MILLISECONDS);
  timed.wait(io.waitScope);
  // Past a chunk it holds: at once.
  EXPECT_TRUE(output.whenPast(1, 1, timer, 30 * kj::SECONDS).poll(io.waitScope));
}

TEST(SessionOutputTest, TooManyWaitersAreAnsweredAtOnce) {
  SessionOutput output(nullptr, 1);
  auto io = kj::setupAsyncIo();
  std::vector<kj::Promise<void>> waits;
  for (size_t i = 0; i < SessionOutput::MAX_WAITERS; i++) {
    waits.push_back(output.whenPast(1, 0, io.provider->getTimer(), 30 * kj::SECONDS));
  }
  for (auto& w : waits) EXPECT_FALSE(w.poll(io.waitScope));
  EXPECT_TRUE(output.whenPast(1, 0, io.provider->getTimer(), 30 * kj::SECONDS).poll(io.waitScope));
  // Cancelled waits free their places.
  waits.clear();
  EXPECT_FALSE(output.whenPast(1, 0, io.provider->getTimer(), 30 * kj::SECONDS).poll(io.waitScope));
}

}  // namespace
}  // namespace squall
