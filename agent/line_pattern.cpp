#include "agent/line_pattern.h"

#include "agent/output_buffer.h"
#include "contract/errors.h"

#include <algorithm>
#include <cstring>

namespace agentbox::agent {

namespace {

char control_escape(char c) {
  switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    default: return 0;
  }
}

// `\n` `\r` `\t` → the characters; `\d` → [0-9] and `\D` → [^0-9] outside
// bracket expressions; everything else as written. Inside brackets a
// backslash is otherwise an ordinary character in POSIX, so `[\d]` keeps
// meaning backslash or d.
std::string posix_spelling(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size());
  bool in_bracket = false;
  std::size_t members = 0;  // of the open bracket: `]` first is a member ("[]a]", "[^]a]")
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      if (char control = control_escape(pattern[i + 1])) {
        out += control;
        ++i;
        if (in_bracket) ++members;
        continue;
      }
    }
    if (in_bracket) {
      out += c;
      if (c == '^' && members == 0 && out.end()[-2] == '[') continue;
      if (c == ']' && members > 0) {
        in_bracket = false;
        continue;
      }
      ++members;
      if (c == '[' && i + 1 < pattern.size() && std::strchr(":.=", pattern[i + 1]) != nullptr) {
        // [:alpha:], [.x.], [=e=] inside the bracket: copied whole.
        std::size_t close = pattern.find(std::string{pattern[i + 1], ']'}, i + 2);
        if (close != std::string::npos) {
          out.append(pattern, i + 1, close + 1 - i);
          i = close + 1;
        }
      }
      continue;
    }
    if (c == '\\' && i + 1 < pattern.size()) {
      char n = pattern[i + 1];
      if (n == 'd') out += "[0-9]";
      else if (n == 'D') out += "[^0-9]";
      else out.append({c, n});
      ++i;
      continue;
    }
    if (c == '[') {
      in_bracket = true;
      members = 0;
    }
    out += c;
  }
  return out;
}

}  // namespace

LinePattern::LinePattern(const std::string& pattern, bool ignore_case) {
  if (pattern.find('\0') != std::string::npos)
    throw SandboxError(codes::kInvalidArguments, "pattern contains a NUL character");
  int rc = regcomp(&re_, posix_spelling(pattern).c_str(), REG_EXTENDED | REG_NEWLINE | (ignore_case ? REG_ICASE : 0));
  if (rc != 0) {
    char message[256];
    regerror(rc, &re_, message, sizeof message);
    throw SandboxError(codes::kInvalidArguments,
                       "pattern is not a valid extended regular expression: " + std::string(message));
  }
}

LinePattern::~LinePattern() { regfree(&re_); }

bool LinePattern::matches(const char* begin, const char* end) const {
  regmatch_t m[1];
  m[0].rm_so = 0;
  m[0].rm_eo = static_cast<regoff_t>(end - begin);
  return regexec(&re_, begin, 1, m, REG_STARTEND) == 0;
}

bool LinePattern::search_lines(std::string_view text) const {
  while (!text.empty()) {
    // A line is matched with its newline (a pattern may end in \n) unless
    // it was cut.
    std::size_t nl = text.find('\n');
    std::size_t len = nl == std::string_view::npos ? text.size() : nl + 1;
    if (matches(text.substr(0, std::min(len, kMaxScannedLineBytes)))) return true;
    text.remove_prefix(len);
  }
  return false;
}

void LineScanner::test_line() {
  if (line_tested_ || matched_) return;
  matched_ = pattern_.matches(line_);
  line_tested_ = true;
}

bool LineScanner::feed(std::uint64_t offset, std::string_view bytes) {
  if (matched_) return true;
  if (offset > next_) {  // bytes dropped in between: what was open is cut off
    line_.clear();
    line_tested_ = false;
    next_ = offset;
  }
  std::uint64_t skip = next_ - offset;
  if (skip >= bytes.size()) return matched_;
  bytes.remove_prefix(static_cast<std::size_t>(skip));
  next_ += bytes.size();
  while (!bytes.empty() && !matched_) {
    std::size_t nl = bytes.find('\n');
    // The line with its newline, its first kMaxScannedLineBytes kept.
    std::string_view part = bytes.substr(0, nl == std::string_view::npos ? nl : nl + 1);
    if (line_.size() < kMaxScannedLineBytes) {
      line_.append(part.substr(0, kMaxScannedLineBytes - line_.size()));
      line_tested_ = false;
    }
    if (nl == std::string_view::npos) break;
    test_line();
    line_.clear();
    line_tested_ = false;
    bytes.remove_prefix(nl + 1);
  }
  // The open line (a prompt, a progress line) is matched as it stands; it
  // is matched again only once it has grown.
  if (!line_.empty()) test_line();
  return matched_;
}

bool LineScanner::scan(const OutputBuffer& buffer) {
  for (const auto& run : buffer.held_runs(next_)) {
    if (feed(run.offset, run.bytes)) return true;
  }
  return matched_;
}

}  // namespace agentbox::agent
