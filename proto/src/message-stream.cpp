#include <squall/proto/message-stream.h>

#include <capnp/rpc.capnp.h>
#include <capnp/serialize.h>
#include <cstring>
#include <kj/debug.h>
#include <cerrno>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

namespace squall {

namespace {

constexpr size_t WORD = sizeof(capnp::word);

// Cap'n Proto's stream framing: a table of (segment count - 1) and each
// segment's size in words, as little-endian 32-bit numbers, padded to a
// whole word; then the segments.
size_t tableWords(size_t segmentCount) { return (segmentCount + 2) / 2; }

uint32_t readLe32(const kj::byte* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

void writeLe32(kj::byte* p, uint32_t v) {
  p[0] = static_cast<kj::byte>(v);
  p[1] = static_cast<kj::byte>(v >> 8);
  p[2] = static_cast<kj::byte>(v >> 16);
  p[3] = static_cast<kj::byte>(v >> 24);
}

size_t messageBytes(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
  size_t words = tableWords(segments.size());
  for (auto& s : segments) words += s.size();
  return words * WORD;
}

}  // namespace

BufferedMessageStream::BufferedMessageStream(kj::AsyncIoStream& stream)
    : stream(stream), buffer(kj::heapArray<capnp::word>(READ_BUFFER_BYTES / WORD)) {}

BufferedMessageStream::BufferedMessageStream(kj::AsyncCapabilityStream& stream)
    : stream(stream), capStream(&stream), buffer(kj::heapArray<capnp::word>(READ_BUFFER_BYTES / WORD)) {}

BufferedMessageStream::~BufferedMessageStream() noexcept(false) {}

// ------------------------------------------------------------ reading

kj::Promise<size_t> BufferedMessageStream::readSome(kj::byte* to, size_t min, size_t max, size_t maxFds) {
  counts_.reads++;
  if (capStream == nullptr || maxFds == 0) return stream.tryRead(to, min, max);
  // At least one byte, not `min`: kj would gather several recvmsg()s into
  // one read, and then the descriptors could not be placed (see the header).
  uint64_t at = base + static_cast<uint64_t>(to - bytes());
  // One space for every read (one read at a time): a new array of 128
  // descriptors for each read was ~5% of an executor's cpu.
  if (fdScratch.size() < maxFds) fdScratch = kj::heapArray<kj::AutoCloseFd>(maxFds);
  return capStream->tryReadWithFds(to, 1, max, fdScratch.begin(), maxFds)
      .then([this, to, min, max, maxFds, at](kj::AsyncCapabilityStream::ReadResult r) mutable -> kj::Promise<size_t> {
        if (r.capCount > 0 && r.byteCount > 0) {
          auto got = kj::heapArrayBuilder<kj::AutoCloseFd>(r.capCount);
          for (size_t i = 0; i < r.capCount; i++) got.add(kj::mv(fdScratch[i]));
          fdBundles.push_back(FdBundle{at + r.byteCount - 1, got.finish()});
        }
        // Any not taken (none came with bytes) close now.
        for (size_t i = 0; i < r.capCount; i++) fdScratch[i] = kj::AutoCloseFd();
        if (r.byteCount == 0 || r.byteCount >= min) return r.byteCount;
        return readSome(to + r.byteCount, min - r.byteCount, max - r.byteCount, maxFds)
            .then([done = r.byteCount](size_t more) { return done + more; });
      });
}

kj::Promise<void> BufferedMessageStream::fill(size_t n, size_t maxFds) {
  KJ_ASSERT(n <= READ_BUFFER_BYTES);
  if (available() >= n || eof) return kj::READY_NOW;
  if (begin + n > READ_BUFFER_BYTES) {
    // Messages start on whole words, so what moves keeps its alignment.
    memmove(bytes(), bytes() + begin, available());
    base += begin;
    end_ -= begin;
    begin = 0;
  }
  size_t need = n - available();
  return readSome(bytes() + end_, need, READ_BUFFER_BYTES - end_, maxFds).then([this, need](size_t got) {
    end_ += got;
    if (got < need) eof = true;
  });
}

void BufferedMessageStream::gateReads(size_t messages, size_t words) {
  auto paf = kj::newPromiseAndFulfiller<void>();
  gate = Gate{messages, words, kj::mv(paf.fulfiller), paf.promise.fork()};
}

void BufferedMessageStream::openGate() {
  KJ_IF_MAYBE(g, gate) {
    auto opener = kj::mv(g->opener);
    gate = nullptr;
    opener->fulfill();
  }
}

kj::Promise<void> BufferedMessageStream::mayRead(size_t words) {
  KJ_IF_MAYBE(g, gate) {
    bool fits = words == 0 ? g->messagesLeft > 0 : words <= g->maxWords;
    if (!fits) return g->opened.addBranch();
  }
  return kj::READY_NOW;
}

kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> BufferedMessageStream::tryReadMessage(
    kj::ArrayPtr<kj::AutoCloseFd> fdSpace, capnp::ReaderOptions options, kj::ArrayPtr<capnp::word>) {
  KJ_IF_MAYBE(g, gate) {
    if (g->messagesLeft == 0) {
      return mayRead(0).then([this, fdSpace, options]() { return tryReadMessage(fdSpace, options); });
    }
  }
  size_t maxFds = fdSpace.size();
  return fill(WORD, maxFds).then([this, fdSpace, options, maxFds]() -> kj::Promise<kj::Maybe<MessageReaderAndFds>> {
    if (available() == 0) return kj::Maybe<MessageReaderAndFds>(nullptr);  // the end, between messages
    if (available() < WORD) return KJ_EXCEPTION(DISCONNECTED, "Premature EOF.");
    uint32_t segmentCount = readLe32(bytes() + begin) + 1;
    // (A count of 0 is 2^32 that wrapped.)
    KJ_REQUIRE(segmentCount != 0 && segmentCount < 512, "Message has too many segments.");
    size_t headerBytes = tableWords(segmentCount) * WORD;
    return fill(headerBytes, maxFds).then([this, fdSpace, options, segmentCount,
                                           headerBytes]() -> kj::Promise<kj::Maybe<MessageReaderAndFds>> {
      if (available() < headerBytes) return KJ_EXCEPTION(DISCONNECTED, "Premature EOF.");
      const kj::byte* table = bytes() + begin;
      uint64_t words = 0;
      for (uint32_t i = 0; i < segmentCount; i++) words += readLe32(table + 4 + 4 * i);
      // As capnp checks: a peer cannot make us allocate more than a message
      // we would accept could hold.
      KJ_REQUIRE(words <= options.traversalLimitInWords,
                 "Message is too large.  To increase the limit on the receiving end, see "
                 "capnp::ReaderOptions.");
      if (gate != nullptr) {
        // Only its header is read: the rest stays in the kernel meanwhile.
        return mayRead(words).then([this, headerBytes, words, fdSpace, options]() {
          return readBody(headerBytes, words, fdSpace, options);
        });
      }
      return readBody(headerBytes, words, fdSpace, options);
    });
  });
}

kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> BufferedMessageStream::readBody(
    size_t headerBytes, size_t words, kj::ArrayPtr<kj::AutoCloseFd> fdSpace, capnp::ReaderOptions options) {
  size_t total = headerBytes + words * WORD;
  uint64_t start = base + begin;
  if (total <= READ_BUFFER_BYTES) {
    return fill(total, fdSpace.size()).then([this, total, start, fdSpace, options]() -> kj::Maybe<MessageReaderAndFds> {
      if (available() < total) kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "Premature EOF."));
      auto message = kj::heapArray<capnp::word>(total / WORD);
      memcpy(message.begin(), bytes() + begin, total);
      begin += total;
      return deliver(kj::mv(message), start, fdSpace, options);
    });
  }
  // Larger than the buffer: what is buffered, then the rest read straight
  // into the message's own words (no descriptors can ride there: they come
  // with a message's first bytes, read already).
  auto message = kj::heapArray<capnp::word>(total / WORD);
  auto* to = reinterpret_cast<kj::byte*>(message.begin());
  size_t have = available();
  memcpy(to, bytes() + begin, have);
  base += end_;
  begin = end_ = 0;
  counts_.reads++;
  return stream.tryRead(to + have, total - have, total - have)
      .then([this, message = kj::mv(message), have, total, start, fdSpace,
             options](size_t got) mutable -> kj::Maybe<MessageReaderAndFds> {
        base += got;
        if (have + got < total) {
          eof = true;
          kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "Premature EOF."));
        }
        return deliver(kj::mv(message), start, fdSpace, options);
      });
}

