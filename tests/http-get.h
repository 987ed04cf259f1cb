// A minimal HTTP GET for the tests that read the status port (JSON API,
// /metrics) of a real server. Test thread only.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

namespace squall {

using Json = nlohmann::json;

struct HttpReply {
  int status = 0;
  std::string headers;
  std::string body;
};

// One GET over a fresh connection; reads the headers and Content-Length
// bytes (kj-http keeps the connection open after a response).
inline HttpReply httpGet(const std::string& address, const std::string& path,
                  const std::string& method = "GET") {
  auto colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    throw std::runtime_error("cannot connect to " + address);
  }
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: " + address +
                        "\r\nContent-Length: 0\r\n\r\n";
  if (write(fd, request.data(), request.size()) != ssize_t(request.size())) {
    close(fd);
    throw std::runtime_error("short write");
  }
  std::string data;
  HttpReply reply;
  size_t need = std::string::npos;
  char buffer[65536];
  while (true) {
    auto end = data.find("\r\n\r\n");
    if (end != std::string::npos && need == std::string::npos) {
      reply.headers = data.substr(0, end);
      reply.status = std::stoi(reply.headers.substr(9, 3));
      auto at = reply.headers.find("Content-Length: ");
      need = at == std::string::npos ? 0 : std::stoul(reply.headers.substr(at + 16));
      data.erase(0, end + 4);
    }
    if (need != std::string::npos && data.size() >= need) break;
    ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n <= 0) break;
    data.append(buffer, n);
  }
  close(fd);
  reply.body = data;
  return reply;
}

inline Json getJson(const std::string& address, const std::string& path) {
  auto reply = httpGet(address, path);
  EXPECT_EQ(reply.status, 200) << path << ": " << reply.body;
  return Json::parse(reply.body);
}

}  // namespace squall
