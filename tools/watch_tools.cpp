// File watches: file_watch and file_changes (agent side in agent/watches.h;
// inotify runs inside the box). The text a model reads is one line per
// event and where to read on.
#include "tools/sandbox_call.h"

namespace agentbox::tools {

namespace {

using std::chrono::milliseconds;

milliseconds fixed(const json&) { return milliseconds(60'000); }
milliseconds waiting(const json& a) {
  const json& wait = a.contains("wait_ms") ? a["wait_ms"] : json();
  return milliseconds(wait.is_number_integer() ? wait.get<std::int64_t>() : 0) + milliseconds(30'000);
}

}  // namespace

void register_watch_tools(Registry& registry, const Services& services) {
  bind_agent_tool(registry, services, "file_watch", "watch.add", fixed, [](const json& r) {
    std::string text = "Watching " + r.value("path", "") + (r.value("recursive", true) ? " and below" : "") + " as " +
                       r.value("watch_id", "") + " (" + std::to_string(r.value("directories", 0)) + " directories";
    if (r.contains("unwatched_directories"))
      text += "; " + std::to_string(r.value("unwatched_directories", 0)) + " more not watched: over the limit";
    text += "); file_changes watch_id " + json(r.value("watch_id", "")).dump() + " returns what changes";
    if (r.contains("replaced")) text += ". It replaced " + r.value("replaced", "") + ", unused the longest";
    return ToolResult::ok(r, text);
  });
  bind_agent_tool(registry, services, "file_changes", "watch.changes", waiting, [](const json& r) {
    std::string text;
    for (const auto& e : agent_array(r, "events")) {
      text += e.value("type", "") + " " + e.value("path", "");
      if (e.contains("from")) text += " (from " + e.value("from", "") + ")";
      text += "\n";
    }
    if (text.empty()) text = "No changes.\n";
    if (r.value("overflowed", false)) text += "[events were lost here (queue overflow): list the directory to resync]\n";
    if (!r.value("watching", true)) text += "[the watched directory is gone; the watch has ended]\n";
    text += "[next: file_changes watch_id " + json(r.value("watch_id", "")).dump() + " cursor " +
            std::to_string(r.value("next_cursor", 0)) + (r.value("more", false) ? "; more events wait" : "") + "]";
    return ToolResult::ok(r, text);
  });
}

}  // namespace agentbox::tools
