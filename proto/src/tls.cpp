#include <squall/proto/tls.h>

#include <cstdlib>
#include <fstream>
#include <kj/debug.h>
#include <sstream>
#include <squall/proto/errors.h>

namespace squall {

namespace {

std::string readPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  SQUALL_REQUIRE(in.good(), "cannot read the TLS ", what, " ", path.c_str());
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

// Parses with kj's TLS, turning its error into one that names the file.
template <typename T>
T parsePem(const std::string& path, const char* what) {
  auto text = readPem(path, what);
  kj::Maybe<T> parsed;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { parsed = T(kj::StringPtr(text.c_str())); })) {
    SQUALL_FAIL("cannot use ", path.c_str(), " as the TLS ", what, ": ", e->getDescription());
  }
  return kj::mv(KJ_ASSERT_NONNULL(parsed));
}

std::string fromEnv(const std::string& flag, const char* name) {
  if (!flag.empty()) return flag;
  const char* value = getenv(name);
  return value != nullptr ? value : "";
}

}  // namespace

TlsFiles resolveTls(TlsFiles flags) {
  return TlsFiles{fromEnv(flags.cert, "SQUALL_TLS_CERT"), fromEnv(flags.key, "SQUALL_TLS_KEY"),
                  fromEnv(flags.ca, "SQUALL_TLS_CA")};
}

Tls::~Tls() noexcept(false) {}

kj::Own<Tls> Tls::load(const TlsFiles& files) {
  if (!files.any()) return kj::Own<Tls>();
  SQUALL_REQUIRE(files.cert.empty() == files.key.empty(), "a TLS certificate needs its key and a key its ",
                 "certificate (--tls-cert and --tls-key go together)");
  auto tls = kj::heap<Tls>();
  kj::TlsContext::Options options;
  if (!files.cert.empty()) {
    tls->keypair = kj::heap<kj::TlsKeypair>(kj::TlsKeypair{parsePem<kj::TlsPrivateKey>(files.key, "key"),
                                                           parsePem<kj::TlsCertificate>(files.cert, "certificate")});
    options.defaultKeypair = *tls->keypair;
  }
  if (!files.ca.empty()) {
    tls->trusted.add(parsePem<kj::TlsCertificate>(files.ca, "CA"));
    options.trustedCertificates = tls->trusted.asPtr();
    // Only this CA: a squall cluster is its own world.
    options.useSystemTrustStore = false;
    // Serving, let in only peers it signed.
    options.verifyClients = tls->keypair.get() != nullptr;
  }
  tls->context = kj::heap<kj::TlsContext>(kj::mv(options));
  return tls;
}

kj::Own<kj::Network> Tls::wrap(kj::Network& network) { return context->wrapNetwork(network); }

}  // namespace squall
