#include <squall/proto/call-states.h>

#include <algorithm>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>

namespace squall {
namespace {

TEST(CallStatesTest, TheExecutorStartsAQueuedCallAndTheGovernorCannotDropItThen) {
  auto governor = CallStates::create();
  auto fd = governor->duplicateFd();
  auto executor = CallStates::map(fd);
  uint32_t n = governor->take();
  ASSERT_GE(n, 1u);
  EXPECT_TRUE(executor->start(n));
  EXPECT_FALSE(governor->drop(n));
  governor->release(n);
}

TEST(CallStatesTest, ADroppedCallDoesNotStartAndItsSlotIsTakenAgainOnceReleased) {
  auto governor = CallStates::create();
  auto executor = CallStates::map(governor->duplicateFd());
  uint32_t n = governor->take();
  EXPECT_TRUE(governor->drop(n));
  EXPECT_FALSE(executor->start(n));
  governor->release(n);
  EXPECT_EQ(governor->take(), n);  // the most recently freed first
  EXPECT_TRUE(executor->start(n));
}

TEST(CallStatesTest, EverySlotCanBeTakenAndThenNoneIsLeft) {
  auto governor = CallStates::create();
  std::vector<uint32_t> taken;
  for (uint32_t i = 0; i < CallStates::SLOTS; i++) taken.push_back(governor->take());
  std::sort(taken.begin(), taken.end());
  for (uint32_t i = 0; i < CallStates::SLOTS; i++) EXPECT_EQ(taken[i], i + 1);
  EXPECT_EQ(governor->take(), 0u);
  governor->release(7);
  EXPECT_EQ(governor->take(), 7u);
}

TEST(CallStatesTest, ANumberOutsideTheTableIsRefused) {
  auto executor = CallStates::map(CallStates::create()->duplicateFd());
  EXPECT_ANY_THROW(executor->start(0));
  EXPECT_FALSE(CallStates::create()->drop(0));
  EXPECT_ANY_THROW(executor->start(CallStates::SLOTS + 1));
}

TEST(CallStatesTest, ADescriptorThatIsNoTableIsRefused) {
  int plain = memfd_create("not-a-table", MFD_CLOEXEC);
  ASSERT_GE(plain, 0);
  kj::AutoCloseFd own(plain);
  ASSERT_EQ(ftruncate(plain, 4096), 0);  // the right size, but unsealed
  EXPECT_ANY_THROW(CallStates::map(plain));
  int pipes[2];
  ASSERT_EQ(pipe(pipes), 0);
  kj::AutoCloseFd in(pipes[0]), out(pipes[1]);
  EXPECT_ANY_THROW(CallStates::map(pipes[0]));
}

// The two sides race for each call, through two mappings as the two
// processes have: exactly one wins every time.
TEST(CallStatesTest, WhenBothSidesRaceExactlyOneWins) {
  auto governor = CallStates::create();
  auto executor = CallStates::map(governor->duplicateFd());
  constexpr int ROUNDS = 20000;
  std::vector<uint32_t> slots(ROUNDS);
  std::vector<char> started(ROUNDS), dropped(ROUNDS);
  for (int round = 0; round < ROUNDS; round += CallStates::SLOTS) {
    int end = std::min<int>(ROUNDS, round + CallStates::SLOTS);
    for (int i = round; i < end; i++) slots[i] = governor->take();
    std::thread side([&]() {
      for (int i = round; i < end; i++) started[i] = executor->start(slots[i]);
    });
    for (int i = end - 1; i >= round; i--) dropped[i] = governor->drop(slots[i]);
    side.join();
    for (int i = round; i < end; i++) governor->release(slots[i]);
  }
  int both = 0, neither = 0;
  for (int i = 0; i < ROUNDS; i++) {
    both += started[i] && dropped[i];
    neither += !started[i] && !dropped[i];
  }
  EXPECT_EQ(both, 0);
  EXPECT_EQ(neither, 0);
}

}  // namespace
}  // namespace squall
