#include "api/exec_answer.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>
#include <random>

namespace sbx::api {
namespace {

using nlohmann::json;

// What nlohmann::json writes for `s` as a string (without the quotes).
std::string Reference(const std::string& s) {
  std::string d = json(s).dump(-1, ' ', false, json::error_handler_t::replace);
  return d.substr(1, d.size() - 2);
}

std::string Escaped(const std::string& s) {
  std::string out;
  size_t pos = 0;
  AppendEscaped(s, &pos, &out);
  EXPECT_EQ(pos, s.size());
  return out;
}

TEST(ExecAnswer, EscapesAsTheJsonLibraryDoes) {
  for (std::string s : {std::string("plain"), std::string("q\"b\\s\n\r\t\b\f"), std::string("\x01\x1f\x7f", 3),
                        std::string("h\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), std::string("\xC3"),
                        std::string("\xE2\x82"), std::string("\xE0\x80\x80"), std::string("\xED\xA0\x80"),
                        std::string("\xF4\x90\x80\x80"), std::string("\xF0\x9F\x98"), std::string("\xC0\xAF"),
                        std::string("\xFF\xFE"), std::string("\x80\x80x"), std::string("\0", 1)})
    EXPECT_EQ(Escaped(s), Reference(s)) << json(std::vector<uint8_t>(s.begin(), s.end())).dump();
  std::mt19937 rng(7);
  for (int n = 0; n < 3000; ++n) {
    std::string s(rng() % 24, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 5 == 0 ? 0x80 + rng() % 0x80 : rng() % 256);
    ASSERT_EQ(Escaped(s), Reference(s)) << n;
  }
}

TEST(ExecAnswer, EncodedPrefixKeepsWholeCharactersWithinTheCap) {
  EXPECT_EQ(EncodedPrefix("abc", 10), 3u);
  EXPECT_EQ(EncodedPrefix(std::string("\x01\x01", 2), 6), 1u);  // \u0001 is 6 bytes
  EXPECT_EQ(EncodedPrefix("\xE2\x82\xAC", 2), 0u);               // not half a character
  EXPECT_EQ(EncodedPrefix("a\nb", 3), 2u);
}

json Drain(const Response& r, size_t* pieces) {
  std::string body;
  boost::asio::io_context io;
  ChunkSink sink = [&](std::string_view d) -> boost::asio::awaitable<bool> {
    body.append(d);
    ++*pieces;
    co_return true;
  };
  boost::asio::co_spawn(io, r.stream(sink), boost::asio::detached);
  io.run();
  return json::parse(body);
}

TEST(ExecAnswer, StreamsTheWholeAnswerInPiecesAndMarksWhatTheCapCut) {
  auto out = std::make_shared<std::string>(300000, '\x01');  // 1.8 MB of JSON
  auto err = std::make_shared<std::string>("warn \"x\"\n");
  size_t pieces = 0;
  json head = {{"exit_code", 3}, {"stdout_truncated", false}, {"stderr_truncated", false}};
  json j = Drain(ExecAnswer(200, head, out, err, 1 << 30), &pieces);
  EXPECT_GT(pieces, 20u);
  EXPECT_EQ(j["exit_code"], 3);
  EXPECT_EQ(j["stdout"].get<std::string>(), *out);
  EXPECT_EQ(j["stderr"].get<std::string>(), *err);
  EXPECT_FALSE(j["stdout_truncated"].get<bool>());

  pieces = 0;
  Response capped = ExecAnswer(504, head, out, err, 6000);
  EXPECT_EQ(capped.status, 504);
  j = Drain(capped, &pieces);
  EXPECT_EQ(j["stdout"].get<std::string>().size(), 1000u);
  EXPECT_TRUE(j["stdout_truncated"].get<bool>());
  EXPECT_FALSE(j["stderr_truncated"].get<bool>());
}

}  // namespace
}  // namespace sbx::api
