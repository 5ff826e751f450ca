#include "core/data/datasets/idx.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <sstream>
#include <system_error>
#include <vector>

#include "core/data/datasets/file_io.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::data {
namespace {

struct IdxType {
  uint8_t code;
  ScalarType dtype;
};
constexpr IdxType kIdxTypes[] = {{0x08, kUInt8}, {0x09, kInt8},    {0x0B, kInt16},
                                 {0x0C, kInt32}, {0x0D, kFloat32}, {0x0E, kFloat64}};
constexpr const char* kIdxTypeList = "0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32 or 0x0E float64";
// Deflate cannot expand data more than about 1032:1; a gzip file declaring more than that
// many bytes per compressed byte is certainly truncated or corrupt.
constexpr uint64_t kMaxDeflateRatio = 1032;

std::string Hex(unsigned v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::uppercase << std::setw(2) << std::setfill('0') << v;
  return os.str();
}

// Converts `n` elements of `itemsize` bytes between big-endian and native order, in place.
void SwapBigEndian(void* data, int64_t n, int64_t itemsize) {
  if constexpr (std::endian::native == std::endian::big) return;
  auto* p = static_cast<unsigned char*>(data);
  for (int64_t i = 0; i < n; ++i, p += itemsize) {
    switch (itemsize) {
      case 2: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        v = __builtin_bswap16(v);
        std::memcpy(p, &v, 2);
        break;
      }
      case 4: {
        uint32_t v;
        std::memcpy(&v, p, 4);
        v = __builtin_bswap32(v);
        std::memcpy(p, &v, 4);
        break;
      }
      case 8: {
        uint64_t v;
        std::memcpy(&v, p, 8);
        v = __builtin_bswap64(v);
        std::memcpy(p, &v, 8);
        break;
      }
      default:
        return;  // single bytes have no order
    }
  }
}

uint32_t LoadBigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

Tensor read_idx(const std::string& path) {
  file_io::GzReader reader(path);
  unsigned char magic[4];
  const size_t got_magic = reader.Read(magic, 4);
  ANVIL_CHECK(got_magic == 4, path, ": not an IDX file: ", got_magic, " bytes, shorter than the 4-byte magic");
  ANVIL_CHECK(magic[0] == 0 && magic[1] == 0, path, ": not an IDX file: bad magic ", Hex(magic[0]), " ", Hex(magic[1]),
              " (expected 0x00 0x00, then type and rank)");
  const IdxType* type = nullptr;
  for (const IdxType& t : kIdxTypes) {
    if (t.code == magic[2]) type = &t;
  }
  ANVIL_CHECK(type != nullptr, path, ": unknown IDX element type code ", Hex(magic[2]), " (expected ", kIdxTypeList,
              ")");

  const int ndim = magic[3];
  std::vector<unsigned char> dim_bytes(static_cast<size_t>(4 * ndim));
  const size_t got_dims = reader.Read(dim_bytes.data(), dim_bytes.size());
  ANVIL_CHECK(got_dims == dim_bytes.size(), path, ": truncated header: declares ", ndim, " dimensions (",
              dim_bytes.size(), " bytes of sizes) but only ", got_dims, " bytes follow the magic");
  IntArray sizes(static_cast<size_t>(ndim));
  uint64_t numel = 1;
  bool overflow = false;
  for (int d = 0; d < ndim; ++d) {
    const uint32_t size = LoadBigEndian32(dim_bytes.data() + 4 * d);
    // The sizes are signed int32 in the format; a top bit set is a corrupt header.
    ANVIL_CHECK(size <= 0x7FFFFFFFu, path, ": corrupt header: dimension ", d, " has size ", static_cast<int32_t>(size));
    sizes[static_cast<size_t>(d)] = size;
    overflow = overflow || __builtin_mul_overflow(numel, uint64_t{size}, &numel);
  }
  const auto elem_bytes = static_cast<uint64_t>(itemsize(type->dtype));
  uint64_t declared = 0;
  overflow = overflow || __builtin_mul_overflow(numel, elem_bytes, &declared);
  const uint64_t header_bytes = 4 + dim_bytes.size();

  auto truncated = [&](uint64_t available) {
    std::ostringstream os;
    os << path << ": truncated: the header declares " << type->dtype << shape_str(sizes) << " = ";
    if (overflow) {
      os << "more than 2^64";
    } else {
      os << declared;
    }
    os << " bytes of data but only " << available << " bytes follow the header";
    return Error(os.str());
  };
  // Reject impossible sizes before allocating: a corrupt header must not ask for terabytes.
  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(path, ec);
  if (!ec) {
    const uint64_t limit = reader.compressed() ? file_bytes * kMaxDeflateRatio : file_bytes - header_bytes;
    if (overflow || declared > limit) throw truncated(reader.SkipToEnd());
  }
  ANVIL_CHECK(!overflow, path, ": corrupt header: ", shape_str(sizes), " is too large");

  Tensor out = empty(sizes, type->dtype);
  const size_t got = reader.Read(out.data_ptr(), static_cast<size_t>(declared));
  if (got < declared) throw truncated(got);
  const size_t trailing = reader.SkipToEnd();
  ANVIL_CHECK(trailing == 0, path, ": ", trailing, " trailing bytes after the declared ", type->dtype, shape_str(sizes),
              " data (", declared, " bytes)");
  SwapBigEndian(out.data_ptr(), out.numel(), out.element_size());
  return out;
}

