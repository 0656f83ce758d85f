// The safetensors reader: the length-prefixed JSON header, its validation against the data
// buffer, and loading a few tensors.
#include <span>

#include "formats/safetensors.h"
#include "safetensors_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  partix::fuzz::init_devices(2);
  const std::string path = partix::fuzz::ScratchDir::get().write("input.safetensors", data, size);
  // The header parser reads from memory or from the file; both must reach the same verdict.
  const std::string in_memory = partix::fuzz::error_message(
      [&] { (void)partix::detail::parse_safetensors(std::span<const uint8_t>(data, size), path); });
  partix::Safetensors s;
  const std::string from_file =
      partix::fuzz::error_message([&] { s = partix::Safetensors::open(path); });
  if (in_memory != from_file) {
    partix::fuzz::die("parse_safetensors from memory and from the file disagree:\n  memory: " +
                      (in_memory.empty() ? "ok" : in_memory) +
                      "\n  file: " + (from_file.empty() ? "ok" : from_file));
  }
  if (from_file.empty()) partix::fuzz::exercise_safetensors(s);
  return 0;
}
