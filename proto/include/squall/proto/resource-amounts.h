// Resource names and amounts as users write them and the wire carries them
// (docs/resources.md): shared by the client, the server and governors.
// Amounts are fixed-point: RESOURCE_UNIT units are one item of an indexed
// pool (a GPU) or one unit of a sum pool (a byte of mem). No threading
// rules.
#pragma once

#include <cstdint>
#include <string>

namespace squall {

constexpr uint64_t RESOURCE_UNIT = 10000;

// Resource names: a lower-case letter, then lower-case letters, digits and
// '_' (each becomes SQUALL_RESOURCE_<NAME> in a task's environment).
bool isResourceName(const std::string& name);
extern const char* const RESOURCE_NAME_RULE;

// "1", "0.25", "3", "2G", "512M", "1.5K": units (K, M, G, T are powers of
// 1024). At most 4 decimals. Throws std::invalid_argument saying why.
uint64_t parseAmount(const std::string& text);
// The reverse, shortest exact form ("0.5", "2", "2147483648").
std::string formatAmount(uint64_t units);

}  // namespace squall
