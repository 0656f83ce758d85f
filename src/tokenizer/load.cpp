// Tokenizer loaders: Hugging Face tokenizer.json (+ tokenizer_config.json beside it) and
// GGUF tokenizer.ggml.* metadata, both turned into a TokenizerSpec and validated by
// TokenizerCore::build.
#include <filesystem>

#include "core/errors.h"
#include "files/input_file.h"
#include "files/json_util.h"
#include "tokenizer/tokenizer.h"

namespace partix {
namespace {

constexpr std::string_view kApi = "Tokenizer";
using nlohmann::json;

// tokenizer.json files are a few MB; anything far larger is not one.
constexpr uint64_t kMaxJsonBytes = 512ull << 20;

std::string read_text_file(const std::string& path) {
  return detail::read_text_file(path, kApi, kMaxJsonBytes);
}

// A field that must be absent, null, false or "" (features partix does not implement).
void require_unset(const json& obj, std::string_view key, std::string_view src,
                   std::string_view where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return;
  if ((it->is_boolean() && !it->get<bool>()) ||
      (it->is_string() && it->get<std::string>().empty())) {
    return;
  }
  detail::fail(kApi, "'{}': {} sets '{}' to {}, which partix does not support", src, where, key,
               it->dump());
}

// obj[key] when obj is an object holding a string there, else fallback (json::value would
// throw nlohmann's type_error for a field of another type, or for obj not an object).
std::string string_field(const json& obj, std::string_view key, std::string_view fallback) {
  if (!obj.is_object()) return std::string(fallback);
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
}

bool get_bool(const json& obj, std::string_view key, bool fallback, std::string_view src) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) detail::fail(kApi, "'{}': '{}' is not a boolean", src, key);
  return it->get<bool>();
}

int32_t get_id(const json& j, std::string_view what, std::string_view src) {
  if (!j.is_number_integer() || j.get<int64_t>() < 0 || j.get<int64_t>() >= detail::kMaxVocab) {
    detail::fail(kApi, "'{}': {} has id {}, not an integer in [0, {})", src, what, j.dump(),
                 detail::kMaxVocab);
  }
  return static_cast<int32_t>(j.get<int64_t>());
}

void parse_pre_tokenizer(const json& pre, detail::TokenizerSpec& spec) {
  const std::string& src = spec.source;
  auto type_of = [&](const json& j) {
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
      detail::fail(kApi, "'{}': a pre_tokenizer entry has no 'type'", src);
    }
    return j["type"].get<std::string>();
  };
  std::vector<json> chain;
  if (pre.is_null()) {
    detail::fail(kApi, "'{}': pre_tokenizer is null; partix needs a ByteLevel pre-tokenizer", src);
  }
  if (type_of(pre) == "Sequence") {
    if (!pre.contains("pretokenizers") || !pre["pretokenizers"].is_array()) {
      detail::fail(kApi, "'{}': Sequence pre_tokenizer without a 'pretokenizers' list", src);
    }
    for (const json& p : pre["pretokenizers"]) chain.push_back(p);
  } else {
    chain.push_back(pre);
  }
  // Supported chains: [Digits]? ByteLevel.
  bool byte_level = false;
  for (size_t k = 0; k < chain.size(); ++k) {
    const std::string t = type_of(chain[k]);
    if (t == "Digits" && k == 0 && chain.size() > 1) {
      spec.split_digits = true;
      spec.individual_digits = get_bool(chain[k], "individual_digits", false, src);
    } else if (t == "ByteLevel" && k + 1 == chain.size()) {
      byte_level = true;
      spec.use_regex = get_bool(chain[k], "use_regex", true, src);
      spec.add_prefix_space = get_bool(chain[k], "add_prefix_space", true, src);
    } else {
      detail::fail(kApi,
                   "'{}': pre_tokenizer {} at position {} is not supported (partix supports "
                   "ByteLevel, optionally after Digits)",
                   src, t, k);
    }
  }
  if (!byte_level) detail::fail(kApi, "'{}': the pre_tokenizer has no ByteLevel step", src);
}

// A token in tokenizer_config.json: "text" or {"content": "text", ...}.
std::optional<std::string> config_token(const json& cfg, std::string_view key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return std::nullopt;
}

