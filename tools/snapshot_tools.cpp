// Snapshot tools: sandbox_snapshot, snapshot_list, sandbox_restore, sandbox_fork. Long
// snapshots and restores report progress (bytes) when the caller asked.
#include "tools/sandbox_call.h"


namespace agentbox::tools {

namespace {

json label_json(const std::string& label) { return label.empty() ? json(nullptr) : json(label); }

sandbox::ProgressFn progress_of(const std::shared_ptr<CallContext>& context) {
  return [context](double done, std::optional<double> total, const std::string& message) {
    context->progress(done, total, message);
  };
}

std::string megabytes(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return buf;
}

}  // namespace

json snapshot_json(const persistence::SnapshotRecord& s) {
  return {{"snapshot", s.id},  {"created_at", s.created_at}, {"bytes", s.bytes},
          {"files", s.files},  {"label", label_json(s.label)}, {"reason", s.reason}};
}

void register_snapshot_tools(Registry& registry, const Services& services) {
  registry.add("sandbox_snapshot", [services](const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
    sandbox::Sandboxes* sandboxes = sandboxes_or_reply(services, reply);
    if (!sandboxes) return;
    std::string label = args.value("label", "");
    run_blocking([sandboxes, context, reply, label] {
      try {
        auto info = sandboxes->snapshot(context->conversation(), label, progress_of(context));
        const auto& s = info.record;
        json out = {{"snapshot", s.id},          {"bytes", s.bytes},          {"files", s.files},
                    {"parent", s.parent.empty() ? json(nullptr) : json(s.parent)},
                    {"duration_ms", info.duration.count()}, {"label", label_json(s.label)},
                    {"created_at", s.created_at}, {"digest", s.digest},
                    {"frozen_ms", info.frozen ? json(info.frozen->count()) : json(nullptr)}, {"freeze", info.freeze}};
        std::string instant = info.frozen ? " Processes frozen " + std::to_string(info.frozen->count()) + " ms (" +
                                                info.freeze + "): one instant."
                                          : " Processes were not frozen (" + info.freeze + ").";
        reply(ToolResult::ok(out, "Snapshot " + s.id + (label.empty() ? "" : " '" + label + "'") + ": " +
                                      std::to_string(s.files) + " entries, " + megabytes(s.bytes) + " compressed" +
                                      (s.parent.empty() ? "" : " (the changes since " + s.parent + ")") + ", in " +
                                      std::to_string(info.duration.count()) + " ms." + instant));
      } catch (const SandboxError& e) {
        reply(error_result(e));
      }
    });
  });
  registry.add("snapshot_list", [services](const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
    sandbox::Sandboxes* sandboxes = sandboxes_or_reply(services, reply);
    if (!sandboxes) return;
    json list = json::array();
    for (const auto& s : sandboxes->snapshots(context->conversation())) {
      json one = snapshot_json(s);
      one["total_bytes"] = std::max(s.total_bytes, s.bytes);
      one["parent"] = s.parent.empty() ? json(nullptr) : json(s.parent);
      list.push_back(std::move(one));
    }
    std::string cursor = args.value("cursor", ""), next;
    if (!page_of(list, "snapshot", cursor, sandboxes->limits().inline_output_chars, next))
      return reply(unknown_cursor(cursor));
    std::string text;
    for (const auto& s : list) {
      std::string label = s["label"].is_string() ? "'" + s["label"].get<std::string>() + "'" : s.value("reason", "");
      text += "\n" + s.value("snapshot", "") + "  " + s.value("created_at", "") + "  " + megabytes(s.value("bytes", 0)) + " (" +
              megabytes(s.value("total_bytes", 0)) + " to restore)" +
              "  " + std::to_string(s.value("files", 0)) + " entries  " + label;
    }
    json out = {{"snapshots", list}};
    if (auto store = sandboxes->store_status(context->conversation())) {
      out["store"] = {{"url", store->url}, {"state", store->state}, {"pending", store->pending}};
      if (!store->error.empty()) out["store"]["error"] = store->error;
      text += "\nsnapshot store " + store->url + ": " + store->state +
              (store->pending ? " (" + std::to_string(store->pending) + " not there yet)" : "") +
              (store->error.empty() ? "" : ": " + store->error);
    }
    if (!next.empty()) {
      out["truncated"] = true;
      out["next_cursor"] = next;
      text += "\n[" + std::to_string(list.size()) + " snapshots shown; next: snapshot_list cursor " + json(next).dump() + "]";
    }
    reply(ToolResult::ok(std::move(out), list.empty() && cursor.empty() ? "No snapshots for this conversation yet."
                                                                       : std::to_string(list.size()) + " snapshot(s):" + text));
  });
  registry.add("sandbox_restore", [services](const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
    sandbox::Sandboxes* sandboxes = sandboxes_or_reply(services, reply);
    if (!sandboxes) return;
    std::string id = args.value("snapshot", "");
    run_blocking([sandboxes, context, reply, id] {
      try {
        auto info = sandboxes->restore(context->conversation(), id, progress_of(context));
        json out = {{"snapshot", info.record.id}, {"created_at", info.record.created_at},
                    {"files", info.record.files}, {"duration_ms", info.duration.count()}};
        reply(ToolResult::ok(out, "Restored snapshot " + info.record.id + " (taken " + info.record.created_at + ") in " +
                                      std::to_string(info.duration.count()) +
                                      " ms; running processes were stopped, sessions kept their state."));
      } catch (const SandboxError& e) {
        reply(error_result(e));
      }
    });
  });
  registry.add("sandbox_fork", [services](const json& args, std::shared_ptr<CallContext> context, ToolReply reply) {
    sandbox::Sandboxes* sandboxes = sandboxes_or_reply(services, reply);
    if (!sandboxes) return;
    std::string id = args.value("snapshot", ""), to = args.value("to_conversation", "");
    int count = args.value("count", 1);
    run_blocking([sandboxes, context, reply, id, to, count] {
      try {
        auto made = sandboxes->fork(context->conversation(), id, to, count, progress_of(context));
        json forks = json::array();
        std::string names;
        for (const auto& f : made.forks) {
          forks.push_back({{"conversation", f.conversation}, {"sandbox", f.sandbox}});
          names += (names.empty() ? "" : ", ") + f.conversation;
        }
        json out = {{"forks", forks},
                    {"copy", made.cloned ? "clone" : "snapshot"},
                    {"frozen_ms", made.frozen ? json(made.frozen->count()) : json(nullptr)},
                    {"duration_ms", made.duration.count()}};
        if (!made.from.id.empty()) out["snapshot"] = made.from.id;
        std::string frozen = made.frozen ? ", processes frozen " + std::to_string(made.frozen->count()) + " ms" : "";
        std::string from = made.cloned  ? "now (a copy-on-write clone of the whole box" + frozen + ")"
                           : made.taken ? "now (snapshot " + made.from.id + frozen + ")"
                                        : "snapshot " + made.from.id + " (taken " + made.from.created_at + ")";
        std::string first = made.cloned ? "its first call starts it on that copy"
                                        : "its first call unpacks the workspace";
        reply(ToolResult::ok(out, "Forked into " + names + " from " + from + " in " +
                                      std::to_string(made.duration.count()) + " ms. Pass a fork's id as `conversation` "
                                      "to use it; " + first + ", and its services start again there."));
      } catch (const SandboxError& e) {
        reply(error_result(e));
      }
    });
  });
}

}  // namespace agentbox::tools
