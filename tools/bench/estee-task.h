// What a replayed ESTEE task does, as the config of a bench/estee-N call:
// squall-replay writes it, the bench executor reads it. Text, so that the
// status page shows it: "sleep_us=150000 in=1048576,2048 out=1048576".
// Header-only: the executor links tasklib alone.
#pragma once

#include <charconv>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace squall::bench {

// The function of a task with `outputs` outputs, in the executor "bench".
inline std::string esteeFunction(size_t outputs) { return "estee-" + std::to_string(outputs); }

struct EsteeTask {
  std::chrono::microseconds duration{0};
  // Bytes each input must have, in the call's input order.
  std::vector<uint64_t> inputSizes;
  // Bytes of each output to write.
  std::vector<uint64_t> outputSizes;

  std::string config() const {
    auto list = [](const std::vector<uint64_t>& sizes) {
      std::string s;
      for (auto size : sizes) s += (s.empty() ? "" : ",") + std::to_string(size);
      return s;
    };
    return "sleep_us=" + std::to_string(duration.count()) + " in=" + list(inputSizes) + " out=" + list(outputSizes);
  }

  // Throws std::invalid_argument naming what is wrong.
  static EsteeTask parse(std::string_view config) {
    EsteeTask task;
    auto number = [&config](std::string_view text) {
      uint64_t value = 0;
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (error != std::errc() || end != text.data() + text.size() || text.empty()) {
        throw std::invalid_argument("'" + std::string(text) + "' in the config '" + std::string(config) +
                                    "' is not a number");
      }
      return value;
    };
    auto list = [&number](std::string_view text) {
      std::vector<uint64_t> sizes;
      while (!text.empty()) {
        auto comma = text.find(',');
        sizes.push_back(number(text.substr(0, comma)));
        text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
      }
      return sizes;
    };
    bool seen[3] = {false, false, false};
    for (std::string_view rest = config; !rest.empty();) {
      auto space = rest.find(' ');
      auto field = rest.substr(0, space);
      rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
      auto eq = field.find('=');
      auto key = field.substr(0, eq);
      auto value = eq == std::string_view::npos ? std::string_view() : field.substr(eq + 1);
      if (key == "sleep_us") {
        task.duration = std::chrono::microseconds(number(value));
        seen[0] = true;
      } else if (key == "in") {
        task.inputSizes = list(value);
        seen[1] = true;
      } else if (key == "out") {
        task.outputSizes = list(value);
        seen[2] = true;
      } else if (!field.empty()) {
        throw std::invalid_argument("unknown field '" + std::string(field) + "' in the config '" +
                                    std::string(config) + "'");
      }
    }
    if (!seen[0] || !seen[1] || !seen[2]) {
      throw std::invalid_argument("the config '" + std::string(config) + "' needs sleep_us=, in= and out=");
    }
    return task;
  }
};

}  // namespace squall::bench
