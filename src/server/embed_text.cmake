# Build step: writes OUT, a C++ source whose function NAME() returns the bytes of IN (a text file) as a
# std::string_view, so that the binary serves the file with nothing to install beside it.
# Usage: cmake -DIN=page.html -DOUT=page_html.cpp -DNAME=mtp::server::chat_page -P embed_text.cmake
file(READ "${IN}" text)
set(delimiter "mtp_embedded")
string(FIND "${text}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter ')${delimiter}\"'")
endif()
string(REGEX REPLACE "::[^:]+$" "" namespace "${NAME}")
string(REGEX REPLACE "^.*::" "" function "${NAME}")
file(WRITE "${OUT}.tmp"
  "// Generated from ${IN} by embed_text.cmake; edit that file instead.\n"
  "#include <string_view>\n\n"
  "namespace ${namespace} {\n\n"
  "std::string_view ${function}() {\n"
  "  static constexpr char kText[] = R\"${delimiter}(${text})${delimiter}\";\n"
  "  return {kText, sizeof kText - 1};\n"
  "}\n\n"
  "}  // namespace ${namespace}\n")
file(RENAME "${OUT}.tmp" "${OUT}")