// bos/eos/pad/unk and the chat template from a tokenizer_config.json beside tokenizer.json.
void read_tokenizer_config(const std::string& path, detail::TokenizerSpec& spec) {
  std::string text = read_text_file(path);
  json cfg = detail::parse_untrusted_json(text, kApi, path, 128);
  if (!cfg.is_object()) detail::fail(kApi, "'{}' is not a JSON object", path);
  auto id_of = [&](std::string_view key) -> std::optional<int32_t> {
    auto tok = config_token(cfg, key);
    if (!tok) return std::nullopt;
    for (const auto& [t, id] : spec.vocab) {
      if (t == *tok) return id;
    }
    for (const auto& a : spec.added) {
      if (a.content == *tok) return a.id;
    }
    detail::fail(kApi, "'{}': {} '{}' is not a token of the vocabulary", path, key, *tok);
  };
  spec.bos = id_of("bos_token");
  spec.eos = id_of("eos_token");
  spec.pad = id_of("pad_token");
  // unk_token here is the Python wrapper's; the BPE model's own (model.unk_token) decides
  // what an unencodable byte becomes.
  if (auto it = cfg.find("chat_template"); it != cfg.end()) {
    if (it->is_string()) {
      spec.chat_template = it->get<std::string>();
    } else if (it->is_array()) {  // named templates: [{"name": "default", "template": ...}]
      for (const json& t : *it) {
        if (string_field(t, "name", "") == "default" && t.contains("template") &&
            t["template"].is_string()) {
          spec.chat_template = t["template"].get<std::string>();
        }
      }
    }
  }
}

detail::TokenizerSpec spec_from_json(std::string_view text, std::string_view source) {
  detail::TokenizerSpec spec;
  spec.source = std::string(source);
  const std::string& src = spec.source;
  json root = detail::parse_untrusted_json(text, kApi, src, 128);
  if (!root.is_object()) detail::fail(kApi, "'{}' is not a JSON object", src);
  auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) {
    detail::fail(kApi, "'{}' has no 'model' object", src);
  }
  const json& model = *model_it;
  if (auto t = model.find("type"); t != model.end() && *t != "BPE") {
    detail::fail(kApi, "'{}': model type {} is not supported (partix reads BPE)", src, t->dump());
  }
  for (std::string_view k :
       {"dropout", "byte_fallback", "continuing_subword_prefix", "end_of_word_suffix"}) {
    require_unset(model, k, src, "the BPE model");
  }
  spec.ignore_merges = get_bool(model, "ignore_merges", false, src);
  auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) {
    detail::fail(kApi, "'{}': model.vocab is missing or not an object", src);
  }
  for (const auto& [tok, id] : vocab->items()) {
    spec.vocab.emplace_back(tok, get_id(id, fmt::format("token '{}'", tok), src));
  }
  auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array()) {
    detail::fail(kApi, "'{}': model.merges is missing or not a list", src);
  }
  for (size_t k = 0; k < merges->size(); ++k) {
    const json& m = (*merges)[k];
    if (m.is_string()) {  // "left right"
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() ||
          s.find(' ', sp + 1) != std::string::npos) {
        detail::fail(kApi, "'{}': merge #{} '{}' is not two tokens separated by one space", src, k,
                     s);
      }
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      detail::fail(kApi, "'{}': merge #{} is {}, not \"a b\" or [\"a\", \"b\"]", src, k, m.dump());
    }
  }
  if (auto unk = model.find("unk_token"); unk != model.end() && unk->is_string()) {
    auto it = vocab->find(unk->get<std::string>());
    if (it == vocab->end())
      detail::fail(kApi, "'{}': unk_token {} is not in the vocabulary", src, unk->dump());
    spec.unk = get_id(*it, "unk_token", src);
  }
  if (auto added = root.find("added_tokens"); added != root.end() && !added->is_null()) {
    if (!added->is_array()) detail::fail(kApi, "'{}': added_tokens is not a list", src);
    for (const json& a : *added) {
      if (!a.is_object() || !a.contains("id") || !a.contains("content") ||
          !a["content"].is_string()) {
        detail::fail(kApi, "'{}': an added token lacks 'id' or 'content': {}", src, a.dump());
      }
      detail::SpecAddedToken t;
      t.content = a["content"].get<std::string>();
      t.id = get_id(a["id"], fmt::format("added token '{}'", t.content), src);
      t.special = get_bool(a, "special", false, src);
      t.lstrip = get_bool(a, "lstrip", false, src);
      t.rstrip = get_bool(a, "rstrip", false, src);
      if (get_bool(a, "single_word", false, src)) {
        detail::fail(kApi, "'{}': added token '{}' is single_word, which partix does not support",
                     src, t.content);
      }
      spec.added.push_back(std::move(t));
    }
  }
  if (auto n = root.find("normalizer"); n != root.end() && !n->is_null()) {
    detail::fail(kApi, "'{}': normalizer {} is not supported (partix supports none)", src,
                 string_field(*n, "type", n->dump().substr(0, 80)));
  }
  parse_pre_tokenizer(root.value("pre_tokenizer", json()), spec);
  if (auto d = root.find("decoder"); d != root.end() && !d->is_null()) {
    if (string_field(*d, "type", "") != "ByteLevel") {
      detail::fail(kApi, "'{}': decoder {} is not supported (partix decodes ByteLevel)", src,
                   d->dump().substr(0, 80));
    }
  }
  return spec;
}

