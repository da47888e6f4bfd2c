#include "rpc/json_text.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>

namespace agentbox::rpc {

using json = nlohmann::json;

namespace {

// The wire format is nlohmann's dump(-1, ' ', false, replace), byte for byte;
// this writer produces it faster for the values the hot paths carry (a file
// page is a megabyte-long string): runs of plain bytes are copied eight at a
// time and UTF-8 is validated per sequence, where dump() decodes and appends
// byte by byte through a virtual call. What it does not write itself
// (floating-point numbers, strings with invalid UTF-8, binary values) it
// leaves to dump(), so the output stays identical for every input.
std::string dump(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

// Printable ASCII other than '"' and '\\': copied as is.
constexpr std::array<bool, 256> kPlain = [] {
  std::array<bool, 256> plain{};
  for (int c = 0x20; c < 0x80; ++c) plain[c] = c != '"' && c != '\\';
  return plain;
}();

// Whether any of the eight bytes in w is not plain (SWAR: a byte below 0x20,
// a quote, a backslash, or a byte with the high bit set).
constexpr bool has_special(std::uint64_t w) {
  constexpr std::uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
  auto has_zero = [](std::uint64_t x) { return ((x - ones) & ~x & high) != 0; };
  return ((w - 0x20 * ones) & ~w & high) != 0 || has_zero(w ^ ('"' * ones)) || has_zero(w ^ ('\\' * ones)) ||
         (w & high) != 0;
}

// Length of the UTF-8 sequence at p (a byte >= 0x80), or 0 when it is not one
// nlohmann's decoder accepts (overlong forms, surrogates and code points past
// U+10FFFF are refused).
std::size_t utf8_sequence(const unsigned char* p, const unsigned char* end) {
  auto cont = [&](std::size_t i) { return p + i < end && (p[i] & 0xC0) == 0x80; };
  unsigned char c = p[0];
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2) || (c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0)) return 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3) || (c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] >= 0x90)) return 0;
    return 4;
  }
  return 0;
}

void grow(std::string& out, std::size_t more) {
  std::size_t needed = out.size() + more;
  if (out.capacity() < needed) out.reserve(std::max(needed, 2 * out.capacity()));
}

// Appends s quoted and escaped. Returns false, with out as it was, when s is
// not valid UTF-8 (dump() then writes it, replacing the bad bytes).
bool append_string(std::string& out, std::string_view s) {
  const std::size_t mark = out.size();
  grow(out, s.size() + 2);
  out.push_back('"');
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const auto* run = p;
    for (std::uint64_t w; end - p >= 8; p += 8) {
      std::memcpy(&w, p, 8);
      if (has_special(w)) break;
    }
    while (p < end && kPlain[*p]) ++p;
    out.append(reinterpret_cast<const char*>(run), static_cast<std::size_t>(p - run));
    if (p == end) break;
    unsigned char c = *p;
    if (c >= 0x80) {
      std::size_t n = utf8_sequence(p, end);
      if (n == 0) {
        out.resize(mark);
        return false;
      }
      out.append(reinterpret_cast<const char*>(p), n);
      p += n;
      continue;
    }
    ++p;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\f': out += "\\f"; break;
      case '\r': out += "\\r"; break;
      default: {
        static constexpr char kHex[] = "0123456789abcdef";
        const char escaped[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
        out.append(escaped, sizeof escaped);
      }
    }
  }
  out.push_back('"');
  return true;
}

template <typename Integer>
void append_integer(std::string& out, Integer n) {
  char digits[24];
  auto [end, ec] = std::to_chars(digits, digits + sizeof digits, n);
  out.append(digits, end);
}

void append_value(std::string& out, const json& value) {
  switch (value.type()) {
    case json::value_t::object: {
      out.push_back('{');
      bool first = true;
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (!first) out.push_back(',');
        first = false;
        if (!append_string(out, it.key())) out += dump(json(it.key()));
        out.push_back(':');
        append_value(out, it.value());
      }
      out.push_back('}');
      return;
    }
    case json::value_t::array: {
      out.push_back('[');
      bool first = true;
      for (const auto& element : value) {
        if (!first) out.push_back(',');
        first = false;
        append_value(out, element);
      }
      out.push_back(']');
      return;
    }
    case json::value_t::string:
      if (!append_string(out, value.get_ref<const std::string&>())) out += dump(value);
      return;
    case json::value_t::boolean: out += value.get<bool>() ? "true" : "false"; return;
    case json::value_t::null: out += "null"; return;
    case json::value_t::number_integer: append_integer(out, value.get<std::int64_t>()); return;
    case json::value_t::number_unsigned: append_integer(out, value.get<std::uint64_t>()); return;
    default: out += dump(value); return;  // floating point, binary, discarded
  }
}

// Reads the subset described in json_text.h; every method returns false as
// soon as the text leaves it.
class Reader {
 public:
  explicit Reader(std::string_view text)
      : p_(reinterpret_cast<const unsigned char*>(text.data())), end_(p_ + text.size()) {}

  bool document(json& out) {
    if (!value(out, 0)) return false;
    skip_space();
    return p_ == end_;
  }

 private:
  static constexpr int kMaxDepth = 64;

