// JSON string escaping for the Chrome trace export (append_json_string, chrome_export.h): the
// output is valid UTF-8 whatever the input, each invalid byte replaced by U+FFFD.
#include <string>
#include <string_view>

#include "moescope/analysis/chrome_export.h"

namespace moescope::analysis {
namespace {

// Length of the valid UTF-8 sequence at text[i], or 0 when invalid.
size_t utf8_sequence(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char lead = byte(i);
  size_t length = lead < 0x80           ? 1
                  : (lead >> 5) == 0x6  ? 2
                  : (lead >> 4) == 0xe  ? 3
                  : (lead >> 3) == 0x1e ? 4
                                        : 0;
  if (length == 0 || i + length > text.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  }
  if (length == 2 && lead < 0xc2) return 0;                          // overlong
  if (length == 3 && lead == 0xe0 && byte(i + 1) < 0xa0) return 0;   // overlong
  if (length == 3 && lead == 0xed && byte(i + 1) >= 0xa0) return 0;  // surrogates
  if (length == 4 && lead == 0xf0 && byte(i + 1) < 0x90) return 0;   // overlong
  if (length == 4 && (lead > 0xf4 || (lead == 0xf4 && byte(i + 1) >= 0x90))) return 0;
  return length;
}

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  out.push_back('"');
  for (size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      out.push_back(char(c));
      ++i;
      continue;
    }
    switch (c) {
      case '"':
        out.append("\\\"");
        ++i;
        continue;
      case '\\':
        out.append("\\\\");
        ++i;
        continue;
      case '\n':
        out.append("\\n");
        ++i;
        continue;
      case '\t':
        out.append("\\t");
        ++i;
        continue;
      case '\r':
        out.append("\\r");
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      static const char kHex[] = "0123456789abcdef";
      const char escaped[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
      out.append(escaped, 6);
      ++i;
      continue;
    }
    size_t length = utf8_sequence(text, i);
    if (length == 0) {
      out.append("\\ufffd");
      ++i;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  out.push_back('"');
}

}  // namespace moescope::analysis
