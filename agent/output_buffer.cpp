#include "agent/output_buffer.h"

#include "os/utf8.h"

#include <algorithm>
#include <vector>

namespace agentbox::agent {

namespace {

// Length of the UTF-8 sequence at s[i] if it is well-formed (Unicode's table
// 3-7, which the JSON writer's decoder follows), else 0.
std::size_t sequence_length(std::string_view s, std::size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  std::size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (len == 0 || i + len > s.size()) return 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c == 0xE0) lo = 0xA0;
  else if (c == 0xED) hi = 0x9F;
  else if (c == 0xF0) lo = 0x90;
  else if (c == 0xF4) hi = 0x8F;
  auto second = static_cast<unsigned char>(s[i + 1]);
  if (second < lo || second > hi) return 0;
  for (std::size_t k = 2; k < len; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  return len;
}

struct Unit {
  std::size_t bytes;
  std::size_t cost;
  bool newline;
};

// One character at s[i] (or one byte that is not UTF-8) and what it costs
// shown twice: raw in the text, escaped in JSON (\n, \" and the like take 2,
// other control characters 6 as \u00XX; a bad byte becomes U+FFFD, 3 bytes
// in each).
Unit unit_at(std::string_view s, std::size_t i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    bool short_escape = c == '"' || c == '\\' || c == '\n' || c == '\t' || c == '\r' || c == '\b' || c == '\f';
    std::size_t escaped = short_escape ? 2 : c < 0x20 ? 6 : 1;
    return {1, 1 + escaped, c == '\n'};
  }
  std::size_t len = sequence_length(s, i);
  if (len == 0) return {1, 6, false};
  return {len, 2 * len, false};
}

}  // namespace

std::size_t shown_cost(std::string_view s) {
  std::size_t cost = 0;
  for (std::size_t i = 0; i < s.size();) {
    Unit u = unit_at(s, i);
    cost += u.cost;
    i += u.bytes;
  }
  return cost;
}

std::size_t fit_prefix(std::string_view s, std::size_t budget, std::size_t max_lines) {
  std::size_t i = 0, cost = 0, lines = 0;
  // A prefix ends at its max_lines-th newline; without newlines to spend it
  // may still hold the start of one line.
  while (i < s.size() && (lines < max_lines || max_lines == 0)) {
    Unit u = unit_at(s, i);
    if (cost + u.cost > budget || (u.newline && lines == max_lines)) break;
    cost += u.cost;
    lines += u.newline;
    i += u.bytes;
  }
  return i;
}

std::size_t fit_suffix(std::string_view s, std::size_t budget, std::size_t max_lines) {
  // Every byte costs at least 2, so nothing before this window can fit.
  std::size_t start = s.size() > budget / 2 + 4 ? s.size() - (budget / 2 + 4) : 0;
  while (start < s.size() && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) ++start;
  struct Mark {
    std::size_t at, cost, lines;
  };
  std::vector<Mark> marks;
  std::size_t cost = 0, lines = 0;
  for (std::size_t i = start; i < s.size();) {
    marks.push_back({i, cost, lines});
    Unit u = unit_at(s, i);
    cost += u.cost;
    lines += u.newline;
    i += u.bytes;
  }
  for (const Mark& m : marks)
    if (cost - m.cost <= budget && lines - m.lines <= max_lines) return s.size() - m.at;
  return 0;
}

OutputBuffer::OutputBuffer(std::size_t head_bytes, std::size_t tail_bytes)
    : head_cap_(head_bytes), tail_cap_(tail_bytes) {}