capnp::MessageReaderAndFds BufferedMessageStream::deliver(kj::Array<capnp::word> message, uint64_t start,
                                                          kj::ArrayPtr<kj::AutoCloseFd> fdSpace,
                                                          capnp::ReaderOptions options) {
  counts_.messagesIn++;
  KJ_IF_MAYBE(g, gate) {
    if (g->messagesLeft > 0) g->messagesLeft--;
  }
  uint64_t end = start + message.size() * WORD;
  size_t fdCount = 0;
  while (!fdBundles.empty() && fdBundles.front().lastByte < end) {
    auto bundle = kj::mv(fdBundles.front());
    fdBundles.pop_front();
    // Before this message: it had no reader waiting for them (cannot happen
    // with a sane peer); they close here.
    if (bundle.lastByte < start) continue;
    for (auto& fd : bundle.fds) {
      if (fdCount < fdSpace.size()) fdSpace[fdCount++] = kj::mv(fd);
    }
  }
  auto reader = kj::heap<capnp::FlatArrayMessageReader>(message.asPtr(), options).attach(kj::mv(message));
  if (rpcMessages) noteRead(*reader);
  return MessageReaderAndFds{kj::mv(reader), fdSpace.slice(0, fdCount)};
}

// ------------------------------------------------------------ writing

