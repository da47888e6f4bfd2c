#include "sandbox/manager_sandboxes.h"

#include "sandbox/limits_report.h"

namespace agentbox::sandbox {

namespace {

class ManagerLease : public SandboxLease {
 public:
  explicit ManagerLease(Lease lease) : lease_(std::move(lease)) {}
  std::shared_ptr<AgentClient> agent() const override { return lease_.sandbox().client(); }
  const std::string& notice() const override { return lease_.notice(); }

 private:
  Lease lease_;
};

SnapshotDone done(SnapshotInfo info) { return {std::move(info.record), info.duration, info.frozen, std::move(info.freeze)}; }

}  // namespace

ManagerSandboxes::ManagerSandboxes(std::shared_ptr<Manager> manager, const std::string& expose_address)
    : manager_(std::move(manager)), ports_(std::make_unique<ExposedPorts>(manager_, expose_address)) {
  ports_->open_all();
}

ExposedPort ManagerSandboxes::expose_port(const std::string& conversation, int port, std::optional<int> host_port) {
  return ports_->expose(conversation, port, host_port);
}

std::vector<ExposedPort> ManagerSandboxes::exposed_ports(const std::string& conversation) {
  return ports_->list(conversation);
}

bool ManagerSandboxes::unexpose_port(const std::string& conversation, int port) {
  return ports_->unexpose(conversation, port);
}

std::unique_ptr<SandboxLease> ManagerSandboxes::acquire(const std::string& conversation, const ProgressFn& progress) {
  return std::make_unique<ManagerLease>(manager_->acquire(conversation, progress));
}

std::unique_ptr<SandboxLease> ManagerSandboxes::try_acquire(const std::string& conversation) {
  auto lease = manager_->try_acquire(conversation);
  if (!lease) return nullptr;
  return std::make_unique<ManagerLease>(std::move(*lease));
}

std::shared_ptr<AgentClient> ManagerSandboxes::running_agent(const std::string& conversation) {
  auto sandbox = manager_->find(conversation);
  if (!sandbox || sandbox->state() != persistence::SandboxState::Active) return nullptr;
  auto agent = sandbox->client();
  return agent && agent->alive() ? agent : nullptr;
}

SandboxView ManagerSandboxes::status(const std::string& conversation) {
  SandboxView view;
  view.disks = manager_->disks().support();
  view.limits = sandbox_limits(*manager_, nullptr);
  // The catalog knows sandboxes this server has not started (stopped at
  // idle, or left by an earlier server).
  auto record = manager_->record(conversation);
  if (!record) return view;
  view.sandbox = record->id;
  view.catalog_state = record->state;
  view.catalog_state_text = persistence::stored_state(*record);
  auto snapshots = manager_->snapshots(conversation);
  if (!snapshots.empty()) view.last_snapshot = snapshots.front();
  for (const auto& s : manager_->catalog().sessions(record->id)) view.sessions.push_back(s.name);
  auto sandbox = manager_->find(conversation);
  if (!sandbox) return view;
  SandboxView::Running& running = view.running.emplace();
  running.state = sandbox->state();
  if (running.state != persistence::SandboxState::Stopped) running.workspace_bytes = sandbox->workspace_bytes();
  if (running.state == persistence::SandboxState::Active) running.limits = sandbox_limits(*manager_, sandbox.get());
  if (auto disk = disk_usage(sandbox->dirs().root)) {  // its own filesystem
    running.disk_limit_bytes = manager_->disks().options().bytes;
    running.disk_inodes = disk->used_inodes;
  }
  auto client = sandbox->client();
  if (client && client->alive())
    running.agent_status = [client] { return client->call("status", json::object(), std::chrono::seconds(10)); };
  return view;
}

std::vector<persistence::SnapshotRecord> ManagerSandboxes::snapshots(const std::string& conversation) {
  return manager_->snapshots(conversation);
}

std::optional<persistence::StoreStatus> ManagerSandboxes::store_status(const std::string& conversation) {
  return manager_->store_status(conversation);
}

SnapshotDone ManagerSandboxes::snapshot(const std::string& conversation, const std::string& label,
                                        const ProgressFn& progress) {
  return done(manager_->snapshot(conversation, label, progress));
}

SnapshotDone ManagerSandboxes::restore(const std::string& conversation, const std::string& snapshot_id,
                                       const ProgressFn& progress) {
  return done(manager_->restore(conversation, snapshot_id, progress));
}

Forked ManagerSandboxes::fork(const std::string& conversation, const std::string& snapshot_id,
                              const std::string& to_conversation, int count, const ProgressFn& progress) {
  auto made = manager_->fork(conversation, snapshot_id, to_conversation, count, progress);
  Forked out;
  for (const auto& f : made.forks) out.forks.push_back({f.conversation, f.sandbox});
  out.from = made.source;
  out.taken = !made.taken.record.id.empty();
  out.cloned = made.cloned;
  out.frozen = made.taken.frozen;
  out.freeze = made.taken.freeze;
  out.duration = made.duration;
  return out;
}

Destroyed ManagerSandboxes::destroy(const std::string& conversation, bool keep_snapshots) {
  // Read before: once destroyed, the conversation names no sandbox and no snapshots.
  Destroyed out;
  if (auto record = manager_->record(conversation)) out.sandbox = record->id;
  if (keep_snapshots) out.snapshots_kept = manager_->snapshots(conversation).size();
  out.destroyed = manager_->destroy(conversation, keep_snapshots);
  return out;
}

// Code contexts: the catalog's rows under the conversation's sandbox id.
bool ManagerSandboxes::add_code_context(const std::string& conversation, const std::string& id, const std::string& language) {
  auto record = manager_->record(conversation);
  if (!record) throw SandboxError(codes::kSandboxFailed, "the conversation has no sandbox to keep a code context in");
  return manager_->catalog().add_code_context({record->id, id, language, "", 0});
}

std::vector<persistence::CodeContextRecord> ManagerSandboxes::code_contexts(const std::string& conversation) {
  auto record = manager_->record(conversation);
  return record ? manager_->catalog().code_contexts(record->id) : std::vector<persistence::CodeContextRecord>{};
}

bool ManagerSandboxes::add_code_cell(const std::string& conversation, const std::string& id, const std::string& code) {
  auto record = manager_->record(conversation);
  return record && manager_->catalog().add_code_cell(record->id, id, code);
}

std::vector<std::string> ManagerSandboxes::code_cells(const std::string& conversation, const std::string& id) {
  auto record = manager_->record(conversation);
  return record ? manager_->catalog().code_cells(record->id, id) : std::vector<std::string>{};
}

bool ManagerSandboxes::remove_code_context(const std::string& conversation, const std::string& id) {
  auto record = manager_->record(conversation);
  return record && manager_->catalog().remove_code_context(record->id, id);
}

}  // namespace agentbox::sandbox
