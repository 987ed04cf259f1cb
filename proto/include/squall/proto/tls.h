// TLS between squall's parts (kj's TLS over OpenSSL, docs/deploy.md): a
// part given a certificate and key serves TLS on its RPC listener and shows
// them when it connects out; a part given a CA trusts only that CA for the
// peers it connects to, and, serving, lets in only peers with a certificate
// it signed. Loop thread of the part that made it.
#pragma once

#include <kj/async-io.h>
#include <kj/compat/tls.h>
#include <kj/vector.h>

#include <string>

namespace squall {

struct TlsFiles {
  std::string cert;  // PEM certificate (chain), with `key`
  std::string key;   // PEM private key
  std::string ca;    // PEM CA certificate(s) to check peers against
  bool any() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// Each of `flags` that is empty from $SQUALL_TLS_CERT, $SQUALL_TLS_KEY,
// $SQUALL_TLS_CA.
TlsFiles resolveTls(TlsFiles flags);

class Tls {
 public:
  // Null when `files` names none. Throws FAILED naming the file that
  // cannot be read or parsed, or a certificate given without its key (or
  // the other way round).
  static kj::Own<Tls> load(const TlsFiles& files);
  Tls() = default;
  ~Tls() noexcept(false);
  KJ_DISALLOW_COPY(Tls);

  // `network` with TLS on every connection made or accepted through it.
  kj::Own<kj::Network> wrap(kj::Network& network);
  bool serves() const { return keypair.get() != nullptr; }
  // For a listener that makes each connection it accepts a TLS server's
  // end itself (RpcListener: handshakes in parallel, each within its
  // deadline).
  kj::TlsContext& tlsContext() { return *context; }

 private:
  kj::Own<kj::TlsKeypair> keypair;
  kj::Vector<kj::TlsCertificate> trusted;
  kj::Own<kj::TlsContext> context;
};

}  // namespace squall
