#include <squall/proto/call-states.h>

#include <fcntl.h>
#include <kj/debug.h>
#include <squall/proto/errors.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {

namespace {
constexpr size_t TABLE_BYTES = CallStates::SLOTS * sizeof(std::atomic<uint32_t>);
static_assert(std::atomic<uint32_t>::is_always_lock_free, "the table is shared between processes");

std::atomic<uint32_t>* mapTable(int fd) {
  void* mapped = mmap(nullptr, TABLE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) KJ_FAIL_SYSCALL("mmap(call states)", errno);
  return static_cast<std::atomic<uint32_t>*>(mapped);
}
}  // namespace

CallStates::CallStates(kj::AutoCloseFd fd, std::atomic<uint32_t>* states) : fd(kj::mv(fd)), states(states) {}

CallStates::~CallStates() { munmap(states, TABLE_BYTES); }

kj::Own<CallStates> CallStates::create() {
  int raw;
  KJ_SYSCALL(raw = memfd_create("squall-call-states", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  kj::AutoCloseFd fd(raw);
  KJ_SYSCALL(ftruncate(fd, TABLE_BYTES));
  // Neither side can shrink it under the other's mapping.
  KJ_SYSCALL(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL));
  auto* states = mapTable(fd);
  auto table = kj::Own<CallStates>(new CallStates(kj::mv(fd), states), kj::_::HeapDisposer<CallStates>::instance);
  table->free.reserve(SLOTS);
  for (uint32_t n = SLOTS; n > 0; n--) table->free.push_back(n);
  return table;
}

kj::Own<CallStates> CallStates::map(int fd) {
  struct stat st;
  KJ_SYSCALL(fstat(fd, &st));
  SQUALL_REQUIRE(S_ISREG(st.st_mode) && static_cast<size_t>(st.st_size) == TABLE_BYTES,
                 "the call states are not a table of ", SLOTS, " states (", st.st_size, " bytes)");
  int seals = fcntl(fd, F_GET_SEALS);
  SQUALL_REQUIRE(seals >= 0 && (seals & F_SEAL_SHRINK) != 0, "the call states' size is not sealed");
  int copy;
  KJ_SYSCALL(copy = fcntl(fd, F_DUPFD_CLOEXEC, 0));
  kj::AutoCloseFd own(copy);
  auto* states = mapTable(own);
  return kj::Own<CallStates>(new CallStates(kj::mv(own), states), kj::_::HeapDisposer<CallStates>::instance);
}

kj::AutoCloseFd CallStates::duplicateFd() const {
  int copy;
  KJ_SYSCALL(copy = fcntl(fd, F_DUPFD_CLOEXEC, 0));
  return kj::AutoCloseFd(copy);
}

std::atomic<uint32_t>& CallStates::at(uint32_t n) {
  SQUALL_REQUIRE(n >= 1 && n <= SLOTS, "call state ", n, " is outside the table of ", SLOTS);
  return states[n - 1];
}

uint32_t CallStates::take() {
  if (free.empty()) return 0;
  uint32_t n = free.back();
  free.pop_back();
  at(n).store(QUEUED, std::memory_order_release);
  return n;
}

void CallStates::release(uint32_t n) {
  if (n == 0) return;
  at(n).store(FREE, std::memory_order_release);
  free.push_back(n);
}

bool CallStates::drop(uint32_t n) {
  if (n == 0) return false;
  uint32_t expected = QUEUED;
  return at(n).compare_exchange_strong(expected, DROPPED, std::memory_order_acq_rel);
}

bool CallStates::start(uint32_t n) {
  uint32_t expected = QUEUED;
  if (at(n).compare_exchange_strong(expected, STARTED, std::memory_order_acq_rel)) return true;
  return expected != DROPPED;
}

}  // namespace squall
