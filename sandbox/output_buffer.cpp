#include "sandbox/output_buffer.h"

#include <algorithm>

namespace agentbox::sandbox {

OutputBuffer::OutputBuffer(std::size_t head_bytes, std::size_t tail_bytes)
    : head_cap_(head_bytes), tail_cap_(tail_bytes) {}

void OutputBuffer::append(std::string_view data) {
  total_ += data.size();
  if (head_.size() < head_cap_) {
    std::size_t take = std::min(head_cap_ - head_.size(), data.size());
    head_.append(data.substr(0, take));
    data.remove_prefix(take);
    tail_start_ = head_.size();
  }
  if (data.empty()) return;
  if (data.size() >= tail_cap_) {
    tail_.assign(data.substr(data.size() - tail_cap_));
    tail_start_ = total_ - tail_.size();
    return;
  }
  tail_.append(data);
  // Trim in batches (at 2x) so a stream of small writes stays amortised O(1).
  if (tail_.size() > 2 * tail_cap_) {
    std::size_t cut = tail_.size() - tail_cap_;
    tail_.erase(0, cut);
    tail_start_ += cut;
  }
}

std::string OutputBuffer::bytes_between(std::uint64_t from, std::uint64_t to) const {
  std::string out;
  if (from < head_.size()) {
    std::uint64_t end = std::min<std::uint64_t>(to, head_.size());
    out.append(head_, from, end - from);
    from = end;
  }
  from = std::max(from, tail_start_);
  if (from < to) out.append(tail_, from - tail_start_, to - from);
  return out;
}

OutputBuffer::Slice OutputBuffer::read(std::uint64_t offset, std::size_t max_bytes) const {
  Slice slice;
  offset = std::min(offset, total_);
  if (offset >= head_.size() && offset < tail_start_) {
    slice.skipped = tail_start_ - offset;
    slice.data = "[... " + std::to_string(slice.skipped) +
                 " bytes were dropped here: the output buffer keeps the first and the last part ...]\n";
    offset = tail_start_;
  }
  std::uint64_t end = std::min<std::uint64_t>(total_, offset + max_bytes);
  // Never end inside a UTF-8 sequence unless the stream itself does.
  std::string chunk = bytes_between(offset, end);
  if (end < total_) chunk.resize(utf8_prefix(chunk, chunk.size()).size());
  slice.next_offset = offset + chunk.size();
  slice.data += chunk;
  return slice;
}

OutputBuffer::Inline OutputBuffer::inline_view(std::size_t budget, const std::string& resume_hint) const {
  Inline view;
  if (total_ <= budget && dropped() == 0) {
    view.text = head_ + tail_;
    return view;
  }
  view.truncated = true;
  std::size_t head_part = budget / 2;
  std::string front(utf8_prefix(head_, head_part));
  std::size_t back_budget = budget - front.size();
  std::uint64_t from = std::max<std::uint64_t>(front.size(), total_ - std::min<std::uint64_t>(total_, back_budget + 3));
  if (from >= head_.size() && from < tail_start_) from = tail_start_;
  std::string back(utf8_suffix(bytes_between(from, total_), back_budget));
  std::uint64_t cut = total_ - front.size() - back.size();
  view.text = front + "\n[... " + std::to_string(cut) + " bytes cut from the middle (" +
              std::to_string(total_) + " in all); " + resume_hint + " ...]\n" + back;
  return view;
}

std::string_view utf8_prefix(std::string_view s, std::size_t n) {
  if (s.size() <= n) return s;
  std::size_t end = n;
  // Step back over continuation bytes (10xxxxxx) so the cut lands on a boundary.
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end);
}

std::string_view utf8_suffix(std::string_view s, std::size_t n) {
  if (s.size() <= n) return s;
  std::size_t start = s.size() - n;
  while (start < s.size() && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) ++start;
  return s.substr(start);
}

std::pair<std::size_t, std::size_t> split_budget(std::uint64_t out, std::uint64_t err, std::size_t budget) {
  if (out + err <= budget) return {static_cast<std::size_t>(out), static_cast<std::size_t>(err)};
  std::size_t err_part = static_cast<std::size_t>(std::min<std::uint64_t>(err, std::max<std::uint64_t>(budget / 4, budget > out ? budget - out : 0)));
  return {budget - err_part, err_part};
}

}  // namespace agentbox::sandbox
