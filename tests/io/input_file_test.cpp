// Every reader opens files through one helper: a FIFO, a directory or a device where a file
// is expected is an error (never a blocked open()), and a file truncated while it is being
// loaded is an error naming the file (never a SIGBUS).
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "data/data_loader.h"
#include "io/gguf_mutator.h"
#include "io/io_test_util.h"
#include "partix/models/gpt2.h"
#include "partix/models/llama.h"
#include "test_util.h"

using namespace partix;

namespace {

// A blocked open() would hang the test: fail loudly instead, well before ctest's timeout.
class Watchdog {
 public:
  explicit Watchdog(unsigned seconds) { ::alarm(seconds); }
  ~Watchdog() { ::alarm(0); }
};

void load_llama(const std::string& path) {
  Mesh mesh({1}, {"model"});
  models::llama::load(path, mesh, models::llama::sharding_rules());
}

void load_gpt2(const std::string& dir) {
  Mesh mesh({1, 1}, {"data", "model"});
  models::gpt2::load_hf(dir, mesh, models::gpt2::sharding_rules(false));
}

}  // namespace

TEST(InputFile, FifoWhereAFileIsExpectedIsRefusedWithoutBlocking) {
  Watchdog dog(60);
  test::TempDir dir;
  const std::string fifo = dir.file("model.gguf");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_PARTIX_ERROR(GgufFile::open(fifo), "[gguf]", fifo, "is not a regular file (a FIFO)");
  EXPECT_PARTIX_ERROR(Safetensors::open(fifo), "[safetensors]", "(a FIFO)");
  EXPECT_PARTIX_ERROR(Tokenizer::from_json_file(fifo), "[Tokenizer]", "(a FIFO)");
  EXPECT_PARTIX_ERROR(load_llama(fifo), "[gguf]", "(a FIFO)");
  EXPECT_PARTIX_ERROR(io::load_corpus({fifo}), "[load_corpus]", "(a FIFO)");
  // config.json as a FIFO, for both model families.
  const std::string hf = dir.file("hf");
  std::filesystem::create_directories(hf);
  ASSERT_EQ(::mkfifo((hf + "/config.json").c_str(), 0600), 0);
  EXPECT_PARTIX_ERROR(load_llama(hf), "[llama.load]", "config.json", "(a FIFO)");
  EXPECT_PARTIX_ERROR(load_gpt2(hf), "[gpt2.load_hf]", "config.json", "(a FIFO)");
  // model.safetensors as a FIFO beside a valid index-less folder.
  const std::string st = dir.file("st");
  std::filesystem::create_directories(st);
  ASSERT_EQ(::mkfifo((st + "/model.safetensors").c_str(), 0600), 0);
  EXPECT_PARTIX_ERROR(Safetensors::open(st), "(a FIFO)");
}

TEST(InputFile, DirectoriesAndDevicesAreNotFiles) {
  test::TempDir dir;
  const std::string d = dir.file("sub.gguf");
  std::filesystem::create_directories(d);
  EXPECT_PARTIX_ERROR(GgufFile::open(d), "[gguf]", "is not a regular file (a directory)");
  EXPECT_PARTIX_ERROR(GgufFile::open("/dev/zero"), "(a character device)");
  EXPECT_PARTIX_ERROR(Safetensors::open("/dev/zero"), "(a character device)");
  EXPECT_PARTIX_ERROR(Tokenizer::from_json_file("/dev/null"), "(a character device)");
  EXPECT_PARTIX_ERROR(io::load_corpus({"/dev/zero"}), "(a character device)");
  EXPECT_PARTIX_ERROR(GgufFile::open(dir.file("missing.gguf")), "cannot open",
                      "No such file or directory");
}

TEST(InputFile, GgufTruncatedAfterOpenIsAnErrorNotSigbus) {
  PARTIX_REQUIRE_SMOLLM2(real);
  test::TempDir dir;
  const std::string p = dir.file("m.gguf");
  test::GgufMutator(real).keep_layers(1).write(p);
  GgufFile f = GgufFile::open(p);
  Array before = f.load("blk.0.attn_norm.weight");
  // Another process shrinks the file while it is open: the header is already read. The last
  // tensor (output_norm) is cut; the layer's tensors before it are intact.
  const auto size = static_cast<off_t>(std::filesystem::file_size(p));
  ASSERT_EQ(::truncate(p.c_str(), size - 1024), 0);
  EXPECT_PARTIX_ERROR(f.load("output_norm.weight"), "[gguf]", p, "changed while being read",
                      "was " + std::to_string(size), "is now " + std::to_string(size - 1024));
  // A tensor still inside the file loads as before.
  EXPECT_EQ(f.load("blk.0.attn_norm.weight").to_vector<float>(), before.to_vector<float>());
  ASSERT_EQ(::truncate(p.c_str(), 0), 0);
  EXPECT_PARTIX_ERROR(f.load("token_embd.weight"), "changed while being read", "is now 0");
}

TEST(InputFile, SafetensorsTruncatedAfterOpenIsAnErrorNotSigbus) {
  test::TempDir dir;
  const std::string p = dir.file("m.safetensors");
  std::vector<float> big(1 << 16, 1.5f);
  save_safetensors(p, {{"a", from_vector(big, {256, 256})}, {"b", from_vector(big, {1 << 16})}});
  Safetensors st = Safetensors::open(p);
  ASSERT_EQ(::truncate(p.c_str(), 1024), 0);
  EXPECT_PARTIX_ERROR(st.load("b"), "[safetensors]", p, "changed while being read", "is now 1024");
  Mesh mesh({2}, {"x"});
  EXPECT_PARTIX_ERROR(st.load("a", NamedSharding(mesh, P("x"))), "changed while being read");
}
