// Sandboxes (sandboxes.h) over the Manager: what the composition root hands
// the tools. A thin translation; the manager keeps every rule.
#pragma once

#include "sandbox/manager.h"
#include "sandbox/sandboxes.h"

#include <memory>

namespace agentbox::sandbox {

class ManagerSandboxes : public Sandboxes {
 public:
  // Opens the listeners of the exposed ports the catalog keeps, on
  // expose_address (--expose-address).
  explicit ManagerSandboxes(std::shared_ptr<Manager> manager, const std::string& expose_address = "127.0.0.1");

  std::unique_ptr<SandboxLease> acquire(const std::string& conversation, const ProgressFn& progress) override;
  std::unique_ptr<SandboxLease> try_acquire(const std::string& conversation) override;
  std::shared_ptr<AgentClient> running_agent(const std::string& conversation) override;
  SandboxView status(const std::string& conversation) override;
  std::vector<persistence::SnapshotRecord> snapshots(const std::string& conversation) override;
  std::optional<persistence::StoreStatus> store_status(const std::string& conversation) override;
  SnapshotDone snapshot(const std::string& conversation, const std::string& label, const ProgressFn& progress) override;
  Forked fork(const std::string& conversation, const std::string& snapshot_id, const std::string& to_conversation,
              int count, const ProgressFn& progress) override;
  SnapshotDone restore(const std::string& conversation, const std::string& snapshot_id,
                       const ProgressFn& progress) override;
  Destroyed destroy(const std::string& conversation, bool keep_snapshots) override;
  const Limits& limits() const override { return manager_->options().limits; }
  NetworkView network(const std::string& conversation) override;
  std::vector<network::Denial> network_denials(const std::string& conversation,
                                               std::chrono::system_clock::time_point since) override;

  ExposedPort expose_port(const std::string& conversation, int port, std::optional<int> host_port) override;
  std::vector<ExposedPort> exposed_ports(const std::string& conversation) override;
  bool unexpose_port(const std::string& conversation, int port) override;
  bool add_code_context(const std::string& conversation, const std::string& id, const std::string& language) override;
  std::vector<persistence::CodeContextRecord> code_contexts(const std::string& conversation) override;
  bool add_code_cell(const std::string& conversation, const std::string& id, const std::string& code) override;
  std::vector<std::string> code_cells(const std::string& conversation, const std::string& id) override;
  bool remove_code_context(const std::string& conversation, const std::string& id) override;

  Manager& manager() const { return *manager_; }

 private:
  std::shared_ptr<Manager> manager_;
  std::unique_ptr<ExposedPorts> ports_;  // its relay's connections use manager_
};

}  // namespace agentbox::sandbox
