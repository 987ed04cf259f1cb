#include <squall/proto/resource-amounts.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace squall {

const char* const RESOURCE_NAME_RULE =
    "a resource name is a lower-case letter, then lower-case letters, digits and '_'";

bool isResourceName(const std::string& name) {
  if (name.empty() || name.size() > 64 || !std::islower(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!std::islower(static_cast<unsigned char>(c)) && !std::isdigit(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  return true;
}

uint64_t parseAmount(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("amount '" + text + "' " + why);
  };
  if (text.empty()) throw bad("is empty");
  std::string number = text;
  uint64_t multiplier = 1;
  char last = static_cast<char>(std::toupper(static_cast<unsigned char>(number.back())));
  const std::string suffixes = "KMGT";
  if (auto at = suffixes.find(last); at != std::string::npos) {
    for (size_t i = 0; i <= at; i++) multiplier *= 1024;
    number.pop_back();
  }
  auto dot = number.find('.');
  std::string whole = number.substr(0, dot);
  std::string fraction = dot == std::string::npos ? "" : number.substr(dot + 1);
  if (whole.empty() || whole.size() > 15 || fraction.size() > 4 ||
      !std::all_of(whole.begin(), whole.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) ||
      !std::all_of(fraction.begin(), fraction.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) ||
      (dot != std::string::npos && fraction.empty())) {
    throw bad("is not a number (like 2, 0.5 or 16G: at most 4 decimals, K/M/G/T = 1024^1..4)");
  }
  while (fraction.size() < 4) fraction += '0';
  unsigned __int128 units =
      static_cast<unsigned __int128>(std::stoull(whole)) * RESOURCE_UNIT + std::stoull(fraction);
  units *= multiplier;
  if (units > static_cast<unsigned __int128>(UINT64_MAX / 2)) throw bad("is too large");
  return static_cast<uint64_t>(units);
}

std::string formatAmount(uint64_t units) {
  std::string out = std::to_string(units / RESOURCE_UNIT);
  uint64_t fraction = units % RESOURCE_UNIT;
  if (fraction == 0) return out;
  std::string digits = std::to_string(fraction);
  digits.insert(0, 4 - digits.size(), '0');
  while (digits.back() == '0') digits.pop_back();
  return out + "." + digits;
}

}  // namespace squall
