// Tokenizers: the GPT-2 pre-tokenizer and BPE against Hugging Face (tokenizers + the
// SmolLM2 GGUF vocabulary, tools/golden/gguf_smollm2.py), synthetic tokenizer.json files
// for every option and error, the byte tokenizer, and round trips of arbitrary bytes.
#include <algorithm>
#include <random>
#include <set>

#include "io/io_test_util.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace partix {
namespace {

using nlohmann::json;
using test::GgufBuilder;
using test::TempDir;

std::vector<std::string> pieces(const std::vector<std::string_view>& v) {
  return std::vector<std::string>(v.begin(), v.end());
}

TEST(Pretokenize, Gpt2PatternSemantics) {
  using detail::split_gpt2;
  using V = std::vector<std::string>;
  // A whitespace run gives its last space to the word after it.
  EXPECT_EQ(pieces(split_gpt2("a   b")), (V{"a", "  ", " b"}));
  EXPECT_EQ(pieces(split_gpt2("ab  ")), (V{"ab", "  "}));
  EXPECT_EQ(pieces(split_gpt2("x\n\ny")), (V{"x", "\n", "\n", "y"}));
  EXPECT_EQ(pieces(split_gpt2("x \ny")), (V{"x", " ", "\n", "y"}));
  // Contractions are lower-case only; other apostrophes are punctuation.
  EXPECT_EQ(pieces(split_gpt2("it's I'LL 'tis")), (V{"it", "'s", " I", "'", "LL", " '", "tis"}));
  EXPECT_EQ(pieces(split_gpt2("we'll they've")), (V{"we", "'ll", " they", "'ve"}));
  EXPECT_EQ(pieces(split_gpt2("x = 42;")), (V{"x", " =", " 42", ";"}));
  EXPECT_EQ(pieces(split_gpt2("naïve café")), (V{"na\xc3\xafve", " caf\xc3\xa9"}));
  EXPECT_EQ(pieces(split_gpt2("")), V{});
  // Invalid UTF-8 bytes are symbols; nothing is lost.
  EXPECT_EQ(pieces(split_gpt2("a\xff\xfe b")), (V{"a", "\xff\xfe", " b"}));
  EXPECT_EQ(pieces(detail::split_digits("ab12 3x")), (V{"ab", "1", "2", " ", "3", "x"}));
}

TEST(Pretokenize, ByteMappingIsABijection) {
  std::set<int32_t> seen;
  for (int b = 0; b < 256; ++b) {
    int32_t cp = detail::byte_to_unicode()[static_cast<size_t>(b)];
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(detail::byte_from_unicode(cp), b);
  }
  EXPECT_EQ(detail::byte_to_unicode()[' '], 0x120);  // 'Ġ'
  EXPECT_EQ(detail::byte_to_unicode()['A'], 'A');
  EXPECT_EQ(detail::byte_from_unicode(0x4E00), -1);
}

TEST(Pretokenize, UnicodeClasses) {
  EXPECT_TRUE(detail::is_letter(0x00E9));   // é
  EXPECT_TRUE(detail::is_letter(0x4E16));   // 世
  EXPECT_FALSE(detail::is_letter(0x0661));  // Arabic-Indic one
  EXPECT_TRUE(detail::is_number(0x0661));
  EXPECT_TRUE(detail::is_number(0x2163));  // Ⅳ (Nl)
  EXPECT_TRUE(detail::is_number(0x00BD));  // ½ (No)
  EXPECT_TRUE(detail::is_whitespace(0x3000));
  EXPECT_FALSE(detail::is_whitespace(0x200B));  // zero width space is not White_Space
  // Overlong encodings and surrogates are not decoded as characters.
  EXPECT_EQ(detail::decode_utf8("\xc0\xaf", 0).cp, -1);
  EXPECT_EQ(detail::decode_utf8("\xed\xa0\x80", 0).cp, -1);
  EXPECT_EQ(detail::decode_utf8("\xf0\x9f\x99\x82", 0).cp, 0x1F642);
}

TEST(ByteTokenizer, IdsAreBytes) {
  Tokenizer t = Tokenizer::bytes();
  EXPECT_EQ(t.vocab_size(), 256);
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::vector<int32_t> ids = t.encode(all);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[static_cast<size_t>(b)], b);
  EXPECT_EQ(t.decode(ids), all);
  EXPECT_EQ(t.encode("<|im_end|>").size(), 10u);  // no special tokens
  EXPECT_PARTIX_ERROR(t.decode({256}), "[Tokenizer.decode]", "256");
  EXPECT_FALSE(t.eos_id().has_value());
}