void OutputBuffer::append(std::string_view data) {
  total_ += data.size();
  lines_ += static_cast<std::uint64_t>(std::count(data.begin(), data.end(), '\n'));
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

std::array<OutputBuffer::Run, 2> OutputBuffer::held_runs(std::uint64_t offset) const {
  std::array<Run, 2> runs;
  std::string_view head(head_), tail(tail_);
  if (offset < head.size()) runs[0] = {offset, head.substr(static_cast<std::size_t>(offset))};
  std::uint64_t from = std::max(offset, tail_start_);
  if (from < total_) runs[1] = {from, tail.substr(static_cast<std::size_t>(from - tail_start_))};
  return runs;
}

OutputBuffer::Slice OutputBuffer::read(std::uint64_t offset, std::size_t budget, std::size_t max_lines) const {
  Slice slice;
  offset = std::min(offset, total_);
  if (offset >= head_.size() && offset < tail_start_) {
    slice.skipped = tail_start_ - offset;
    slice.data = "[... " + std::to_string(slice.skipped) +
                 " bytes were dropped here: the output buffer keeps the first and the last part ...]\n";
    offset = tail_start_;
  }
  // A page stops at the end of the head when bytes were dropped after it, so
  // next_offset leads into the gap (and its marker) instead of past it.
  std::uint64_t end = std::min<std::uint64_t>(total_, offset + budget / 2 + 4);
  if (offset < head_.size() && dropped() > 0) end = std::min<std::uint64_t>(end, head_.size());
  std::string chunk = bytes_between(offset, std::min<std::uint64_t>(total_, end + 3));
  // Never end inside a UTF-8 sequence unless the stream itself does.
  chunk.resize(end < total_ ? os::utf8_prefix(chunk, end - offset).size() : end - offset);
  std::size_t n = fit_prefix(chunk, budget, max_lines);
  if (n == 0 && !chunk.empty()) n = std::max<std::size_t>(1, os::utf8_prefix(chunk, 4).size());
  chunk.resize(n);
  slice.next_offset = offset + chunk.size();
  slice.data += chunk;
  return slice;
}

OutputBuffer::Inline OutputBuffer::inline_view(std::size_t budget, std::size_t max_lines) const {
  Inline view;
  if (dropped() == 0 && 2 * total_ <= budget) {  // every byte costs at least 2
    std::string all = head_ + tail_;
    if (fit_prefix(all, budget, max_lines) == all.size()) {
      view.text = std::move(all);
      view.cut_from = total_;
      return view;
    }
  }
  view.truncated = true;
  std::string_view head(head_);
  std::size_t front = fit_prefix(head, budget / 2, max_lines / 2);
  // Cut at a line's end when one is near, so the marker is a line of its own.
  std::size_t newline = head.substr(0, front).rfind('\n');
  if (newline != std::string_view::npos && newline + 1 >= front / 2) front = newline + 1;
  std::size_t used = shown_cost(head.substr(0, front));
  std::size_t lines = static_cast<std::size_t>(std::count(head.begin(), head.begin() + static_cast<std::ptrdiff_t>(front), '\n'));
  std::uint64_t from = std::max<std::uint64_t>(front, total_ - std::min<std::uint64_t>(total_, budget));
  if (from >= head_.size() && from < tail_start_) from = tail_start_;
  std::string rest = bytes_between(from, total_);
  std::size_t back = fit_suffix(rest, budget - std::min(budget, used), max_lines - std::min(max_lines, lines));
  std::size_t back_start = rest.size() - back;
  std::size_t line_start = rest.find('\n', back_start);
  if (back_start > 0 && rest[back_start - 1] != '\n' && line_start != std::string::npos &&
      line_start + 1 - back_start <= back / 2)
    back_start = line_start + 1;
  std::uint64_t cut = total_ - front - (rest.size() - back_start);
  view.cut_from = front;
  view.text = std::string(head.substr(0, front));
  if (!view.text.empty() && view.text.back() != '\n') view.text += '\n';
  view.text += "[... " + std::to_string(cut) + " bytes not shown here (" + std::to_string(total_) +
               " in all); the last line says how to read them ...]\n" + rest.substr(back_start);
  return view;
}
std::pair<std::size_t, std::size_t> split_budget(std::uint64_t out, std::uint64_t err, std::size_t budget) {
  if (out + err <= budget) return {static_cast<std::size_t>(out), static_cast<std::size_t>(err)};
  std::size_t err_part = static_cast<std::size_t>(std::min<std::uint64_t>(err, std::max<std::uint64_t>(budget / 4, budget > out ? budget - out : 0)));
  return {budget - err_part, err_part};
}

}  // namespace agentbox::agent