  void skip_space() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() || std::memcmp(p_, word.data(), word.size()) != 0) return false;
    p_ += word.size();
    return true;
  }

  bool value(json& out, int depth) {
    skip_space();
    if (p_ == end_) return false;
    switch (*p_) {
      case '{': return object(out, depth + 1);
      case '[': return array(out, depth + 1);
      case '"': {
        std::string s;
        if (!string(s)) return false;
        out = std::move(s);
        return true;
      }
      case 't': out = true; return literal("true");
      case 'f': out = false; return literal("false");
      case 'n': out = nullptr; return literal("null");
      default: return integer(out);
    }
  }

  // The members of an object or an array: read_one for each, separated by
  // commas, up to close.
  template <typename ReadOne>
  bool members(unsigned char close, int depth, ReadOne read_one) {
    if (depth > kMaxDepth) return false;
    ++p_;
    skip_space();
    if (p_ < end_ && *p_ == close) {
      ++p_;
      return true;
    }
    for (;;) {
      if (!read_one()) return false;
      skip_space();
      if (p_ == end_) return false;
      unsigned char c = *p_++;
      if (c == close) return true;
      if (c != ',') return false;
    }
  }

  bool object(json& out, int depth) {
    out = json::object();
    return members('}', depth, [&] {
      skip_space();
      std::string key;
      if (p_ == end_ || *p_ != '"' || !string(key)) return false;
      skip_space();
      if (p_ == end_ || *p_++ != ':') return false;
      json element;
      if (!value(element, depth)) return false;
      out[std::move(key)] = std::move(element);  // a repeated key: the last wins, as in json::parse
      return true;
    });
  }

  bool array(json& out, int depth) {
    out = json::array();
    return members(']', depth, [&] {
      json element;
      if (!value(element, depth)) return false;
      out.push_back(std::move(element));
      return true;
    });
  }

  // -?(0|[1-9][0-9]*) with no fraction or exponent, within int64 (negative)
  // or uint64 (otherwise): json::parse's number_integer / number_unsigned.
  bool integer(json& out) {
    bool negative = p_ < end_ && *p_ == '-';
    const unsigned char* digits = p_ + (negative ? 1 : 0);
    const unsigned char* q = digits;
    while (q < end_ && *q >= '0' && *q <= '9') ++q;
    if (q == digits || (*digits == '0' && q - digits > 1)) return false;
    if (q < end_ && (*q == '.' || *q == 'e' || *q == 'E')) return false;
    std::uint64_t magnitude = 0;
    auto [stop, ec] = std::from_chars(reinterpret_cast<const char*>(digits), reinterpret_cast<const char*>(q), magnitude);
    if (ec != std::errc()) return false;
    if (negative) {
      if (magnitude > std::uint64_t{1} << 63) return false;
      out = static_cast<std::int64_t>(0 - magnitude);
    } else {
      out = magnitude;
    }
    p_ = q;
    return true;
  }

  static int hex_digit(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  bool hex4(std::uint32_t& out) {
    if (end_ - p_ < 4) return false;
    out = 0;
    for (int i = 0; i < 4; ++i) {
      int d = hex_digit(*p_++);
      if (d < 0) return false;
      out = out << 4 | static_cast<std::uint32_t>(d);
    }
    return true;
  }

  static void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | cp >> 6));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | cp >> 12));
      out.push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | cp >> 18));
      out.push_back(static_cast<char>(0x80 | (cp >> 12 & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp >> 6 & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // \uXXXX after the backslash and 'u' were read; surrogates must pair up.
  bool unicode_escape(std::string& out) {
    std::uint32_t cp;
    if (!hex4(cp) || (cp >= 0xDC00 && cp <= 0xDFFF)) return false;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      std::uint32_t low;
      if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
      p_ += 2;
      if (!hex4(low) || low < 0xDC00 || low > 0xDFFF) return false;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(out, cp);
    return true;
  }

  bool string(std::string& out) {
    ++p_;  // the opening quote
    for (;;) {
      const unsigned char* run = p_;
      for (std::uint64_t w; end_ - p_ >= 8; p_ += 8) {
        std::memcpy(&w, p_, 8);
        if (has_special(w)) break;
      }
      while (p_ < end_ && kPlain[*p_]) ++p_;
      out.append(reinterpret_cast<const char*>(run), static_cast<std::size_t>(p_ - run));
      if (p_ == end_) return false;
      unsigned char c = *p_;
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c >= 0x80) {
        std::size_t n = utf8_sequence(p_, end_);
        if (n == 0) return false;
        out.append(reinterpret_cast<const char*>(p_), n);
        p_ += n;
        continue;
      }
      if (c != '\\' || end_ - p_ < 2) return false;  // a raw control character is not JSON
      unsigned char e = p_[1];
      p_ += 2;
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u':
          if (!unicode_escape(out)) return false;
          break;
        default: return false;
      }
    }
  }

  const unsigned char* p_;
  const unsigned char* end_;
};

}  // namespace

std::string write_json(const json& value) {
  std::string out;
  append_value(out, value);
  return out;
}

std::optional<json> read_json(std::string_view text) {
  json value;
  if (!Reader(text).document(value)) return std::nullopt;
  return value;
}

}  // namespace agentbox::rpc
