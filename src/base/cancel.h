// CancelSignal: a one-shot signal that work in flight listens to (an HTTP client that went
// away stops the exec it asked for). Any thread; callbacks run on the thread that fires
// it, or at once on the one that registers after the signal fired.
#pragma once

#include <functional>
#include <mutex>
#include <utility>
#include <vector>

namespace sbx {

class CancelSignal {
 public:
  void Fire() {
    std::vector<std::function<void()>> fns;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fired_) return;
      fired_ = true;
      fns.swap(fns_);
    }
    for (auto& fn : fns) fn();
  }
  bool fired() const {
    std::lock_guard<std::mutex> lock(mu_);
    return fired_;
  }
  // `fn` must be cheap and must not block (it runs under whoever fires).
  void OnFire(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!fired_) {
        fns_.push_back(std::move(fn));
        return;
      }
    }
    fn();
  }

 private:
  mutable std::mutex mu_;
  bool fired_ = false;
  std::vector<std::function<void()>> fns_;
};

}  // namespace sbx
