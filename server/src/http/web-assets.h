// The status page's files (HTML, JS, CSS), built from server/web by esbuild
// at build time and compiled into the binary (see docs/decisions.md).
#pragma once

#include <cstddef>
#include <kj/common.h>

namespace squall {

struct WebAsset {
  const char* name;  // "index.html", "app.js", ...
  const char* contentType;
  const unsigned char* data;
  size_t size;
};

// Every file, defined in the generated web-assets.cpp.
kj::ArrayPtr<const WebAsset> webAssets();

}  // namespace squall