// ---------------------------------------------------------------------------------------
// Synthetic tokenizer.json: bytes 0..255 as ids 0..255, then merged tokens.

std::string spell(std::string_view bytes) {
  std::string s;
  for (unsigned char c : bytes) detail::append_utf8(s, detail::byte_to_unicode()[c]);
  return s;
}

json tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[spell(std::string(1, static_cast<char>(b)))] = b;
  json m = json::array();
  int id = 256;
  for (const auto& [l, r] : merges) {
    if (!vocab.contains(spell(l + r))) vocab[spell(l + r)] = id++;
    m.push_back(spell(l) + " " + spell(r));
  }
  return json{
      {"version", "1.0"},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", json::array()},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"dropout", nullptr}}},
  };
}

std::vector<std::string> spelled_tokens(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(t.id_to_token(id));
  return out;
}

TEST(BpeTokenizer, MergesApplyByRankLeftmostFirst) {
  using V = std::vector<std::string>;
  {
    Tokenizer t = Tokenizer::from_json(tiny_tokenizer({{"b", "c"}, {"a", "b"}}).dump());
    EXPECT_EQ(spelled_tokens(t, t.encode("abc")), (V{"a", "bc"}));  // rank 0 wins
  }
  {
    Tokenizer t = Tokenizer::from_json(tiny_tokenizer({{"a", "b"}, {"b", "c"}}).dump());
    EXPECT_EQ(spelled_tokens(t, t.encode("abc")), (V{"ab", "c"}));
  }
  {
    Tokenizer t = Tokenizer::from_json(tiny_tokenizer({{"a", "a"}, {"aa", "aa"}}).dump());
    EXPECT_EQ(spelled_tokens(t, t.encode("aaa")), (V{"aa", "a"}));  // leftmost of equals
    EXPECT_EQ(spelled_tokens(t, t.encode("aaaaa")), (V{"aaaa", "a"}));
    // Merges never cross pre-tokenizer pieces: " a" is its own word.
    EXPECT_EQ(spelled_tokens(t, t.encode("aa aa")), (V{"aa", spell(" "), "aa"}));
  }
  {
    Tokenizer t = Tokenizer::from_json(tiny_tokenizer({{" ", "a"}, {"a", "a"}}).dump());
    EXPECT_EQ(spelled_tokens(t, t.encode("aa aa")), (V{"aa", spell(" a"), "a"}));
    EXPECT_EQ(t.decode(t.encode("aa aa")), "aa aa");
  }
}

TEST(BpeTokenizer, AddedTokensAreMatchedWholeBeforeBpe) {
  json j = tiny_tokenizer({{"<", "|"}});
  j["added_tokens"] = json::array({
      {{"id", 300}, {"content", "<|end|>"}, {"special", true}},
      {{"id", 301}, {"content", "<|end|>x"}, {"special", true}},  // longest match wins
      {{"id", 302}, {"content", "<tool>"}, {"special", false}, {"lstrip", true}, {"rstrip", true}},
  });
  Tokenizer t = Tokenizer::from_json(j.dump());
  std::vector<int32_t> ids = t.encode("a<|end|>b<|end|>x");
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', 300, 'b', 301}));
  EXPECT_TRUE(t.is_special(300));
  EXPECT_FALSE(t.is_special(302));
  EXPECT_EQ(t.decode(ids), "a<|end|>b<|end|>x");
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), "ab");
  // lstrip/rstrip: the token absorbs the spaces around it.
  EXPECT_EQ(t.encode("a  <tool> b"), (std::vector<int32_t>{'a', 302, 'b'}));
  // parse_special = false: special tokens are text, ordinary added tokens still match.
  std::vector<int32_t> plain = t.encode("<|end|><tool>", false);
  EXPECT_EQ(plain.back(), 302);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 300), 0);
  EXPECT_EQ(t.decode(plain), "<|end|><tool>");
  EXPECT_EQ(t.token_to_id("<|end|>"), 300);
  EXPECT_FALSE(t.token_to_id("nope").has_value());
}

