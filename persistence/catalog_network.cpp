// The network policy rows (catalog.h, NetworkPolicyRecord; docs/network.md,
// "The policy in force").
#include "persistence/catalog_sql.h"

namespace agentbox::persistence {

std::optional<NetworkPolicyRecord> Catalog::network_policy(const std::string& sandbox) {
  std::lock_guard lock(mutex_);
  Statement st(db_, "SELECT sandbox_id, policy_key, policy, applied_at FROM network_policies WHERE sandbox_id = ?");
  st.bind(1, sandbox);
  if (!st.step()) return std::nullopt;
  return NetworkPolicyRecord{st.text(0), st.text(1), st.text(2), st.text(3)};
}

void Catalog::set_network_policy(const std::string& sandbox, const std::string& key, const std::string& policy) {
  transaction([&] {
    Statement(db_, "INSERT OR REPLACE INTO network_policies (sandbox_id, policy_key, policy, applied_at) "
                   "VALUES (?, ?, ?, ?)")
        .bind(1, sandbox).bind(2, key).bind(3, policy).bind(4, iso_now()).run();
  });
}

void Catalog::inherit_network_policy(const std::string& from, const std::string& to) {
  transaction([&] {
    Statement(db_, "INSERT OR REPLACE INTO network_policies (sandbox_id, policy_key, policy, applied_at) "
                   "SELECT ?, policy_key, policy, ? FROM network_policies WHERE sandbox_id = ?")
        .bind(1, to).bind(2, iso_now()).bind(3, from).run();
  });
}

}  // namespace agentbox::persistence
