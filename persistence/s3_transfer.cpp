#include "persistence/s3_transfer.h"

#include "persistence/sha256.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace agentbox::persistence::s3 {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string hex_sha256(const void* data, std::size_t size) {
  Sha256 sha;
  sha.update(data, size);
  return sha.finish().substr(7);  // without "sha256:"
}

// The text of the first <name>...</name> in an S3 reply (error replies,
// UploadId): S3 XML has no attributes or nesting in these elements.
std::string tag(const std::string& xml, const std::string& name) {
  std::string open = "<" + name + ">", close = "</" + name + ">";
  auto a = xml.find(open);
  if (a == std::string::npos) return "";
  a += open.size();
  auto b = xml.find(close, a);
  return b == std::string::npos ? "" : xml.substr(a, std::min<std::size_t>(b - a, 500));
}

struct Request {
  const char* method = "GET";
  std::string bucket;
  std::string key;
  std::string query;                  // encoded, parameters in sorted order (SigV4's canonical query)
  const std::string* body = nullptr;  // PUT and POST
  int out_fd = -1;                    // a 2xx reply's body goes here (GET)
  std::uint64_t max_bytes = 0;
  Sha256* digest = nullptr;
};

struct Response {
  long status = 0;
  std::string body;  // non-2xx replies, and 2xx replies without out_fd (at most 1 MiB)
  std::string etag;
  std::uint64_t written = 0;
  bool too_big = false;
  bool write_failed = false;
};

struct Transfer {
  Request* request;
  Response* response;
  CURL* curl;
  std::size_t read_at = 0;
};

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::size_t len = size * n;
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  if (t->request->out_fd >= 0 && status >= 200 && status < 300) {
    if (t->response->written + len > t->request->max_bytes) {
      t->response->too_big = true;
      return 0;  // ends the transfer (CURLE_WRITE_ERROR)
    }
    for (std::size_t done = 0; done < len;) {
      ssize_t w = ::write(t->request->out_fd, data + done, len - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        t->response->write_failed = true;
        return 0;
      }
      done += static_cast<std::size_t>(w);
    }
    if (t->request->digest) t->request->digest->update(data, len);
    t->response->written += len;
    return len;
  }
  if (t->response->body.size() < (1u << 20)) t->response->body.append(data, len);
  return len;
}

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string line(data, size * n);
  if (line.size() > 5 && strncasecmp(line.c_str(), "etag:", 5) == 0) {
    std::string v = line.substr(5);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.erase(0, 1);
    while (!v.empty() && (v.back() == '\r' || v.back() == '\n' || v.back() == ' ')) v.pop_back();
    t->response->etag = v;
  }
  return size * n;
}

