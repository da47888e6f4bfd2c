// A terminal's screen (agent side, docs/terminals.md): libvterm interprets
// the program's output, escape sequences and all, and the screen is read
// back as text rows, what a person would see. It runs inside the box, so
// the host never parses a terminal stream the box wrote; what leaves is
// text. Replies the terminal owes the program (a cursor position report, a
// device attributes answer) go to `respond`. Not thread-safe: the owner locks.
#pragma once

#include <functional>
#include <string>
#include <string_view>

struct VTerm;
struct VTermScreen;

namespace agentbox::agent {

class Screen {
 public:
  using Respond = std::function<void(std::string_view)>;
  Screen(int rows, int cols, Respond respond);
  ~Screen();
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  void feed(std::string_view bytes);
  void resize(int rows, int cols);
  // The rows as UTF-8 text, trailing blanks dropped, joined by '\n' (no
  // final newline); trailing blank rows dropped too.
  std::string text() const;
  int rows() const { return rows_; }
  int cols() const { return cols_; }
  int cursor_row() const;  // 0-based
  int cursor_col() const;

 private:
  static void on_output(const char* s, std::size_t len, void* self);

  VTerm* vt_ = nullptr;
  VTermScreen* screen_ = nullptr;
  Respond respond_;
  int rows_;
  int cols_;
};

}  // namespace agentbox::agent
