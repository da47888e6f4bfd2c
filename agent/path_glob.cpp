#include "agent/path_glob.h"

#include "contract/errors.h"

#include <algorithm>
#include <fnmatch.h>

namespace agentbox::agent {

namespace {

constexpr std::size_t kMaxGlobAlternatives = 256;
constexpr long kMaxGlobStars = 4;

std::vector<std::string> expand_braces(const std::string& glob) {
  std::size_t open = glob.find('{');
  if (open == std::string::npos) return {glob};
  int depth = 0;
  std::vector<std::size_t> commas;
  std::size_t close = std::string::npos;
  for (std::size_t i = open; i < glob.size() && close == std::string::npos; ++i) {
    if (glob[i] == '{') ++depth;
    else if (glob[i] == '}' && --depth == 0) close = i;
    else if (glob[i] == ',' && depth == 1) commas.push_back(i);
  }
  if (close == std::string::npos) return {glob};  // unbalanced: taken literally
  std::vector<std::string> out;
  std::size_t from = open + 1;
  commas.push_back(close);
  for (std::size_t comma : commas) {
    std::string alternative = glob.substr(0, open) + glob.substr(from, comma - from) + glob.substr(close + 1);
    for (auto& e : expand_braces(alternative)) out.push_back(std::move(e));
    if (out.size() > kMaxGlobAlternatives) return out;  // the caller refuses it
    from = comma + 1;
  }
  return out;
}

std::vector<std::string> split_segments(const std::string& path) {
  std::vector<std::string> out;
  std::size_t from = 0;
  for (std::size_t slash; (slash = path.find('/', from)) != std::string::npos; from = slash + 1)
    if (slash > from) out.push_back(path.substr(from, slash - from));
  if (from < path.size()) out.push_back(path.substr(from));
  return out;
}

bool match_segments(const std::vector<std::string>& glob, std::size_t g, const std::vector<std::string>& path,
                    std::size_t p) {
  if (g == glob.size()) return p == path.size();
  if (glob[g] == "**") {
    for (std::size_t skip = p; skip <= path.size(); ++skip)
      if (match_segments(glob, g + 1, path, skip)) return true;
    return false;
  }
  return p < path.size() && fnmatch(glob[g].c_str(), path[p].c_str(), FNM_PERIOD) == 0 &&
         match_segments(glob, g + 1, path, p + 1);
}

}  // namespace

PathGlob::PathGlob(const std::string& glob) {
  any_ = glob.empty();
  by_name_ = glob.find('/') == std::string::npos;
  if (any_) return;
  // Bounds that keep a pattern's cost small: braces multiply, and each '**'
  // multiplies the ways a path can match.
  auto expanded = expand_braces(glob);
  if (expanded.size() > kMaxGlobAlternatives)
    throw SandboxError(codes::kInvalidArguments, "glob has more than " + std::to_string(kMaxGlobAlternatives) +
                                                    " alternatives once its {...} are expanded");
  for (const auto& g : expanded) {
    globs_.push_back(split_segments(g));
    if (std::count(globs_.back().begin(), globs_.back().end(), "**") > kMaxGlobStars)
      throw SandboxError(codes::kInvalidArguments,
                         "glob has more than " + std::to_string(kMaxGlobStars) + " '**' segments");
  }
}

bool PathGlob::matches(const std::string& relative) const {
  if (any_) return true;
  std::vector<std::string> segments = split_segments(relative);
  if (by_name_ && segments.size() > 1) segments.erase(segments.begin(), segments.end() - 1);
  for (const auto& g : globs_)
    if (match_segments(g, 0, segments, 0)) return true;
  return false;
}

}  // namespace agentbox::agent