// GGUF pre-tokenizer names (tokenizer.ggml.pre) and what they mean here.
void apply_gguf_pre(std::string_view pre, detail::TokenizerSpec& spec) {
  spec.use_regex = true;
  spec.add_prefix_space = false;
  if (pre == "gpt2" || pre == "gpt-2") return;
  // StarCoder-family vocabularies (SmolLM among them) put every digit in a piece of its own
  // before the GPT-2 pattern runs.
  if (pre == "smollm" || pre == "starcoder" || pre == "refact") {
    spec.split_digits = true;
    spec.individual_digits = true;
    return;
  }
  detail::fail(kApi,
               "'{}': pre-tokenizer '{}' (tokenizer.ggml.pre) is not supported (supported: "
               "gpt2, smollm, starcoder, refact)",
               spec.source, pre);
}

detail::TokenizerSpec spec_from_gguf(const GgufFile& f) {
  detail::TokenizerSpec spec;
  spec.source = f.path();
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model != "gpt2") {
    detail::fail(kApi,
                 "'{}': tokenizer model '{}' is not supported (partix reads byte-level BPE, "
                 "tokenizer.ggml.model = 'gpt2')",
                 spec.source, model);
  }
  // Older files have no tokenizer.ggml.pre: their 'gpt2' model means the GPT-2 pattern.
  apply_gguf_pre(f.get_string("tokenizer.ggml.pre", "gpt2"), spec);
  std::vector<std::string> tokens = f.get_strings("tokenizer.ggml.tokens");
  if (static_cast<int64_t>(tokens.size()) > detail::kMaxVocab) {
    detail::fail(kApi, "'{}': {} tokens is more than partix accepts ({})", spec.source,
                 tokens.size(), detail::kMaxVocab);
  }
  std::vector<int64_t> types;
  if (f.has("tokenizer.ggml.token_type")) {
    types = f.get_ints("tokenizer.ggml.token_type");
    if (types.size() != tokens.size()) {
      detail::fail(kApi, "'{}': tokenizer.ggml.token_type has {} entries for {} tokens",
                   spec.source, types.size(), tokens.size());
    }
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    // Token types: 3 control (special, e.g. <|im_end|>), 4 user-defined (added, not
    // special); both are matched whole in text, before BPE.
    const int64_t type = types.empty() ? 1 : types[i];
    if (type == 3 || type == 4) {
      spec.added.push_back({id, tokens[i], type == 3, false, false});
    }
    spec.vocab.emplace_back(std::move(tokens[i]), id);
  }
  const std::vector<std::string> merges = f.get_strings("tokenizer.ggml.merges");
  for (size_t k = 0; k < merges.size(); ++k) {
    const std::string& s = merges[k];
    const size_t sp = s.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() ||
        s.find(' ', sp + 1) != std::string::npos) {
      detail::fail(kApi, "'{}': merge #{} '{}' is not two tokens separated by one space",
                   spec.source, k, s);
    }
    spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
  }
  auto id_key = [&](std::string_view key) -> std::optional<int32_t> {
    if (!f.has(key)) return std::nullopt;
    const int64_t v = f.get_int(key);
    if (v < 0 || v >= detail::kMaxVocab) {
      detail::fail(kApi, "'{}': {} = {} is not a token id", spec.source, key, v);
    }
    return static_cast<int32_t>(v);
  };
  spec.bos = id_key("tokenizer.ggml.bos_token_id");
  spec.eos = id_key("tokenizer.ggml.eos_token_id");
  spec.pad = id_key("tokenizer.ggml.padding_token_id");
  // tokenizer.ggml.unknown_token_id is not used: in a byte-level vocabulary it is usually
  // <|endoftext|>, and substituting it for an unencodable byte would end the text silently.
  (void)id_key("tokenizer.ggml.unknown_token_id");  // still validated
  spec.chat_template = f.get_string("tokenizer.chat_template", "");
  return spec;
}

}  // namespace

Tokenizer Tokenizer::from_json(std::string_view text, std::string_view source) {
  Tokenizer t;
  t.impl_ =
      std::make_shared<const Impl>(detail::TokenizerCore::build(spec_from_json(text, source)));
  return t;
}

Tokenizer Tokenizer::from_json_file(const std::string& path) {
  detail::TokenizerSpec spec = spec_from_json(read_text_file(path), path);
  // tokenizer_config.json beside it names bos/eos/pad and holds the chat template.
  const auto cfg = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(cfg, ec)) read_tokenizer_config(cfg.string(), spec);
  Tokenizer t;
  t.impl_ = std::make_shared<const Impl>(detail::TokenizerCore::build(std::move(spec)));
  return t;
}

Tokenizer Tokenizer::from_gguf(const GgufFile& file) {
  Tokenizer t;
  t.impl_ = std::make_shared<const Impl>(detail::TokenizerCore::build(spec_from_gguf(file)));
  return t;
}

}  // namespace partix
