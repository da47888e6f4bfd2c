// Snapshots kept in S3-compatible object storage as well as in the state
// directory (docs/scale-out.md, "Snapshots in S3"; `serve --snapshot-store
// s3://bucket/prefix`). The local archives stay the working copies; the
// store holds a copy of each complete snapshot and, per conversation, a
// manifest naming its sandbox, its snapshots and its saved sessions, so a
// server with an empty state directory restores the conversation from the
// store alone. Keys:
//   <prefix>/conversations/<sha256 of the conversation id>.json
//   <prefix>/sandboxes/<sandbox id>/<archive file name>
// Transfers run in the snapshot helper (s3_transfer.h). What the store
// sends back is untrusted: a manifest is checked field by field, an archive
// against the digest its manifest names before it gets its name.
#pragma once

#include "os/unique_fd.h"
#include "persistence/catalog.h"
#include "persistence/store.h"

#include <chrono>
#include <set>
#include <stdexcept>
#include <string>

namespace agentbox::persistence {

struct StoreLocation {
  std::string url;     // as given: s3://bucket/prefix
  std::string bucket;
  std::string prefix;  // "" or "team/one/" (ends with '/')
};

// "" or why the URL cannot be used.
std::string parse_store_url(const std::string& url, StoreLocation& out);

class StoreError : public std::runtime_error {
 public:
  explicit StoreError(const std::string& what, bool corrupt = false) : std::runtime_error(what), corrupt_(corrupt) {}
  bool corrupt() const { return corrupt_; }  // an archive or manifest that does not check

 private:
  bool corrupt_;
};

class RemoteStore {
 public:
  RemoteStore(StoreLocation where, const StateLayout& layout, Catalog& catalog);

  const StoreLocation& where() const { return where_; }
  // The bucket answers and takes the credentials.
  void check();
  // Makes the store hold the complete snapshots the catalog has for this
  // sandbox, then its manifest, then drops the sandbox's objects the
  // manifest no longer names. Returns the snapshot ids now in the store.
  // A manifest naming another sandbox for the conversation is not
  // overwritten (StoreError).
  std::set<std::string> sync(const SandboxRecord& sandbox);
  // A destroyed conversation: its manifest, then its sandbox's objects.
  void erase(const std::string& conversation, const std::string& sandbox);
  // A conversation this server has no sandbox for: when the store has a
  // manifest for it, downloads its archives (digests checked) and records
  // the sandbox as stopped with those snapshots and sessions. False when
  // the store has none.
  bool import(const std::string& conversation);

  // Stops the transfer under way and fails every later one at once (a
  // server shutting down: it does not wait for the store). Thread-safe.
  void cancel() noexcept;

  std::string manifest_key(const std::string& conversation) const;
  std::string object_key(const std::string& sandbox, const std::string& file) const;

 private:
  std::string helper(const std::vector<std::string>& args, std::chrono::milliseconds timeout);
  // The manifest's JSON text, "" when the store has none.
  std::string fetch_manifest(const std::string& conversation);
  std::filesystem::path temp(const std::string& what) const;

  StoreLocation where_;
  const StateLayout& layout_;
  Catalog& catalog_;
  os::UniqueFd cancel_read_, cancel_write_;  // readable once cancelled: the helper is killed
};

// Runs the snapshot helper (agentbox-archive) with these arguments and
// returns the text after its "OK"; its "ERR" message becomes an ArchiveError.
// A readable cancel_fd kills it and fails the run.
std::string run_archive_helper(const std::vector<std::string>& args, std::chrono::milliseconds timeout,
                               int cancel_fd = -1);

}  // namespace agentbox::persistence