std::size_t on_read(char* buffer, std::size_t size, std::size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string& body = *t->request->body;
  std::size_t len = std::min(size * n, body.size() - t->read_at);
  std::memcpy(buffer, body.data() + t->read_at, len);
  t->read_at += len;
  return len;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string describe(const Request& r) {
  std::string what = std::string(r.method) + " " + r.bucket + (r.key.empty() ? "" : "/" + r.key);
  return what;
}

Response perform(const Endpoint& e, Request& r) {
  global_init();
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) throw std::runtime_error("cannot start an HTTP transfer (curl_easy_init)");
  CURL* h = curl.get();
  Response response;
  Transfer t{&r, &response, h};
  std::string url = e.base + "/" + r.bucket + (r.key.empty() ? "" : "/" + r.key) + (r.query.empty() ? "" : "?" + r.query);
  std::string sigv4 = "aws:amz:" + e.region + ":s3";
  const std::string empty;
  const std::string& payload = r.body ? *r.body : empty;
  // Every header here is signed (so no "Expect:" to drop 100-continue: a
  // header curl signs but does not send breaks the signature).
  std::vector<std::string> lines{"x-amz-content-sha256: " + hex_sha256(payload.data(), payload.size())};
  if (!e.session_token.empty()) lines.push_back("x-amz-security-token: " + e.session_token);
  curl_slist* headers = nullptr;
  for (const auto& line : lines) headers = curl_slist_append(headers, line.c_str());
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> free_headers(headers, curl_slist_free_all);
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(h, CURLOPT_USERNAME, e.access_key.c_str());
  curl_easy_setopt(h, CURLOPT_PASSWORD, e.secret_key.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
  // A store that stops moving bytes for a minute is given up on (retried later).
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  std::string method = r.method;
  if (method == "PUT") {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(h, CURLOPT_READDATA, &t);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(payload.size()));
  } else if (method == "POST") {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(payload.size()));
  } else if (method == "DELETE") {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
  }
  CURLcode rc = curl_easy_perform(h);
  if (response.too_big)
    throw std::runtime_error("the snapshot store's " + r.key + " is larger than " + std::to_string(r.max_bytes) +
                             " bytes: not read further");
  if (response.write_failed) throw std::runtime_error("cannot write what the snapshot store sent: " + std::string(std::strerror(errno)));
  if (rc != CURLE_OK)
    throw std::runtime_error("cannot reach the snapshot store at " + e.base + " (" + describe(r) +
                             "): " + (error[0] ? error : curl_easy_strerror(rc)));
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

[[noreturn]] void refused(const Endpoint& e, const Request& r, const Response& response) {
  std::string code = tag(response.body, "Code"), message = tag(response.body, "Message");
  std::string hint;
  if (code == "SignatureDoesNotMatch") hint = " (check AWS_SECRET_ACCESS_KEY)";
  else if (code == "InvalidAccessKeyId") hint = " (check AWS_ACCESS_KEY_ID)";
  else if (code == "NoSuchBucket") hint = " (create the bucket " + r.bucket + " first)";
  else if (code == "AccessDenied") hint = " (these credentials may not use " + r.bucket + ")";
  else if (code.empty() && response.status == 403) hint = " (check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)";
  throw std::runtime_error("the snapshot store at " + e.base + " refused " + describe(r) + ": HTTP " +
                           std::to_string(response.status) + (code.empty() ? "" : " " + code) +
                           (message.empty() ? "" : ": " + message) + hint);
}

bool ok(const Response& r) { return r.status >= 200 && r.status < 300; }

Response send(const Endpoint& e, Request& r) {
  Response response = perform(e, r);
  // CompleteMultipartUpload may answer 200 with an error inside.
  if (!ok(response) || response.body.find("<Error>") != std::string::npos) refused(e, r, response);
  return response;
}

std::string read_range(int fd, std::uint64_t offset, std::uint64_t size, const fs::path& file) {
  std::string out(size, '\0');
  std::uint64_t done = 0;
  while (done < size) {
    ssize_t n = pread(fd, out.data() + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error("cannot read " + file.string() + ": " + (n == 0 ? "it got shorter" : std::strerror(errno)));
    done += static_cast<std::uint64_t>(n);
  }
  return out;
}

std::string escape(const std::string& v) {
  char* p = curl_easy_escape(nullptr, v.c_str(), static_cast<int>(v.size()));
  std::string out = p ? p : "";
  curl_free(p);
  return out;
}

}  // namespace

std::string endpoint_from_env(Endpoint& out) {
  out.region = env("AWS_REGION");
  if (out.region.empty()) out.region = env("AWS_DEFAULT_REGION");
  if (out.region.empty()) out.region = "us-east-1";
  out.base = env("AWS_ENDPOINT_URL");
  if (out.base.empty()) out.base = "https://s3." + out.region + ".amazonaws.com";
  while (!out.base.empty() && out.base.back() == '/') out.base.pop_back();
  if (out.base.rfind("http://", 0) != 0 && out.base.rfind("https://", 0) != 0)
    return "AWS_ENDPOINT_URL must start with http:// or https://, not '" + out.base + "'";
  out.access_key = env("AWS_ACCESS_KEY_ID");
  out.secret_key = env("AWS_SECRET_ACCESS_KEY");
  out.session_token = env("AWS_SESSION_TOKEN");
  if (out.access_key.empty() || out.secret_key.empty())
    return "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set for the snapshot store";
  for (char c : out.region)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return "AWS_REGION '" + out.region + "' is not a region name";
  return "";
}