void BufferedMessageStream::append(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
  size_t at = batch.size();
  size_t table = tableWords(segments.size()) * WORD;
  batch.resize(at + table);
  auto* p = batch.begin() + at;
  memset(p, 0, table);
  writeLe32(p, static_cast<uint32_t>(segments.size() - 1));
  for (size_t i = 0; i < segments.size(); i++) writeLe32(p + 4 + 4 * i, static_cast<uint32_t>(segments[i].size()));
}

kj::Promise<void> BufferedMessageStream::writeMessage(kj::ArrayPtr<const int> fds,
                                                      kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
  KJ_IF_MAYBE(e, writeError) { return kj::cp(*e); }
  KJ_REQUIRE(segments.size() > 0, "a message has at least one segment");
  counts_.messagesOut++;
  bool cleanUp = rpcMessages && cleanUpOnly(segments);
  size_t size = messageBytes(segments);
  unwritten += size;
  if (unwritten > MAX_UNWRITTEN_BYTES || waitingWrites >= MAX_WAITING_WRITES) return cutOff();
  if (fds.size() > 0) {
    KJ_REQUIRE(capStream != nullptr, "file descriptors travel only over a Unix socket");
    // Alone, its descriptors on its first byte (the header says why).
    if (batch.size() > 0) flush();
    append(segments);
    return flush(segments, fds);
  }
  if (size >= COPY_LIMIT_BYTES) {
    // Its table joins the batch; its words are written from where they are.
    append(segments);
    return flush(segments);
  }
  append(segments);
  for (auto& s : segments) batch.addAll(s.asBytes());
  if (unwritten > HIGH_WATER_BYTES) return flush();
  if (cleanUp && !flushScheduled && blockingFd < 0 && ++held < MAX_HELD_MESSAGES) return kj::READY_NOW;
  scheduleFlush();
  return kj::READY_NOW;
}