TEST(BpeTokenizer, DigitsAndPrefixSpaceOptions) {
  json j = tiny_tokenizer({{"1", "2"}, {"12", "3"}});
  Tokenizer plain = Tokenizer::from_json(j.dump());
  EXPECT_EQ(plain.encode("123").size(), 1u);
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Digits"}, {"individual_digits", true}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}};
  Tokenizer digits = Tokenizer::from_json(j.dump());
  EXPECT_EQ(digits.encode("123"), (std::vector<int32_t>{'1', '2', '3'}));
  j["pre_tokenizer"]["pretokenizers"][0]["individual_digits"] = false;
  EXPECT_EQ(Tokenizer::from_json(j.dump()).encode("123 4").size(), 3u);  // "123", " ", "4"
  j = tiny_tokenizer({});
  j["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_EQ(Tokenizer::from_json(j.dump()).encode("a"), (std::vector<int32_t>{' ', 'a'}));
}

TEST(BpeTokenizer, ReadsTokenizerConfigBesideTheFile) {
  TempDir dir;
  json j = tiny_tokenizer({});
  j["added_tokens"] = json::array({{{"id", 256}, {"content", "<|im_start|>"}, {"special", true}},
                                   {{"id", 257}, {"content", "<|im_end|>"}, {"special", true}}});
  test::write_bytes(dir.file("tokenizer.json"), j.dump());
  test::write_bytes(
      dir.file("tokenizer_config.json"),
      json{{"bos_token", "<|im_start|>"},
           {"eos_token", {{"content", "<|im_end|>"}}},
           {"chat_template", "{{ '<|im_start|>system\\nBe brief.<|im_end|>\\n' }}..."}}
          .dump());
  Tokenizer t = Tokenizer::from_json_file(dir.file("tokenizer.json"));
  EXPECT_EQ(t.bos_id(), 256);
  EXPECT_EQ(t.eos_id(), 257);
  EXPECT_EQ(t.default_system_prompt(), "Be brief.");
  EXPECT_EQ(t.apply_chat_template({{"user", "hi"}}),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(t.apply_chat_template({{"system", "S"}, {"user", "hi"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
  test::write_bytes(dir.file("tokenizer_config.json"), R"({"eos_token": "<nope>"})");
  EXPECT_PARTIX_ERROR(Tokenizer::from_json_file(dir.file("tokenizer.json")), "eos_token", "<nope>");
  test::write_bytes(dir.file("tokenizer_config.json"),
                    R"({"chat_template": "{{ bos_token }}[INST] {{ m }} [/INST]"})");
  EXPECT_PARTIX_ERROR(Tokenizer::from_json_file(dir.file("tokenizer.json")).apply_chat_template({}),
                      "[Tokenizer.apply_chat_template]", "not ChatML");
  EXPECT_PARTIX_ERROR(Tokenizer::bytes().apply_chat_template({{"user", "x"}}), "<|im_start|>");
}

TEST(BpeTokenizer, RejectsWhatItCannotReproduce) {
  auto expect_bad = [](const json& j, const std::string& fragment) {
    SCOPED_TRACE(fragment);
    EXPECT_PARTIX_ERROR(Tokenizer::from_json(j.dump(), "tok.json"), "[Tokenizer]", "tok.json",
                        fragment);
  };
  json j = tiny_tokenizer({{"a", "b"}});
  expect_bad(json::array(), "not a JSON object");
  expect_bad(json::object(), "no 'model'");
  json k = j;
  k["model"]["type"] = "WordPiece";
  expect_bad(k, "model type \"WordPiece\"");
  k = j;
  k["model"]["byte_fallback"] = true;
  expect_bad(k, "'byte_fallback'");
  k = j;
  k["model"]["dropout"] = 0.1;
  expect_bad(k, "'dropout'");
  k = j;
  k["normalizer"] = {{"type", "NFC"}};
  expect_bad(k, "normalizer NFC");
  k = j;
  k["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_bad(k, "pre_tokenizer Metaspace");
  k = j;
  k["pre_tokenizer"] = nullptr;
  expect_bad(k, "pre_tokenizer is null");
  k = j;
  k["decoder"] = {{"type", "WordPiece"}};
  expect_bad(k, "decoder");
  k = j;
  k["model"]["merges"].push_back("a");
  expect_bad(k, "merge #1 'a'");
  k = j;
  k["model"]["merges"].push_back(spell("x") + " " + spell("y"));
  expect_bad(k, "makes 'xy', which is not in the vocabulary");
  k = j;
  k["model"]["merges"].push_back("Q" + std::string("\xe4\xb8\x96") + " a");
  expect_bad(k, "not in the vocabulary");
  k = j;
  k["model"]["vocab"]["dup"] = 5;
  expect_bad(k, "id 5 belongs to two tokens");
  k = j;
  k["model"]["vocab"]["huge"] = int64_t{1} << 40;
  expect_bad(k, "not an integer in [0,");
  k = j;
  k["model"]["vocab"]["neg"] = -1;
  expect_bad(k, "not an integer");
  k = j;
  k["added_tokens"] = json::array({{{"id", 65}, {"content", "<x>"}}});
  expect_bad(k, "added token '<x>' has id 65, which the vocabulary gives to 'A'");
  k = j;
  k["added_tokens"] = json::array({{{"id", 999}, {"content", "<x>"}, {"single_word", true}}});
  expect_bad(k, "single_word");
  EXPECT_PARTIX_ERROR(Tokenizer::from_json("{\"model\": ", "tok.json"), "invalid JSON");
  EXPECT_PARTIX_ERROR(
      Tokenizer::from_json(std::string(500, '[') + std::string(500, ']'), "tok.json"), "nested");
  EXPECT_PARTIX_ERROR(Tokenizer::from_json_file("/nonexistent/tokenizer.json"), "cannot open");
  EXPECT_PARTIX_ERROR(Tokenizer{}.encode("x"), "empty Tokenizer");
}

// normalizer, decoder and named chat templates whose fields have another JSON type once
// escaped as nlohmann::json::type_error (json::value on a non-object or a non-string field).
TEST(BpeTokenizer, FieldsOfAnotherJsonTypeAreErrors) {
  json j = tiny_tokenizer({{"a", "b"}});
  json k = j;
  k["normalizer"] = 5;
  EXPECT_PARTIX_ERROR(Tokenizer::from_json(k.dump(), "tok.json"), "[Tokenizer]", "normalizer 5");
  k = j;
  k["normalizer"] = {{"type", 5}};
  EXPECT_PARTIX_ERROR(Tokenizer::from_json(k.dump(), "tok.json"), "normalizer {\"type\":5}");
  k = j;
  k["decoder"] = {{"type", 5}};
  EXPECT_PARTIX_ERROR(Tokenizer::from_json(k.dump(), "tok.json"), "decoder {\"type\":5}");
  k = j;
  k["decoder"] = "ByteLevel";
  EXPECT_PARTIX_ERROR(Tokenizer::from_json(k.dump(), "tok.json"), "decoder \"ByteLevel\"");
  TempDir dir;
  test::write_bytes(dir.file("tokenizer.json"), j.dump());
  test::write_bytes(dir.file("tokenizer_config.json"),
                    R"({"chat_template": [{"name": 1, "template": "x"}, 7,
                                          {"name": "default", "template": "<|im_start|>"}]})");
  EXPECT_EQ(Tokenizer::from_json_file(dir.file("tokenizer.json")).vocab_size(), 257);
}

TEST(BpeTokenizer, GgufLoaderValidatesMetadata) {
  TempDir dir;
  auto gguf_with = [&](const std::string& model, const std::string& pre, bool types_mismatch,
                       const std::string& merge) {
    GgufBuilder b;
    b.kv_str("tokenizer.ggml.model", model).kv_str("tokenizer.ggml.pre", pre);
    std::string toks, types, merges;
    GgufBuilder::put<uint32_t>(toks, 8);
    GgufBuilder::put<uint64_t>(toks, 256 + 1);
    for (int c = 0; c < 256; ++c)
      GgufBuilder::put_str(toks, spell(std::string(1, static_cast<char>(c))));
    GgufBuilder::put_str(toks, "ab");
    b.kv("tokenizer.ggml.tokens", 9, toks);
    GgufBuilder::put<uint32_t>(types, 5);
    GgufBuilder::put<uint64_t>(types, types_mismatch ? 3 : 257);
    for (int c = 0; c < (types_mismatch ? 3 : 257); ++c) GgufBuilder::put<int32_t>(types, 1);
    b.kv("tokenizer.ggml.token_type", 9, types);
    GgufBuilder::put<uint32_t>(merges, 8);
    GgufBuilder::put<uint64_t>(merges, 1);
    GgufBuilder::put_str(merges, merge);
    b.kv("tokenizer.ggml.merges", 9, merges);
    test::write_bytes(dir.file("t.gguf"), b.build());
    return GgufFile::open(dir.file("t.gguf"));
  };
  Tokenizer ok = Tokenizer::from_gguf(gguf_with("gpt2", "gpt2", false, "a b"));
  EXPECT_EQ(ok.encode("abc"), (std::vector<int32_t>{256, 'c'}));
  EXPECT_PARTIX_ERROR(Tokenizer::from_gguf(gguf_with("llama", "gpt2", false, "a b")), "[Tokenizer]",
                      "t.gguf", "tokenizer model 'llama'");
  EXPECT_PARTIX_ERROR(Tokenizer::from_gguf(gguf_with("gpt2", "llama-bpe", false, "a b")),
                      "pre-tokenizer 'llama-bpe'");
  EXPECT_PARTIX_ERROR(Tokenizer::from_gguf(gguf_with("gpt2", "gpt2", true, "a b")),
                      "3 entries for 257 tokens");
  EXPECT_PARTIX_ERROR(Tokenizer::from_gguf(gguf_with("gpt2", "gpt2", false, "ab")),
                      "merge #0 'ab'");
  EXPECT_PARTIX_ERROR(Tokenizer::from_gguf(gguf_with("gpt2", "gpt2", false, "b a")), "makes 'ba'");
}

// Arbitrary bytes, valid UTF-8 or not, come back from decode(encode(s)) unchanged.
TEST(BpeTokenizer, RoundTripsArbitraryBytes) {
  Tokenizer t =
      Tokenizer::from_json(tiny_tokenizer({{"a", "b"}, {" ", "ab"}, {"\xc3", "\xa9"}}).dump());
  std::mt19937 rng(3);
  const std::string alphabet = "ab \n\t1'\xc3\xa9\xe4\xb8\x96\xff";
  for (int trial = 0; trial < 500; ++trial) {
    std::string s;
    const size_t n = rng() % 40;
    for (size_t k = 0; k < n; ++k) {
      s += trial % 2 ? static_cast<char>(rng()) : alphabet[rng() % alphabet.size()];
    }
    EXPECT_EQ(t.decode(t.encode(s)), s);
  }
}

// ---------------------------------------------------------------------------------------
// The real SmolLM2 tokenizer from GGUF metadata, against Hugging Face.

class SmolLM2Tokenizer : public testing::Test {
 protected:
  static void SetUpTestSuite() { golden_ = test::read_golden_json("smollm2_gguf.json"); }
  static nlohmann::json golden_;
};
nlohmann::json SmolLM2Tokenizer::golden_;

TEST_F(SmolLM2Tokenizer, PreTokenizerMatchesHuggingFace) {
  // Digits first, then the GPT-2 pattern on each stretch (SmolLM's pipeline).
  for (const json& c : golden_["texts"]) {
    const std::string text = c["text"].get<std::string>();
    SCOPED_TRACE(text);
    std::vector<std::pair<size_t, size_t>> got;
    for (std::string_view piece : detail::split_digits(text)) {
      for (std::string_view w : detail::split_gpt2(piece)) {
        const size_t start = static_cast<size_t>(w.data() - text.data());
        got.emplace_back(start, start + w.size());
      }
    }
    EXPECT_EQ(got, (c["pieces"].get<std::vector<std::pair<size_t, size_t>>>()));
  }
}

TEST_F(SmolLM2Tokenizer, EncodeAndDecodeMatchHuggingFace) {
  PARTIX_REQUIRE_SMOLLM2(path);
  Tokenizer t = Tokenizer::from_gguf(GgufFile::open(path));
  EXPECT_EQ(t.vocab_size(), golden_["tokenizer"]["num_tokens"].get<int64_t>());
  const json& md = golden_["metadata"];
  EXPECT_EQ(t.bos_id(), md["tokenizer.ggml.bos_token_id"].get<int32_t>());
  EXPECT_EQ(t.eos_id(), md["tokenizer.ggml.eos_token_id"].get<int32_t>());
  EXPECT_EQ(t.pad_id(), md["tokenizer.ggml.padding_token_id"].get<int32_t>());
  for (int32_t id : golden_["tokenizer"]["control_ids"].get<std::vector<int32_t>>()) {
    EXPECT_TRUE(t.is_special(id)) << id;
  }
  EXPECT_EQ(t.token_to_id("<|im_end|>"), t.eos_id());
  for (const json& c : golden_["texts"]) {
    const std::string text = c["text"].get<std::string>();
    SCOPED_TRACE(text);
    std::vector<int32_t> ids = t.encode(text);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>());
    EXPECT_EQ(t.decode(ids), c["decoded"].get<std::string>());
    EXPECT_EQ(t.decode(ids), text);
    // Without special-token parsing the markup is ordinary text, and still round-trips.
    std::vector<int32_t> plain = t.encode(text, /*parse_special=*/false);
    for (int32_t id : plain) EXPECT_FALSE(t.is_special(id));
    EXPECT_EQ(t.decode(plain), text);
  }
}

TEST_F(SmolLM2Tokenizer, ChatTemplateMatchesHuggingFace) {
  PARTIX_REQUIRE_SMOLLM2(path);
  GgufFile f = GgufFile::open(path);
  Tokenizer t = Tokenizer::from_gguf(f);
  // The default system prompt comes from the GGUF's own template.
  EXPECT_NE(f.get_string("tokenizer.chat_template").find(t.default_system_prompt()),
            std::string::npos);
  EXPECT_FALSE(t.default_system_prompt().empty());
  for (const json& chat : golden_["chats"]) {
    std::vector<ChatMessage> messages;
    for (const json& m : chat["messages"]) {
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    std::string rendered =
        t.apply_chat_template(messages, chat["add_generation_prompt"].get<bool>());
    EXPECT_EQ(rendered, chat["rendered"].get<std::string>());
    EXPECT_EQ(t.encode(rendered), chat["ids"].get<std::vector<int32_t>>());
  }
}

TEST_F(SmolLM2Tokenizer, RoundTripsArbitraryText) {
  PARTIX_REQUIRE_SMOLLM2(path);
  Tokenizer t = Tokenizer::from_gguf(GgufFile::open(path));
  std::mt19937 rng(5);
  // Valid UTF-8, and cut UTF-8 sequences (whose bytes the vocabulary has).
  const std::vector<std::string> parts = {"the", " ",    "  ",       "\n",  "12",
                                          "é",   "世界", "🙂",     "'s",  "<|im_end|>",
                                          "!!",  "\t",   "\xe4\xb8", "\x9f"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string s;
    for (size_t k = rng() % 12; k > 0; --k) s += parts[rng() % parts.size()];
    EXPECT_EQ(t.decode(t.encode(s)), s);
  }
  // Bytes the vocabulary cannot encode are reported, not dropped or replaced.
  EXPECT_PARTIX_ERROR(t.encode("ok \xff"), "[Tokenizer.encode]", "byte 0xFF", "valid UTF-8");
  EXPECT_PARTIX_ERROR(t.encode("a\x04"
                               "b"),
                      "byte 0x04");
}

}  // namespace
}  // namespace partix