void put_file(const Endpoint& e, const std::string& bucket, const std::string& key, const fs::path& file) {
  int fd = open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + file.string() + ": " + std::strerror(errno));
  std::unique_ptr<int, void (*)(int*)> closer(&fd, [](int* f) { close(*f); });
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) throw std::runtime_error(file.string() + " is not a regular file");
  auto size = static_cast<std::uint64_t>(st.st_size);
  if (size <= kPartBytes) {
    std::string body = read_range(fd, 0, size, file);
    Request r{.method = "PUT", .bucket = bucket, .key = key, .body = &body};
    send(e, r);
    return;
  }
  Request start{.method = "POST", .bucket = bucket, .key = key, .query = "uploads="};
  std::string none;
  start.body = &none;
  std::string id = tag(send(e, start).body, "UploadId");
  if (id.empty()) throw std::runtime_error("the snapshot store at " + e.base + " gave no UploadId for " + key);
  try {
    std::string done = "<CompleteMultipartUpload>";
    int part = 1;
    for (std::uint64_t at = 0; at < size; at += kPartBytes, ++part) {
      std::string body = read_range(fd, at, std::min(kPartBytes, size - at), file);
      Request r{.method = "PUT", .bucket = bucket, .key = key,
                .query = "partNumber=" + std::to_string(part) + "&uploadId=" + escape(id), .body = &body};
      std::string etag = send(e, r).etag;
      if (etag.empty()) throw std::runtime_error("the snapshot store at " + e.base + " gave no ETag for part " + std::to_string(part));
      done += "<Part><PartNumber>" + std::to_string(part) + "</PartNumber><ETag>" + etag + "</ETag></Part>";
    }
    done += "</CompleteMultipartUpload>";
    Request finish{.method = "POST", .bucket = bucket, .key = key, .query = "uploadId=" + escape(id), .body = &done};
    send(e, finish);
  } catch (...) {
    try {
      Request abort{.method = "DELETE", .bucket = bucket, .key = key, .query = "uploadId=" + escape(id)};
      perform(e, abort);  // best effort: a store lets unfinished uploads expire too
    } catch (const std::exception&) {
    }
    throw;
  }
}

Fetched get_file(const Endpoint& e, const std::string& bucket, const std::string& key, const fs::path& to,
                 std::uint64_t max_bytes) {
  int fd = open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot create " + to.string() + ": " + std::strerror(errno));
  std::unique_ptr<int, void (*)(int*)> closer(&fd, [](int* f) { close(*f); });
  Sha256 digest;
  Request r{.method = "GET", .bucket = bucket, .key = key, .out_fd = fd, .max_bytes = max_bytes, .digest = &digest};
  Response response = perform(e, r);
  Fetched out;
  if (response.status == 404 && tag(response.body, "Code") != "NoSuchBucket") return out;
  if (!ok(response)) refused(e, r, response);
  if (fsync(fd) != 0) throw std::runtime_error("cannot write " + to.string() + ": " + std::strerror(errno));
  out.found = true;
  out.digest = digest.finish();
  out.bytes = response.written;
  return out;
}

void remove(const Endpoint& e, const std::string& bucket, const std::string& key) {
  Request r{.method = "DELETE", .bucket = bucket, .key = key};
  Response response = perform(e, r);
  if (!ok(response) && response.status != 404) refused(e, r, response);
}

void check_bucket(const Endpoint& e, const std::string& bucket) {
  Request r{.method = "GET", .bucket = bucket, .query = "max-keys=1"};
  send(e, r);
}

}  // namespace agentbox::persistence::s3
