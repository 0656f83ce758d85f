// partix_gguf_mutate SRC DST [--layers N] [--set-u32 KEY=V] [--set-f32 KEY=V]
//                            [--fill-f32 TENSOR=V]...
// Writes a modified copy of a GGUF file for the command-line tests (tests/cli/*.cmake).
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "io/gguf_mutator.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: partix_gguf_mutate SRC DST [--layers N] [--set-u32 K=V] "
                 "[--set-f32 K=V] [--fill-f32 TENSOR=V]...\n";
    return 2;
  }
  try {
    partix::test::GgufMutator m(argv[1]);
    for (int i = 3; i + 1 < argc; i += 2) {
      const std::string op = argv[i], arg = argv[i + 1];
      const size_t eq = arg.find('=');
      const std::string key = arg.substr(0, eq),
                        value = eq == std::string::npos ? "" : arg.substr(eq + 1);
      if (op == "--layers") {
        m.keep_layers(std::stoi(arg));
      } else if (op == "--set-u32") {
        m.set_u32(key, static_cast<uint32_t>(std::stoul(value)));
      } else if (op == "--set-f32") {
        m.set_f32(key, std::strtof(value.c_str(), nullptr));
      } else if (op == "--fill-f32") {
        m.fill_f32(key, std::strtof(value.c_str(), nullptr));
      } else {
        std::cerr << "unknown operation " << op << "\n";
        return 2;
      }
    }
    m.write(argv[2]);
  } catch (const std::exception& e) {
    std::cerr << "partix_gguf_mutate: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
