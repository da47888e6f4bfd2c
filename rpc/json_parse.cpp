#include "rpc/json_parse.h"

#include "rpc/json_text.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace agentbox::rpc {

using json = nlohmann::json;

namespace {

// Builds the value from nlohmann's SAX events as its own DOM parser does (a
// repeated key: the last wins), and stops the parse at the first container
// that would open past the limit. The stack holds the chain of open
// containers; each is the last child of the one before it, so the pointers
// stay valid until it closes.
class LimitedBuilder {
 public:
  LimitedBuilder(json& root, std::size_t limit) : root_(root), limit_(limit) {}

  bool null() { return put(nullptr); }
  bool boolean(bool v) { return put(v); }
  bool number_integer(json::number_integer_t v) { return put(v); }
  bool number_unsigned(json::number_unsigned_t v) { return put(v); }
  bool number_float(json::number_float_t v, const json::string_t&) { return put(v); }
  bool string(json::string_t& v) { return put(std::move(v)); }
  bool binary(json::binary_t& v) { return put(json::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(json::value_t::object); }
  bool start_array(std::size_t) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    slot_ = &(*open_.back())[std::move(k)];
    return true;
  }
  template <typename Exception>
  bool parse_error(std::size_t, const std::string&, const Exception&) {
    return false;
  }

  bool too_deep() const { return too_deep_; }

 private:
  json* place(json&& v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  bool put(json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(json::value_t type) {
    if (open_.size() >= limit_) {
      too_deep_ = true;
      return false;
    }
    open_.push_back(place(json(type)));
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  json& root_;
  std::size_t limit_;
  std::vector<json*> open_;
  json* slot_ = nullptr;
  bool too_deep_ = false;
};

}  // namespace

std::size_t nesting_depth(std::string_view text) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') deepest = std::max(deepest, ++depth);
    else if ((c == ']' || c == '}') && depth > 0) --depth;
  }
  return deepest;
}

ParsedJson parse_json(std::string_view text) {
  ParsedJson out;
  if (auto fast = read_json(text)) {
    out.value = std::move(*fast);
    return out;
  }
  LimitedBuilder builder(out.value, kMaxNestingDepth);
  if (json::sax_parse(text.begin(), text.end(), &builder)) return out;
  if (builder.too_deep()) {
    out.failure = ParsedJson::Failure::TooDeep;
    out.depth = nesting_depth(text);
  } else {
    out.failure = ParsedJson::Failure::NotJson;
    out.value = json(json::value_t::discarded);
  }
  return out;
}

}  // namespace agentbox::rpc
