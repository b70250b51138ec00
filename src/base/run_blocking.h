// Runs a blocking call on a thread pool and resumes the calling coroutine on its own
// executor. Only pointers cross into the coroutines: g++ 12 destroys some class-type
// coroutine parameters (capturing closures among them) twice.
#pragma once

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <functional>
#include <optional>

namespace sbx {

template <typename R>
boost::asio::awaitable<void> CallInto(std::optional<R>* out, const std::function<R()>* fn) {
  out->emplace((*fn)());
  co_return;
}

template <typename R>
boost::asio::awaitable<R> RunBlocking(boost::asio::thread_pool* pool, const std::function<R()>* fn) {
  std::optional<R> out;
  auto call = CallInto<R>(&out, fn);
  co_await boost::asio::co_spawn(*pool, std::move(call), boost::asio::use_awaitable);
  co_return std::move(*out);
}

}  // namespace sbx
