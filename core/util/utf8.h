// UTF-8 at the boundaries: text that comes from files and requests (CSV headers and values,
// class and folder names, ONNX metadata, spec fields) becomes a protobuf string, a JSON value or
// a stored row only as valid UTF-8. Protobuf refuses to parse a string field that is not UTF-8,
// and nlohmann/json refuses to dump one (type_error.316): one such string in a stored row would
// break every listing that contains it.
//
// Valid means RFC 3629: no overlong forms, no surrogates (U+D800..U+DFFF), nothing above
// U+10FFFF. Two rules use it:
//   - check_utf8: input a user chose (a file's header, a spec field) is refused, naming the
//     field and the byte offset, so the user can find and fix it;
//   - to_valid_utf8: text the server composes from such input (an error message quoting it)
//     replaces each maximal ill-formed subpart with U+FFFD, the Unicode Standard's practice
//     (chapter 3, "U+FFFD Substitution of Maximal Subparts") and Python's
//     bytes.decode("utf-8", "replace").
// Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace anvil {

// The byte offset of the first ill-formed sequence in `s`, or std::string_view::npos when `s`
// is valid UTF-8.
size_t utf8_error_offset(std::string_view s);

inline bool is_valid_utf8(std::string_view s) { return utf8_error_offset(s) == std::string_view::npos; }

// `s` with each maximal ill-formed subpart replaced by U+FFFD ("\xEF\xBF\xBD"); `s` itself when
// it is valid.
std::string to_valid_utf8(std::string_view s);

// Throws anvil::Error when `s` is not valid UTF-8: "<what>: not valid UTF-8 at byte <offset>
// (0x..); expected UTF-8 text", with the offending bytes in hex. `what` names the field.
void check_utf8(std::string_view s, std::string_view what);

}  // namespace anvil
