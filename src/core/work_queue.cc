#include "core/work_queue.h"

#include <sched.h>

#include <algorithm>

#include "base/log.h"

namespace sbx::core {

void BecomeIdle() {
  struct sched_param sp = {};
  if (::sched_setscheduler(0, SCHED_IDLE | SCHED_RESET_ON_FORK, &sp) != 0)
    SBX_LOG(kDebug) << "cannot lower the priority of a background thread";
}

WorkQueue::WorkQueue(int threads, std::function<void(const std::string&)> job) : job_(std::move(job)) {
  for (int i = 0; i < std::max(1, threads); ++i)
    threads_.emplace_back([this] {
      BecomeIdle();
      Loop();
    });
}

WorkQueue::~WorkQueue() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkQueue::Enqueue(const std::string& key) {
  {
    MutexLock lock(mu_);
    queue_.push_back(key);
  }
  cv_.notify_all();  // one condition for workers and Drain(): wake all, a worker takes it
}

void WorkQueue::Loop() {
  while (true) {
    std::string key;
    {
      MutexLock lock(mu_);
      while (!stopping_ && queue_.empty()) cv_.wait(lock);
      if (queue_.empty()) return;
      key = queue_.front();
      queue_.pop_front();
      ++active_;
    }
    job_(key);
    {
      MutexLock lock(mu_);
      --active_;
    }
    cv_.notify_all();
  }
}

void WorkQueue::Drain() {
  MutexLock lock(mu_);
  while (!queue_.empty() || active_ != 0) cv_.wait(lock);
}

int WorkQueue::pending() const {
  MutexLock lock(mu_);
  return static_cast<int>(queue_.size()) + active_;
}

bool WorkQueue::stopping() const {
  MutexLock lock(mu_);
  return stopping_;
}

}  // namespace sbx::core
