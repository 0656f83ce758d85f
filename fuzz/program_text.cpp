// The Program text parser (ir::parse_program). A program that parses must print to text that
// parses again to the same text: the printer and the parser agree on the format.
#include "fuzz_util.h"
#include "ir/program.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Meshes in program text name up to 8 devices by default.
  partix::fuzz::init_devices(8);
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  partix::ir::Program p;
  if (!partix::fuzz::expect_partix_error([&] { p = partix::ir::parse_program(text); })) return 0;
  const std::string printed = partix::ir::to_text(p);
  std::string reprinted;
  const std::string error = partix::fuzz::error_message(
      [&] { reprinted = partix::ir::to_text(partix::ir::parse_program(printed)); });
  if (!error.empty()) {
    partix::fuzz::die("a parsed program prints to text that does not parse: " + error +
                      "\n--- printed:\n" + printed);
  }
  if (reprinted != printed) {
    partix::fuzz::die("printing a reparsed program changed its text:\n--- first:\n" + printed +
                      "--- second:\n" + reprinted);
  }
  return 0;
}