void write_idx(const std::string& path, const Tensor& t, bool gzip) {
  const IdxType* type = nullptr;
  for (const IdxType& candidate : kIdxTypes) {
    if (candidate.dtype == t.dtype()) type = &candidate;
  }
  ANVIL_CHECK_TYPE(type != nullptr, "write_idx: IDX cannot store dtype ", t.dtype(),
                   " (it stores uint8, int8, int16, int32, float32, float64)");
  ANVIL_CHECK(t.dim() <= 255, "write_idx: IDX stores at most 255 dimensions, got ", t.dim());
  std::string bytes;
  bytes.reserve(static_cast<size_t>(4 + 4 * t.dim() + t.nbytes()));
  bytes.push_back(0);
  bytes.push_back(0);
  bytes.push_back(static_cast<char>(type->code));
  bytes.push_back(static_cast<char>(t.dim()));
  for (int64_t size : t.sizes()) {
    ANVIL_CHECK(size <= 0x7FFFFFFF, "write_idx: IDX sizes are int32, got ", shape_str(t.sizes()));
    const auto v = static_cast<uint32_t>(size);
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>(v >> shift));
  }
  const Tensor data = t.cpu().contiguous();
  const size_t header = bytes.size();
  bytes.resize(header + static_cast<size_t>(data.nbytes()));
  std::memcpy(bytes.data() + header, data.data_ptr(), static_cast<size_t>(data.nbytes()));
  SwapBigEndian(bytes.data() + header, data.numel(), data.element_size());
  file_io::WriteFileAtomic(path, bytes, gzip);
}

IdxDataset::IdxDataset(const std::string& images_path, const std::string& labels_path)
    : images_path_(images_path), images_(read_idx(images_path)) {
  const Tensor labels = read_idx(labels_path);
  ANVIL_CHECK(images_.dim() >= 1, "IdxDataset: ", images_path, ": expected images [N, ...], got a 0-dim tensor");
  ANVIL_CHECK(labels.dim() == 1, "IdxDataset: ", labels_path, ": expected labels [N], got ", labels.dtype(),
              shape_str(labels.sizes()));
  ANVIL_CHECK_TYPE(is_integral(labels.dtype(), /*include_bool=*/false), "IdxDataset: ", labels_path,
                   ": expected integer class labels, got dtype ", labels.dtype());
  ANVIL_CHECK(labels.size(0) == images_.size(0), "IdxDataset: ", images_path, " holds ", images_.size(0),
              " images but ", labels_path, " holds ", labels.size(0), " labels");
  labels_ = labels.to(kInt64);
  if (labels_.numel() > 0) {
    const int64_t min_label = labels_.min().item<int64_t>();
    ANVIL_CHECK(min_label >= 0, "IdxDataset: ", labels_path, ": class labels must be non-negative, found ", min_label);
  }
}

Example IdxDataset::get(int64_t index) const {
  CheckIndex(index);
  return Example{{Example::kInput, images_.select(0, index)}, {Example::kTarget, labels_.select(0, index)}};
}

std::string IdxDataset::name() const {
  IntArray sample(images_.sizes().begin() + 1, images_.sizes().end());
  return anvil::detail::StrCat("IdxDataset(", images_path_, ": ", size(), " samples of ", images_.dtype(),
                               shape_str(sample), ")");
}

IdxDataset mnist(const std::string& root, bool train) {
  const std::string split = train ? "train" : "t10k";
  auto find = [&](const std::string& name) {
    std::vector<std::string> tried;
    for (const std::filesystem::path& dir :
         {std::filesystem::path(root), std::filesystem::path(root) / "MNIST" / "raw"}) {
      for (const std::string& file : {name, name + ".gz"}) {
        const std::string candidate = (dir / file).string();
        std::error_code ec;
        if (std::filesystem::is_regular_file(candidate, ec)) return candidate;
        tried.push_back(candidate);
      }
    }
    std::ostringstream os;
    os << "mnist: cannot find " << name << " under " << root << "; tried:";
    for (const std::string& t : tried) os << " " << t;
    throw Error(os.str());
  };
  // Looked up one after the other (argument order is unspecified) so the error is stable.
  const std::string images = find(split + "-images-idx3-ubyte");
  return IdxDataset(images, find(split + "-labels-idx1-ubyte"));
}

}  // namespace anvil::data
