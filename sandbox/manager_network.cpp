// `--network proxy` (docs/design.md section 10): each box's listener goes to
// the server's proxy under its conversation's policy when the box starts,
// and comes off when it stops.
#include "sandbox/manager_impl.h"
#include "sandbox/manager_sandboxes.h"

#include <spdlog/spdlog.h>

namespace agentbox::sandbox {

std::shared_ptr<const network::Policy> ManagerImpl::policy_in_force(const std::string& sandbox,
                                                                    const std::string& conversation, bool record) {
  std::optional<persistence::NetworkPolicyRecord> kept;
  if (!sandbox.empty()) kept = catalog_->network_policy(sandbox);
  std::string key = kept ? kept->key : conversation;
  auto policy = options_.network_policy->for_conversation(key);
  if (!record || sandbox.empty()) return policy;
  std::string text = policy->describe().dump();
  if (kept && kept->policy != text)
    spdlog::warn("sandbox {}: its network policy changed since it last ran (the policy file was edited): was {}, now {}",
                 sandbox, kept->policy, text);
  try {
    if (!kept || kept->policy != text) catalog_->set_network_policy(sandbox, key, text);
  } catch (const std::exception& e) {
    // The policy still applies; only its record is behind (a fork made now
    // would start under its own conversation's entry, never a wider one).
    spdlog::warn("sandbox {}: could not record its network policy: {}", sandbox, e.what());
  }
  return policy;
}

void ManagerImpl::inherit_policy(const std::string& source, const std::string& fork) {
  if (!options_.network_policy) return;
  catalog_->inherit_network_policy(source, fork);
}

void ManagerImpl::attach_proxy(ManagedSandbox& sandbox, Box& box) {
  auto policy = policy_in_force(sandbox.id(), sandbox.conversation(), true);
  os::UniqueFd listener = box.listen_inside(kProxyPortInside);
  options_.proxy->attach(sandbox.id(), listener.release(), std::move(policy));
  spdlog::debug("sandbox {}: egress proxy on 127.0.0.1:{} inside", sandbox.id(), kProxyPortInside);
}

std::shared_ptr<const network::Policy> Manager::network_policy(const std::string& conversation) const {
  if (!impl_->options_.network_policy) return nullptr;
  std::string id;
  if (auto running = impl_->find(conversation)) id = running->id();
  else if (auto record = impl_->catalog_->find_by_conversation(conversation)) id = record->id;
  return impl_->policy_in_force(id, conversation, false);
}

std::vector<network::Denial> Manager::network_denials(const std::string& conversation,
                                                      std::chrono::system_clock::time_point since) {
  if (!impl_->options_.proxy) return {};
  std::string id;
  if (auto running = impl_->find(conversation)) id = running->id();
  else if (auto record = impl_->catalog_->find_by_conversation(conversation)) id = record->id;
  if (id.empty()) return {};
  return impl_->options_.proxy->denials(id, since);
}

std::vector<os::UniqueFd> Manager::sockets_inside(const Lease& lease, std::size_t count) {
  auto& sandbox = static_cast<ManagedSandbox&>(lease.sandbox());
  std::lock_guard lock(sandbox.mutex_);
  if (!sandbox.box_) throw SandboxError(codes::kSandboxFailed, "the sandbox is not running");
  return sandbox.box_->sockets_inside(count);
}

NetworkView ManagerSandboxes::network(const std::string& conversation) {
  NetworkView view;
  const auto& options = manager_->options();
  if (options.network_host) view.mode = "host";
  if (auto policy = manager_->network_policy(conversation)) {
    view.mode = "proxy";
    view.proxy = "http://127.0.0.1:" + std::to_string(kProxyPortInside);
    view.policy = policy->describe();
    view.denials = manager_->network_denials(conversation, {});
  }
  return view;
}

std::vector<network::Denial> ManagerSandboxes::network_denials(const std::string& conversation,
                                                               std::chrono::system_clock::time_point since) {
  return manager_->network_denials(conversation, since);
}

}  // namespace agentbox::sandbox
