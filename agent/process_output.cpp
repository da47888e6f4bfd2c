// process_output and the records of exec output (processes.h).
#include "agent/processes.h"

#include "agent/line_pattern.h"
#include "agent/process_record.h"

#include <algorithm>
#include <chrono>
#include <csignal>

namespace agentbox::agent {

json ProcessTable::output(AgentRequest& request) {
  const json& params = request.params();
  auto record = find(params);
  std::uint64_t offset = static_cast<std::uint64_t>(std::max<std::int64_t>(0, param_int(params, "offset", 0)));
  std::uint64_t err_offset =
      static_cast<std::uint64_t>(std::max<std::int64_t>(0, param_int(params, "stderr_offset", 0)));
  auto wait = std::chrono::milliseconds(std::clamp<std::int64_t>(param_int(params, "wait_ms", 0), 0, 300'000));
  std::string pattern_text = param_string(params, "pattern", "");
  std::optional<LinePattern> pattern;
  if (!pattern_text.empty()) pattern.emplace(pattern_text);
  // Each stream is matched line by line as it grows, each byte once.
  std::optional<LineScanner> out_scan, err_scan;
  if (pattern) {
    out_scan.emplace(*pattern, offset);
    err_scan.emplace(*pattern, err_offset);
  }
  std::size_t budget = config_.inline_output_chars;
  request.on_cancel([record, this] {
    std::lock_guard inner(mutex_);
    record->changed.notify_all();
  });
  std::unique_lock lock(mutex_);
  bool matched = false;
  auto done = [&] {
    bool finished = record->status != "running" && record->open_streams == 0;
    if (pattern) {
      matched = out_scan->scan(record->out) || err_scan->scan(record->err);
      return matched || finished || request.cancelled();
    }
    return record->out.total() > offset || record->err.total() > err_offset || finished || request.cancelled();
  };
  if (wait.count() > 0) record->changed.wait_for(lock, wait, done);
  else done();
  // Budgets are shown_cost (text and structuredContent together); each
  // stream keeps some, so a flood on one does not starve the other.
  auto [out_budget, err_budget] = split_budget(cost_bound(record->out.total() - std::min(offset, record->out.total())),
                                               cost_bound(record->err.total() - std::min(err_offset, record->err.total())), budget);
  auto out = record->out.read(offset, std::max<std::size_t>(out_budget, 1024), kMaxShownLines - kMaxShownLines / 4);
  auto err = record->err.read(err_offset, std::max<std::size_t>(err_budget, 1024), kMaxShownLines / 4);
  json result = describe(*record);
  result.erase("command");
  result["stdout"] = out.data;
  result["stderr"] = err.data;
  result["next_offset"] = out.next_offset;
  result["stderr_next_offset"] = err.next_offset;
  result["stdout_bytes"] = record->out.total();
  result["stderr_bytes"] = record->err.total();
  result["complete"] = record->status != "running" && record->open_streams == 0 &&
                       out.next_offset == record->out.total() && err.next_offset == record->err.total();
  if (pattern) result["matched"] = matched;
  // For the server only (it removes them): the span its proxy's denials count in.
  if (record->started_unix_ms) result["started_unix_ms"] = record->started_unix_ms;
  if (record->ended_unix_ms) result["ended_unix_ms"] = record->ended_unix_ms;
  return result;
}

std::string ProcessTable::reserve_exec_id() {
  std::lock_guard lock(mutex_);
  return "exec-" + std::to_string(next_id_++);
}

void ProcessTable::add_exec_output(const std::string& id, const std::string& command, OutputBuffer out,
                                   OutputBuffer err, int exit_code) {
  auto record = std::make_shared<Record>(0, 0);
  record->out = std::move(out);
  record->err = std::move(err);
  record->command = command;
  record->background = false;
  record->status = "exited";
  record->exit_code = exit_code;
  record->id = id;
  std::lock_guard lock(mutex_);
  records_[record->id] = record;
  exec_ids_.push_back(record->id);
  if (exec_ids_.size() > kMaxExecOutputs) {
    records_.erase(exec_ids_.front());
    exec_ids_.pop_front();
  }
}

ProcessTable::ExecFeed ProcessTable::add_running_exec(const std::string& id, const std::string& command, pid_t pid,
                                                      OutputBuffer out, OutputBuffer err, std::int64_t started_unix_ms,
                                                      std::function<void()> cancel) {
  auto record = std::make_shared<Record>(0, 0);
  record->out = std::move(out);
  record->err = std::move(err);
  record->id = id;
  record->command = command;
  record->pid = pid;
  record->started_unix_ms = started_unix_ms;
  record->cancel = std::move(cancel);
  std::lock_guard lock(mutex_);
  records_[id] = record;
  ExecFeed feed;
  feed.table_ = this;
  feed.record_ = std::move(record);
  return feed;
}

void ProcessTable::ExecFeed::append(bool is_err, std::string_view data) {
  std::lock_guard lock(table_->mutex_);
  (is_err ? record_->err : record_->out).append(data);
  record_->changed.notify_all();
}

void ProcessTable::ExecFeed::ended(int exit_code, const std::string& signal, bool killed) {
  std::lock_guard lock(table_->mutex_);
  record_->exit_code = exit_code;
  record_->signal = signal;
  record_->status = "exited";
  if (killed && record_->kill_requested) {  // by process_kill: as for any process it kills
    record_->status = "killed";
    record_->exit_code = 128 + SIGKILL;
    record_->signal = "SIGKILL";
  }
  record_->ended_unix_ms = unix_ms();
  record_->cancel = nullptr;
  record_->changed.notify_all();
}

}  // namespace agentbox::agent
