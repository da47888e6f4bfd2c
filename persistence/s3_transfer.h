// Transfers to and from S3-compatible object storage (docs/scale-out.md,
// "Snapshots in S3"), run in the snapshot helper (agentbox-archive s3 ...),
// so libcurl and its TLS stack are never mapped into the server. Requests
// are signed with SigV4 by libcurl (CURLOPT_AWS_SIGV4); the payload's SHA-256
// goes in x-amz-content-sha256. Path-style URLs: <endpoint>/<bucket>/<key>.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace agentbox::persistence::s3 {

struct Endpoint {
  std::string base;  // "http://127.0.0.1:9000", no trailing slash
  std::string region;
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // AWS_SESSION_TOKEN, empty when none
};

// From AWS_ENDPOINT_URL (default https://s3.<region>.amazonaws.com),
// AWS_REGION or AWS_DEFAULT_REGION (default us-east-1), AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN. Returns "" or why not.
std::string endpoint_from_env(Endpoint& out);

// Objects above this go up in parts of this size (multipart upload).
inline constexpr std::uint64_t kPartBytes = 8ull << 20;

struct Fetched {
  bool found = false;  // false: the store has no such key (HTTP 404)
  std::string digest;  // "sha256:<hex>" of what was written
  std::uint64_t bytes = 0;
};

// Each throws std::runtime_error with a sentence naming the store and, for
// a refusal, the S3 error code and what to check.
void put_file(const Endpoint& e, const std::string& bucket, const std::string& key, const std::filesystem::path& file);
Fetched get_file(const Endpoint& e, const std::string& bucket, const std::string& key, const std::filesystem::path& to,
                 std::uint64_t max_bytes);
void remove(const Endpoint& e, const std::string& bucket, const std::string& key);
void check_bucket(const Endpoint& e, const std::string& bucket);

}  // namespace agentbox::persistence::s3
