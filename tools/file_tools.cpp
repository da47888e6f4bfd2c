// File tools: file_read, file_write, file_edit, file_list, file_stat,
// file_mkdir, file_delete, file_move, file_search. Each maps to one agent
// method (agent/files.h), which runs inside the sandbox; this file
// only names the method and turns its result into the text the model reads.
// The structured result is the agent's result as is.
#include "tools/sandbox_call.h"

#include "contract/agent_methods.h"

namespace agentbox::tools {

namespace {

using std::chrono::milliseconds;

std::string str(const json& r, const char* key) { return r.value(key, std::string()); }
std::string num(const json& r, const char* key) { return std::to_string(r.value(key, std::uint64_t{0})); }

// Each text stands alone for hosts that show the model only the text (Gemini
// CLI, opencode, Qwen Code): it carries the payload and, when there is more,
// ends with a line that says how to get it (docs/files.md, "What hosts
// show"). The agent sized the payload for text and structuredContent together.
std::string read_text(const json& r) {
  auto content = r.find("content");
  std::string text = content != r.end() && content->is_string() ? content->get<std::string>() : std::string();
  bool more = r.value("truncated", false);
  if (text.empty() && !more) {
    return "(" + str(r, "path") + ": no content from byte " + num(r, "offset") + ", file size " + num(r, "size") + ")";
  }
  if (!more && r.value("offset", std::uint64_t{0}) == 0) return text;  // the whole file
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += "[showing bytes " + num(r, "offset") + "-" + num(r, "next_offset") + " of " + num(r, "size");
  if (!more) return text + "; the end of the file]";
  return text + "; next: file_read offset " + num(r, "next_offset") +
         (str(r, "encoding") == "base64" ? " encoding \"base64\"]" : "]");
}

// The hint of a list cut into pages: the same call again from the cursor.
std::string next_page(const char* tool, const json& r) {
  return "next: " + std::string(tool) + " with the same arguments and cursor " + r.value("next_cursor", json("")).dump();
}

std::string list_text(const json& r) {
  std::string text;
  for (const auto& e : agent_array(r, "entries")) {
    std::string type = str(e, "type");
    text += str(e, "path");
    if (type == "directory") text += "/";
    else if (type == "symlink") text += " -> " + str(e, "target");
    else text += "  " + num(e, "size") + " B";
    text += "\n";
  }
  if (text.empty()) text = "(" + str(r, "path") + " is empty)\n";
  if (r.value("truncated", false))
    text += "[" + std::to_string(agent_array(r, "entries").size()) + " entries shown; " + next_page("file_list", r) + "]";
  return text;
}

std::string stat_text(const json& r) {
  if (!r.value("exists", false)) return str(r, "path") + " does not exist";
  std::string text = str(r, "path") + ": " + str(r, "type");
  if (r.contains("target")) text += " -> " + str(r, "target") + " (" + str(r, "target_type") + ")";
  text += ", " + num(r, "size") + " bytes, mode " + str(r, "mode") + ", modified " + str(r, "modified_at");
  return text;
}

std::string search_text(const json& r) {
  std::string text;
  for (const auto& m : agent_array(r, "matches")) text += str(m, "path") + ":" + num(m, "line") + ":" + str(m, "text") + "\n";
  text += "[" + std::to_string(agent_array(r, "matches").size()) + " matches, " + num(r, "files_searched") + " files searched";
  if (r.value("skipped_binary", 0) > 0) text += ", " + num(r, "skipped_binary") + " binary files skipped";
  if (r.contains("next_cursor")) text += "; " + next_page("file_search", r);
  return text + "]";
}

// Which calls may run on the server's stdin reader thread: the agent's own
// rule for its reader thread (contract::quick_file_call), content small enough
// for the agent's pipe, once the manager is up. call_agent never blocks on
// that path; it falls back to a thread of its own when the sandbox is not
// running or its pipe is busy.
constexpr std::size_t kQuickContentBytes = 256 << 10;
bool small_content(const json& args) {
  auto content = args.find("content");
  return content == args.end() || !content->is_string() ||
         content->get_ref<const std::string&>().size() <= kQuickContentBytes;
}

// Every file tool keeps its session's order and may run inline.
void bind_file_tool(Registry& registry, const Services& services, const char* tool, const char* method,
                    milliseconds timeout, Formatter format) {
  Registry::RunInline run_inline;
  if (services.sandboxes_ready)
    run_inline = [ready = services.sandboxes_ready, method](const json& args) {
      return contract::quick_file_call(method, args) && small_content(args) && ready();
    };
  bind_agent_tool(registry, services, tool, method, fixed_timeout(timeout), std::move(format), std::move(run_inline));
  registry.keep_session_order(tool);
}

}  // namespace

void register_file_tools(Registry& registry, const Services& services) {
  const milliseconds normal{60'000}, long_walk{300'000};
  bind_file_tool(registry, services, "file_read", "file.read", normal, [](json r) {
    std::string text = read_text(r);
    return ToolResult::ok(std::move(r), std::move(text));
  });
  bind_file_tool(registry, services, "file_write", "file.write", normal, [](const json& r) {
    return ToolResult::ok(r, "Wrote " + num(r, "bytes_written") + " bytes to " + str(r, "path") + " (size now " +
                                 num(r, "size") + ")");
  });
  bind_file_tool(registry, services, "file_edit", "file.edit", normal, [](const json& r) {
    std::uint64_t n = r.value("replacements", std::uint64_t{0});
    return ToolResult::ok(r, "Replaced " + std::to_string(n) + (n == 1 ? " occurrence" : " occurrences") + " in " +
                                 str(r, "path") + "\n" + str(r, "diff"));
  });
  bind_file_tool(registry, services, "file_list", "file.list", long_walk,
            [](const json& r) { return ToolResult::ok(r, list_text(r)); });
  bind_file_tool(registry, services, "file_stat", "file.stat", normal,
            [](const json& r) { return ToolResult::ok(r, stat_text(r)); });
  bind_file_tool(registry, services, "file_mkdir", "file.mkdir", normal, [](const json& r) {
    return ToolResult::ok(r, (r.value("created", false) ? "Created directory " : "Directory already exists: ") + str(r, "path"));
  });
  bind_file_tool(registry, services, "file_delete", "file.delete", long_walk, [](const json& r) {
    return ToolResult::ok(r, "Deleted " + str(r, "path") + " (" + num(r, "entries") + " entries)");
  });
  bind_file_tool(registry, services, "file_move", "file.move", long_walk,
            [](const json& r) { return ToolResult::ok(r, "Moved " + str(r, "from") + " to " + str(r, "to")); });
  bind_file_tool(registry, services, "file_search", "file.search", long_walk,
            [](const json& r) { return ToolResult::ok(r, search_text(r)); });
}

}  // namespace agentbox::tools
