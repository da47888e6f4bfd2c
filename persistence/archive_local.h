// The libarchive side of snapshots: what the helper executable
// agentbox-archive runs (persistence/archive_helper.cpp). The server does not
// link this code (nor libarchive, its decoders or OpenSSL): archive.h's
// functions run the helper, one process per operation (archive_client.cpp),
// so parsing an untrusted archive happens outside the server process.
#pragma once

#include "persistence/archive.h"

#include <archive.h>

namespace agentbox::persistence::local {

// libarchive's message for `a`, which can be null (a zstd stream damaged
// mid-way reports none).
inline std::string archive_message(struct archive* a) {
  const char* e = archive_error_string(a);
  return e ? e : "unknown libarchive error";
}

// Writes the trees to `temp` (created with O_EXCL, fsynced). No rename: the
// caller records its pending catalog row first, then renames. A failure
// unlinks `temp` and throws ArchiveError.
WriteResult write_archive_file(const std::vector<ArchiveTree>& trees, const std::filesystem::path& temp,
                               const WriteOptions& options);

ExtractResult extract_layers(const std::vector<Layer>& layers, const std::filesystem::path& dest,
                             const ExtractOptions& options);
// Writes the merge to `temp` (created with O_EXCL, fsynced); the caller renames.
WriteResult merge_archives_file(const Layer& parent, const Layer& child, const std::string& new_parent,
                                const std::filesystem::path& temp, const WriteOptions& options);
ExtractResult verify_archive(const std::filesystem::path& archive);
std::string file_digest(const std::filesystem::path& file);

}  // namespace agentbox::persistence::local
