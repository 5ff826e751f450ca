// SHA-256 through OpenSSL's EVP interface: see digest.h.
#include "server/artifacts/digest.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "core/util/file.h"
#include "core/util/sha256.h"
#include "server/artifacts/artifact_store.h"

namespace anvil::server {

struct Digest::Context {
  EVP_MD_CTX* md = nullptr;
  ~Context() { EVP_MD_CTX_free(md); }
};

Digest::Digest() : ctx_(std::make_unique<Context>()) {
  ctx_->md = EVP_MD_CTX_new();
  if (ctx_->md == nullptr || EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1) {
    throw ArtifactError("SHA-256: OpenSSL could not start a digest");
  }
}

Digest::~Digest() = default;

void Digest::update(const void* data, size_t n) {
  if (EVP_DigestUpdate(ctx_->md, data, n) != 1) throw ArtifactError("SHA-256: OpenSSL refused the data");
}

std::string Digest::hex() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx_->md, out, &len) != 1) throw ArtifactError("SHA-256: OpenSSL could not finish");
  return hex_encode(std::string_view(reinterpret_cast<const char*>(out), len));
}

std::string sha256_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw ArtifactError(path + ": cannot open: " + errno_message(err),
                        err == ENOENT ? ArtifactError::Kind::kNotFound : ArtifactError::Kind::kOther);
  }
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  Digest digest;
  std::vector<char> buffer(size_t{1} << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw ArtifactError(path + ": read error: " + errno_message(errno));
    if (n == 0) break;
    digest.update(buffer.data(), static_cast<size_t>(n));
  }
  return digest.hex();
}

}  // namespace anvil::server
