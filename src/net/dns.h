// The little of the DNS wire format (RFC 1035) the resolver needs: a query's question, the
// addresses in an answer, and a refusal. Bounds-checked; compression pointers followed
// only backwards.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "net/rules.h"

namespace sbx::net::dns {

constexpr uint16_t kTypeA = 1, kTypeAAAA = 28;
constexpr int kRcodeServFail = 2, kRcodeRefused = 5;

struct Question {
  uint16_t id = 0;
  std::string name;  // lower case, no trailing dot
  uint16_t type = 0;
};

// The question of a query (one question, QR clear); nullopt if the message is not one.
std::optional<Question> ParseQuery(const std::string& msg);

struct Answer {
  uint16_t id = 0;
  int rcode = 0;
  std::string question;  // the question's name, lower case
  std::vector<std::pair<Address, uint32_t>> addresses;  // A and AAAA records, with their TTLs
};
std::optional<Answer> ParseAnswer(const std::string& msg);

// An answer to `query` with no records and this response code.
std::string Refusal(const std::string& query, int rcode = kRcodeRefused);

// The message with its id replaced.
void SetId(std::string* msg, uint16_t id);

}  // namespace sbx::net::dns
