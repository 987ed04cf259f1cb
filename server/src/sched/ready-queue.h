// Tasks waiting to be placed, highest priority first (a task's b-level:
// the longest expected path from it to the end of its graph), then in the
// order they became ready. Loop thread only.
#pragma once

#include "graph.h"

#include <queue>
#include <vector>

namespace squall {

class ReadyQueue {
 public:
  struct Entry {
    double priority;
    uint64_t order;
    Id id;
  };

  void push(Id id, double priority) { heap.push(Entry{priority, nextOrder++, id}); }
  // An entry taken by pop() and not placed: back where it was.
  void putBack(const Entry& entry) { heap.push(entry); }
  Entry pop() {
    Entry top = heap.top();
    heap.pop();
    return top;
  }
  bool empty() const { return heap.empty(); }
  // Every entry in the order pop() would give them.
  std::vector<Entry> inOrder() const {
    auto copy = heap;
    std::vector<Entry> out;
    out.reserve(copy.size());
    for (; !copy.empty(); copy.pop()) out.push_back(copy.top());
    return out;
  }
  size_t size() const { return heap.size(); }

 private:
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.priority != b.priority) return a.priority < b.priority;
      return a.order > b.order;
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, Later> heap;
  uint64_t nextOrder = 0;
};

}  // namespace squall