void BufferedMessageStream::noteRead(capnp::MessageReader& message) {
  // A malformed message is the RPC system's to refuse, not ours.
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                auto root = message.getRoot<capnp::rpc::Message>();
                if (root.isReturn()) answered.insert(root.getReturn().getAnswerId());
              })) {
    (void)e;
  }
}

bool BufferedMessageStream::cleanUpOnly(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
  bool cleanUp = false;
  // (Not an RPC message: nothing to hold.)
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                capnp::SegmentArrayMessageReader reader(segments);
                auto root = reader.getRoot<capnp::rpc::Message>();
                switch (root.which()) {
                  case capnp::rpc::Message::FINISH:
                    // Unanswered, it cancels the call: that may not wait.
                    cleanUp = answered.erase(root.getFinish().getQuestionId()) > 0;
                    break;
                  case capnp::rpc::Message::RELEASE:
                    cleanUp = true;
                    break;
                  case capnp::rpc::Message::CALL:
                    // A question id used again: a Return read for its
                    // earlier use is not this one's.
                    answered.erase(root.getCall().getQuestionId());
                    break;
                  default:
                    break;
                }
              })) {
    (void)e;
  }
  return cleanUp;
}

kj::Promise<void> BufferedMessageStream::writeMessages(
    kj::ArrayPtr<kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>>> messages) {
  kj::Vector<kj::Promise<void>> written;
  for (auto& m : messages) written.add(writeMessage(nullptr, m));
  return kj::joinPromises(written.releaseAsArray());
}

void BufferedMessageStream::scheduleFlush() {
  if (flushScheduled) return;
  flushScheduled = true;
  scheduledFlush = kj::evalLast([this]() {
                     flushScheduled = false;
                     // A failure is kept in writeError: the next write sees it,
                     // and the peer's end of the connection fails the reads.
                     if (batch.size() > 0) flush().detach([](kj::Exception&&) {});
                   }).eagerlyEvaluate(nullptr);
}

void BufferedMessageStream::writeBlocking(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) {
  counts_.writes++;
  size_t piece = 0, offset = 0;
  while (piece < pieces.size()) {
    if (offset == pieces[piece].size()) {
      piece++;
      offset = 0;
      continue;
    }
    struct iovec iov[16];
    int count = 0;
    for (size_t i = piece; i < pieces.size() && count < 16; i++) {
      size_t skip = i == piece ? offset : 0;
      iov[count].iov_base = const_cast<kj::byte*>(pieces[i].begin() + skip);
      iov[count].iov_len = pieces[i].size() - skip;
      count++;
    }
    ssize_t n = ::writev(blockingFd, iov, count);
    if (n < 0) {
      int error = errno;
      if (error == EINTR) continue;
      if (error == EAGAIN || error == EWOULDBLOCK) {
        struct pollfd ready = {blockingFd, POLLOUT, 0};
        ::poll(&ready, 1, -1);
        continue;
      }
      auto e = error == EPIPE || error == ECONNRESET
                   ? KJ_EXCEPTION(DISCONNECTED, "the peer went", strerror(error))
                   : KJ_EXCEPTION(FAILED, "write failed", strerror(error));
      if (writeError == nullptr) writeError = kj::cp(e);
      kj::throwFatalException(kj::mv(e));
    }
    size_t done = static_cast<size_t>(n);
    while (done > 0 && piece < pieces.size()) {
      size_t left = pieces[piece].size() - offset;
      if (done < left) {
        offset += done;
        done = 0;
      } else {
        done -= left;
        piece++;
        offset = 0;
      }
    }
  }
}

void BufferedMessageStream::writeNow() {
  KJ_REQUIRE(blockingFd >= 0, "writeNow() needs blocking writes");
  KJ_IF_MAYBE(e, writeError) { kj::throwFatalException(kj::cp(*e)); }
  if (batch.size() == 0) return;
  auto data = batch.releaseAsArray();
  kj::ArrayPtr<const kj::byte> pieces[1] = {data.asPtr()};
  writeBlocking(pieces);
  unwritten -= kj::min(unwritten, data.size());
}

