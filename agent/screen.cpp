#include "agent/screen.h"

#include <vterm.h>

#include <stdexcept>

namespace agentbox::agent {

namespace {

void append_utf8(std::string& out, std::uint32_t c) {
  if (c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) c = 0xFFFD;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

}  // namespace

Screen::Screen(int rows, int cols, Respond respond) : respond_(std::move(respond)), rows_(rows), cols_(cols) {
  vt_ = vterm_new(rows, cols);
  if (!vt_) throw std::runtime_error("cannot make a terminal screen");
  vterm_set_utf8(vt_, 1);
  vterm_output_set_callback(vt_, &Screen::on_output, this);
  screen_ = vterm_obtain_screen(vt_);
  // Full-screen programs (vim, less, top) draw on the alternate screen;
  // what is shown is whichever screen is in use.
  vterm_screen_enable_altscreen(screen_, 1);
  vterm_screen_reset(screen_, 1);
}

Screen::~Screen() { vterm_free(vt_); }

void Screen::on_output(const char* s, std::size_t len, void* self) {
  auto* screen = static_cast<Screen*>(self);
  if (screen->respond_) screen->respond_(std::string_view(s, len));
}

void Screen::feed(std::string_view bytes) {
  vterm_input_write(vt_, bytes.data(), bytes.size());
  vterm_screen_flush_damage(screen_);
}

void Screen::resize(int rows, int cols) {
  rows_ = rows;
  cols_ = cols;
  vterm_set_size(vt_, rows, cols);
  vterm_screen_flush_damage(screen_);
}

std::string Screen::text() const {
  std::string out;
  std::size_t kept = 0;  // out's length up to the last row with text
  for (int row = 0; row < rows_; ++row) {
    if (row > 0) out += '\n';
    std::size_t line_start = out.size(), line_end = out.size();
    for (int col = 0; col < cols_; ++col) {
      VTermScreenCell cell{};
      if (!vterm_screen_get_cell(screen_, VTermPos{row, col}, &cell)) continue;
      if (cell.chars[0] == 0xFFFFFFFF) continue;  // the right half of a wide character
      if (cell.chars[0] == 0) {
        out += ' ';
        continue;
      }
      for (int i = 0; i < VTERM_MAX_CHARS_PER_CELL && cell.chars[i]; ++i) append_utf8(out, cell.chars[i]);
      line_end = out.size();
      if (cell.width > 1) col += cell.width - 1;
    }
    while (line_end > line_start && out[line_end - 1] == ' ') --line_end;  // a person sees no trailing blanks
    out.resize(line_end);
    if (line_end > line_start) kept = out.size();
  }
  out.resize(kept);
  return out;
}

int Screen::cursor_row() const {
  VTermPos pos{};
  vterm_state_get_cursorpos(vterm_obtain_state(vt_), &pos);
  return pos.row;
}

int Screen::cursor_col() const {
  VTermPos pos{};
  vterm_state_get_cursorpos(vterm_obtain_state(vt_), &pos);
  return pos.col;
}

}  // namespace agentbox::agent
