// Glob patterns as agents write them for ripgrep and friends (file_search's
// and file_watch's `glob`): `{a,b}` alternatives (nested too), then per
// '/'-separated segment fnmatch syntax, with a `**` segment standing for any
// number of directories (none included). Without '/' a glob matches the
// file name at any depth (rg -g "*.py"); with one, the path below the root,
// segment by segment.
#pragma once

#include <string>
#include <vector>

namespace agentbox::agent {

class PathGlob {
 public:
  // Throws SandboxError(INVALID_ARGUMENTS) for a glob too costly to match
  // (over 256 alternatives, over 4 '**'). An empty glob matches everything.
  explicit PathGlob(const std::string& glob);
  // `relative`: the path below the root ("src/a.ts").
  bool matches(const std::string& relative) const;

 private:
  bool any_ = false;
  bool by_name_ = false;
  std::vector<std::vector<std::string>> globs_;
};

}  // namespace agentbox::agent
