#include "core/util/utf8.h"

#include <cstdint>
#include <cstdio>

#include "core/util/error.h"

namespace anvil {
namespace {

// The length of the well-formed sequence at s[at], or 0 when the bytes there begin an
// ill-formed one; *maximal is then the length of its maximal subpart (at least 1): the
// longest prefix that could still have begun a well-formed sequence (Unicode Table 3-7).
size_t SequenceAt(std::string_view s, size_t at, size_t* maximal) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t b0 = byte(at);
  *maximal = 1;
  if (b0 < 0x80) return 1;
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // the range of the second byte (Table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 == 0xE0) {
    need = 2, lo = 0xA0;  // no overlong three-byte forms
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    need = 2;
  } else if (b0 == 0xED) {
    need = 2, hi = 0x9F;  // no surrogates
  } else if (b0 == 0xF0) {
    need = 3, lo = 0x90;  // no overlong four-byte forms
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    need = 3;
  } else if (b0 == 0xF4) {
    need = 3, hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;  // 0x80..0xC1, 0xF5..0xFF never begin a sequence
  }
  for (size_t k = 1; k <= need; ++k) {
    if (at + k >= s.size()) return 0;  // cut short: the maximal subpart is what came
    const uint8_t b = byte(at + k);
    const bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return 0;
    *maximal = k + 1;
  }
  return need + 1;
}

}  // namespace

size_t utf8_error_offset(std::string_view s) {
  size_t maximal = 0;
  for (size_t at = 0; at < s.size();) {
    const size_t n = SequenceAt(s, at, &maximal);
    if (n == 0) return at;
    at += n;
  }
  return std::string_view::npos;
}

std::string to_valid_utf8(std::string_view s) {
  const size_t first = utf8_error_offset(s);
  if (first == std::string_view::npos) return std::string(s);
  std::string out(s.substr(0, first));
  out.reserve(s.size() + 8);
  size_t maximal = 0;
  for (size_t at = first; at < s.size();) {
    const size_t n = SequenceAt(s, at, &maximal);
    if (n > 0) {
      out.append(s.substr(at, n));
      at += n;
    } else {
      out.append("\xEF\xBF\xBD");
      at += maximal;
    }
  }
  return out;
}

void check_utf8(std::string_view s, std::string_view what) {
  const size_t at = utf8_error_offset(s);
  if (at == std::string_view::npos) return;
  size_t maximal = 0;
  SequenceAt(s, at, &maximal);
  std::string bytes;
  for (size_t i = at; i < at + maximal && i < s.size(); ++i) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "%s0x%02X", i == at ? "" : " ", static_cast<unsigned>(static_cast<uint8_t>(s[i])));
    bytes += hex;
  }
  throw Error(detail::StrCat(what, ": not valid UTF-8 at byte ", at, " (", bytes,
                             "); expected UTF-8 text (a file in Latin-1 or another encoding must be converted, "
                             "e.g. with iconv -t UTF-8)"));
}

}  // namespace anvil
