// WorkQueue: background threads that run one job per queued key (a teardown per sandbox
// id), at idle CPU priority so that they never slow the commands of live sandboxes.
// Drain() waits until the queue is empty and no job runs. Thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/sync.h"

namespace sbx::core {

// Lowers the calling thread to idle CPU priority (processes it starts get normal back).
void BecomeIdle();

class WorkQueue {
 public:
  WorkQueue(int threads, std::function<void(const std::string&)> job);
  ~WorkQueue();  // finishes the queue, then joins
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Enqueue(const std::string& key);
  void Drain();
  int pending() const;  // queued and running
  bool stopping() const;

 private:
  void Loop();

  std::function<void(const std::string&)> job_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<std::string> queue_ SBX_GUARDED_BY(mu_);
  int active_ SBX_GUARDED_BY(mu_) = 0;
  bool stopping_ SBX_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace sbx::core