void BufferedMessageStream::writeNow(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) {
  KJ_REQUIRE(blockingFd >= 0, "writeNow() needs blocking writes");
  KJ_REQUIRE(segments.size() > 0, "a message has at least one segment");
  counts_.messagesOut++;
  append(segments);
  for (auto& s : segments) batch.addAll(s.asBytes());
  writeNow();
}

kj::Promise<void> BufferedMessageStream::flush(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> more,
                                               kj::ArrayPtr<const int> fds) {
  held = 0;
  // Every byte here was counted in `unwritten` when its message came.
  auto data = batch.releaseAsArray();
  size_t owed = data.size();
  for (auto& s : more) owed += s.size() * WORD;
  if (blockingFd >= 0 && fds.size() == 0) {
    KJ_IF_MAYBE(e, writeError) { return kj::cp(*e); }
    auto pieces = kj::heapArrayBuilder<kj::ArrayPtr<const kj::byte>>(1 + more.size());
    pieces.add(data.asPtr());
    for (auto& s : more) pieces.add(s.asBytes());
    auto all = pieces.finish();
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { writeBlocking(all); })) {
      unwritten -= kj::min(unwritten, owed);
      return kj::mv(*e);
    }
    unwritten -= kj::min(unwritten, owed);
    return kj::READY_NOW;
  }
  auto paf = kj::newPromiseAndFulfiller<void>();
  waitingWrites++;
  writes = writes
               .then([this, data = kj::mv(data), more, fds]() mutable -> kj::Promise<void> {
                 KJ_IF_MAYBE(e, writeError) { return kj::cp(*e); }
                 if (data.size() == 0 && more.size() == 0) return kj::READY_NOW;  // end(): only the order
                 auto pieces = kj::heapArrayBuilder<kj::ArrayPtr<const kj::byte>>(1 + more.size());
                 pieces.add(data.asPtr());
                 for (auto& s : more) pieces.add(s.asBytes());
                 auto all = pieces.finish();
                 counts_.writes++;
                 kj::Promise<void> written = fds.size() > 0
                                                 ? capStream->writeWithFds(all[0], all.slice(1, all.size()), fds)
                                                 : stream.write(all);
                 return written.attach(kj::mv(all), kj::mv(data));
               })
               .then(
                   [this, owed, fulfiller = paf.fulfiller.get()]() {
                     unwritten -= kj::min(unwritten, owed);
                     waitingWrites--;
                     fulfiller->fulfill();
                   },
                   [this, owed, fulfiller = paf.fulfiller.get()](kj::Exception&& e) {
                     unwritten -= kj::min(unwritten, owed);
                     waitingWrites--;
                     if (writeError == nullptr) writeError = kj::cp(e);
                     fulfiller->reject(kj::mv(e));
                   })
               .attach(kj::mv(paf.fulfiller))
               .eagerlyEvaluate(nullptr);
  return kj::mv(paf.promise);
}

kj::Exception BufferedMessageStream::cutOff() {
  auto e = KJ_EXCEPTION(DISCONNECTED, "the peer does not read what it is sent: connection cut", unwritten,
                        waitingWrites);
  if (writeError == nullptr) {
    writeError = kj::cp(e);
    // The reads end too, so that the connection's owner sees it go.
    KJ_IF_MAYBE(ignored, kj::runCatchingExceptions([&]() {
                  stream.abortRead();
                  stream.shutdownWrite();
                })) {
      (void)ignored;
    }
  }
  return e;
}

kj::Promise<void> BufferedMessageStream::drain() { return flush(); }

kj::Maybe<int> BufferedMessageStream::getSendBufferSize() {
  int size = 0;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                uint len = sizeof(size);
                stream.getsockopt(SOL_SOCKET, SO_SNDBUF, &size, &len);
              })) {
    (void)e;
    return nullptr;
  }
  return size;
}

kj::Promise<void> BufferedMessageStream::end() {
  return flush().then([this]() { stream.shutdownWrite(); });
}

}  // namespace squall
