#include "formats/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/array_impl.h"
#include "core/errors.h"
#include "files/atomic_file.h"
#include "files/input_file.h"
#include "files/json_util.h"
#include "partix/io.h"

namespace partix {
namespace detail {
namespace {

constexpr std::string_view kApi = "safetensors";

struct DtypeInfo {
  std::string_view name;
  int bits;
  std::optional<StoredType> stored;
};

// Every dtype name of the format; partix loads the ones with a StoredType.
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 8, StoredType::Bool},  {"U8", 8, StoredType::U8},     {"I8", 8, StoredType::I8},
    {"F8_E5M2", 8, std::nullopt},   {"F8_E4M3", 8, std::nullopt}, {"F8_E8M0", 8, std::nullopt},
    {"I16", 16, StoredType::I16},   {"U16", 16, StoredType::U16},    {"F16", 16, StoredType::F16},
    {"BF16", 16, StoredType::BF16}, {"I32", 32, StoredType::I32}, {"U32", 32, StoredType::U32},
    {"F32", 32, StoredType::F32},   {"F64", 64, StoredType::F64}, {"I64", 64, StoredType::I64},
    {"U64", 64, std::nullopt},      {"C64", 64, std::nullopt},    {"F4", 4, std::nullopt},
    {"F6_E2M3", 6, std::nullopt},   {"F6_E3M2", 6, std::nullopt},
};

const DtypeInfo* find_dtype(std::string_view name) {
  for (const DtypeInfo& d : kDtypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

// A non-negative JSON integer that fits in int64 (and so in uint64).
bool as_count(const nlohmann::json& j, int64_t* out) {
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = v;
    return true;
  }
  return false;
}

SafetensorsEntry parse_entry(const std::string& key, const nlohmann::json& v,
                             std::string_view file) {
  auto bad = [&](std::string_view what) -> void {
    fail(kApi, "'{}': tensor '{}': {}", file, key, what);
  };
  if (!v.is_object()) bad(fmt::format("expected an object, got {}", json_kind(v)));
  SafetensorsEntry e;
  e.name = key;
  for (const auto& [k, _] : v.items()) {
    if (k != "dtype" && k != "shape" && k != "data_offsets") {
      bad(fmt::format("unknown field '{}' (expected dtype, shape, data_offsets)", k));
    }
  }
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) bad("missing or non-string 'dtype'");
  e.dtype = dt->get<std::string>();
  const DtypeInfo* info = find_dtype(e.dtype);
  if (!info) bad(fmt::format("unknown dtype '{}'", e.dtype));
  e.stored = info->stored;

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) bad("missing or non-array 'shape'");
  if (sh->size() > 32) bad(fmt::format("shape has {} dimensions (at most 32)", sh->size()));
  uint64_t elements = 1;
  for (const nlohmann::json& d : *sh) {
    int64_t n = 0;
    if (!as_count(d, &n))
      bad(fmt::format("shape entry {} is not a non-negative integer", d.dump()));
    e.shape.push_back(n);
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(n), &elements)) {
      bad(fmt::format("shape {} has too many elements", shape_to_string(e.shape)));
    }
  }
  uint64_t bits = 0;
  if (__builtin_mul_overflow(elements, static_cast<uint64_t>(info->bits), &bits) ||
      elements > static_cast<uint64_t>(INT64_MAX)) {
    bad(fmt::format("shape {} has too many elements", shape_to_string(e.shape)));
  }
  if (bits % 8 != 0) {
    bad(fmt::format("{} elements of {} do not fill whole bytes", elements, e.dtype));
  }

  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2) {
    bad("missing 'data_offsets' or not a pair [begin, end]");
  }
  int64_t b = 0, en = 0;
  if (!as_count((*off)[0], &b) || !as_count((*off)[1], &en)) {
    bad("data_offsets are not non-negative integers");
  }
  e.begin = static_cast<uint64_t>(b);
  e.end = static_cast<uint64_t>(en);
  if (e.end < e.begin) bad(fmt::format("data_offsets [{}, {}] end before they begin", b, en));
  if (e.end - e.begin != bits / 8) {
    bad(fmt::format("data_offsets [{}, {}] hold {} bytes but {} of shape {} need {}", b, en,
                    e.end - e.begin, e.dtype, shape_to_string(e.shape), bits / 8));
  }
  return e;
}

}  // namespace

namespace {

SafetensorsHeader parse_header(ByteReader& r, std::string_view name) {
  uint64_t n = r.read<uint64_t>("the header length (a file shorter than 8 bytes)");
  if (n > kMaxSafetensorsHeader) {
    fail(kApi, "'{}': header length {} exceeds the limit of {} bytes", name, n,
         kMaxSafetensorsHeader);
  }
  std::string_view text = r.read_bytes(n, "the JSON header");
  if (text.empty() || text.front() != '{') {
    fail(kApi, "'{}': the header does not start with '{{'", name);
  }
  nlohmann::json j = parse_untrusted_json(text, kApi, name);
  if (!j.is_object())
    fail(kApi, "'{}': the header is a JSON {}, not an object", name, json_kind(j));

  SafetensorsHeader h;
  h.data_start = 8 + n;
  for (const auto& [key, v] : j.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) fail(kApi, "'{}': __metadata__ is not an object", name);
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) {
          fail(kApi, "'{}': __metadata__ value of '{}' is a {}, not a string", name, mk,
               json_kind(mv));
        }
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(key, v, name));
  }
  // Tensors must tile the data buffer exactly: no overlap (two tensors sharing bytes), no
  // hole (hidden data), nothing past the end.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& e : h.tensors) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t at = 0;
  for (const SafetensorsEntry* e : by_offset) {
    if (e->begin < at) {
      fail(kApi,
           "'{}': tensor '{}' at data_offsets [{}, {}] overlaps the previous tensor "
           "(which ends at {})",
           name, e->name, e->begin, e->end, at);
    }
    if (e->begin > at) {
      fail(kApi, "'{}': tensor '{}' starts at {} but the previous data ends at {} (a hole)", name,
           e->name, e->begin, at);
    }
    at = e->end;
  }
  uint64_t data_size = r.remaining();
  if (at != data_size) {
    fail(kApi, "'{}': the tensors cover {} bytes but the file holds {} bytes of data{}", name, at,
         data_size, at > data_size ? " (truncated file?)" : "");
  }
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return h;
}

}  // namespace

SafetensorsHeader parse_safetensors(std::span<const uint8_t> file, std::string_view name) {
  ByteReader r(file, kApi, name);
  return parse_header(r, name);
}

SafetensorsHeader parse_safetensors(const InputFile& file) {
  ByteReader r(file, kApi);
  return parse_header(r, file.path());
}

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return "BOOL";
    case DType::I32:
      return "I32";
    case DType::I64:
      return "I64";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::F32:
      return "F32";
    case DType::F64:
      return "F64";
    case DType::I8:
      return "I8";
    case DType::I16:
      return "I16";
    case DType::U8:
      return "U8";
    case DType::U16:
      return "U16";
    case DType::U32:
      return "U32";
    default:
      break;
  }
  return "?";
}

}  // namespace detail

// ---------------------------------------------------------------------------------------

namespace detail {

// The state behind a Safetensors handle (outside the class so file helpers can fill it).
struct SafetensorsState {
  std::string source;
  std::vector<std::shared_ptr<const InputFile>> files;
  std::vector<SafetensorsHeader> headers;
  struct Loc {
    size_t file;
    size_t entry;  // index into headers[file].tensors
  };
  std::map<std::string, Loc, std::less<>> tensors;
  std::map<std::string, std::string> metadata;

  const SafetensorsEntry& entry(const Loc& loc) const {
    return headers[loc.file].tensors[loc.entry];
  }
  const Loc& find(std::string_view name) const {
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      fail(kApi, "'{}' has no tensor '{}' ({} tensors)", source, name, tensors.size());
    }
    return it->second;
  }
};

}  // namespace detail

struct Safetensors::Impl : detail::SafetensorsState {};

namespace {
const Safetensors::Impl& checked(const std::shared_ptr<const Safetensors::Impl>& impl) {
  if (!impl)
    detail::fail("Safetensors", "use of an empty Safetensors handle (default-constructed)");
  return *impl;
}
}  // namespace

namespace {

namespace fs = std::filesystem;

std::string read_small_file(const std::string& path) {
  return detail::read_text_file(path, detail::kApi, detail::kMaxSafetensorsHeader);
}

void add_file(detail::SafetensorsState& impl, const std::string& path) {
  auto f = detail::InputFile::open(path, detail::kApi);
  impl.headers.push_back(detail::parse_safetensors(*f));
  impl.files.push_back(std::move(f));
}

void open_index(detail::SafetensorsState& impl, const std::string& index_path) {
  using detail::fail;
  std::string text = read_small_file(index_path);
  nlohmann::json j = detail::parse_untrusted_json(text, detail::kApi, index_path);
  if (!j.is_object()) fail(detail::kApi, "'{}': the index is not a JSON object", index_path);
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) {
    fail(detail::kApi, "'{}': missing or non-object 'weight_map'", index_path);
  }
  if (auto md = j.find("metadata"); md != j.end()) {
    if (!md->is_object() && !md->is_null()) {
      fail(detail::kApi, "'{}': 'metadata' is a {}, not an object", index_path,
           detail::json_kind(*md));
    }
    if (md->is_object()) {
      for (const auto& [k, v] : md->items()) {
        impl.metadata[k] = v.is_string() ? v.get<std::string>() : v.dump();
      }
    }
  }
  const fs::path dir = fs::path(index_path).parent_path();
  std::map<std::string, size_t> file_ids;
  // Sorted by file name, so the files open in a deterministic order.
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [tensor, file] : wm->items()) {
    if (!file.is_string()) {
      fail(detail::kApi, "'{}': weight_map entry '{}' is a {}, not a file name", index_path, tensor,
           detail::json_kind(file));
    }
    std::string name = file.get<std::string>();
    // The index is untrusted: it may only name files beside it.
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\\') != std::string::npos || name.find('\0') != std::string::npos) {
      fail(detail::kApi,
           "'{}': weight_map entry '{}' names '{}', which is not a plain file "
           "name in the index's folder",
           index_path, tensor, name);
    }
    by_file[name].push_back(tensor);
  }
  for (const auto& [name, names] : by_file) {
    add_file(impl, (dir / name).string());
    const size_t fid = impl.files.size() - 1;
    const auto& entries = impl.headers.back().tensors;
    for (const std::string& t : names) {
      auto it = std::lower_bound(entries.begin(), entries.end(), t,
                                 [](const auto& e, const std::string& n) { return e.name < n; });
      if (it == entries.end() || it->name != t) {
        fail(detail::kApi, "'{}': weight_map puts tensor '{}' in '{}', which does not hold it",
             index_path, t, name);
      }
      impl.tensors.emplace(
          t, detail::SafetensorsState::Loc{fid, static_cast<size_t>(it - entries.begin())});
    }
  }
}

}  // namespace

Safetensors Safetensors::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->source = path;
  std::error_code ec;
  std::string target = path;
  if (fs::is_directory(path, ec)) {
    fs::path single = fs::path(path) / "model.safetensors";
    fs::path index = fs::path(path) / "model.safetensors.index.json";
    if (fs::exists(index, ec)) {
      target = index.string();
    } else if (fs::exists(single, ec)) {
      target = single.string();
    } else {
      detail::fail(detail::kApi,
                   "folder '{}' holds neither model.safetensors nor model.safetensors.index.json",
                   path);
    }
  }
  if (target.ends_with(".json")) {
    open_index(*impl, target);
  } else {
    add_file(*impl, target);
    impl->metadata = impl->headers[0].metadata;
    const auto& entries = impl->headers[0].tensors;
    for (size_t i = 0; i < entries.size(); ++i)
      impl->tensors.emplace(entries[i].name, Impl::Loc{0, i});
  }
  Safetensors s;
  s.impl_ = std::move(impl);
  return s;
}

std::vector<std::string> Safetensors::names() const {
  std::vector<std::string> out;
  for (const auto& [n, _] : checked(impl_).tensors) out.push_back(n);
  return out;
}

bool Safetensors::contains(std::string_view name) const {
  return checked(impl_).tensors.find(name) != checked(impl_).tensors.end();
}

Shape Safetensors::shape(std::string_view name) const {
  return checked(impl_).entry(checked(impl_).find(name)).shape;
}

std::string Safetensors::stored_dtype(std::string_view name) const {
  return checked(impl_).entry(checked(impl_).find(name)).dtype;
}

DType Safetensors::dtype(std::string_view name) const {
  const detail::SafetensorsEntry& e = checked(impl_).entry(checked(impl_).find(name));
  if (!e.stored) {
    detail::fail(detail::kApi,
                 "'{}': tensor '{}' has dtype {}, which partix does not load (supported: F32, "
                 "F16, BF16, F64, I8, I16, I32, I64, U8, U16, U32, BOOL)",
                 checked(impl_).source, name, e.dtype);
  }
  return detail::stored_dtype(*e.stored);
}

const std::map<std::string, std::string>& Safetensors::metadata() const {
  return checked(impl_).metadata;
}

Array Safetensors::load(std::string_view name, const NamedSharding& sharding,
                        std::optional<DType> dtype) const {
  const Impl::Loc& loc = checked(impl_).find(name);
  const detail::SafetensorsEntry& e = checked(impl_).entry(loc);
  const DType stored = this->dtype(name);  // throws for dtypes partix cannot load
  const DType target = dtype.value_or(stored);
  if (!detail::convertible(*e.stored, target)) {
    detail::fail(detail::kApi,
                 "'{}': tensor '{}' of dtype {} cannot load as {} (float to "
                 "integer and number to bool would lose values)",
                 checked(impl_).source, name, e.dtype, dtype_name(target));
  }
  if (sharding.spec().size() > static_cast<int>(e.shape.size())) {
    detail::fail(detail::kApi, "'{}': tensor '{}' of shape {} cannot take sharding {}",
                 checked(impl_).source, name, shape_to_string(e.shape), sharding.to_string());
  }
  const detail::InputFile& file = *checked(impl_).files[loc.file];
  const uint64_t base = checked(impl_).headers[loc.file].data_start + e.begin;
  const int ss = detail::stored_size(*e.stored), ds = dtype_size(target);
  const int64_t cols = e.shape.empty() ? 1 : e.shape.back();
  return detail::build_sharded(
      e.shape, target, sharding, /*committed=*/true,
      [&](void* block, const std::vector<Slice>& idx, const Shape& local) {
        const int64_t c0 = idx.empty() ? 0 : idx.back().start;
        const int64_t n = idx.empty() ? 1 : idx.back().size();
        detail::FileWindow window(file, base, base + (e.end - e.begin), detail::kApi);
        detail::for_each_box_row(e.shape, idx, local, [&](int64_t row, int64_t dst_off) {
          const uint8_t* src = window.at(base + static_cast<uint64_t>((row * cols + c0) * ss),
                                         static_cast<uint64_t>(n * ss));
          char* dst = static_cast<char*>(block) + dst_off * ds;
          if (!detail::convert_elements(src, *e.stored, dst, target, n)) {
            detail::fail(detail::kApi, "'{}': tensor '{}' ({}) has values that {} cannot hold",
                         checked(impl_).source, name, e.dtype, dtype_name(target));
          }
        });
      });
}

Array Safetensors::load(std::string_view name, std::optional<DType> dtype) const {
  // Like from_vector: on the default device, free to move to a computation's devices.
  Array a = load(name, single_device_sharding(default_device()), dtype);
  a.impl()->committed = false;
  return a;
}

Params Safetensors::load_all(std::optional<DType> dtype) const {
  Params out;
  for (const auto& [n, _] : checked(impl_).tensors) out.emplace(n, load(n, dtype));
  return out;
}

Params Safetensors::load_all(const ShardingFn& sharding_for, std::optional<DType> dtype) const {
  Params out;
  for (const auto& [n, loc] : checked(impl_).tensors) {
    out.emplace(n, load(n, sharding_for(n, checked(impl_).entry(loc).shape), dtype));
  }
  return out;
}

// ---------------------------------------------------------------------------------------

void save_safetensors(const std::string& path, const Params& tensors,
                      const std::map<std::string, std::string>& metadata) {
  constexpr std::string_view api = "save_safetensors";
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json md = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) md[k] = v;
    header["__metadata__"] = md;
  }
  uint64_t offset = 0;
  for (const auto& [name, a] : tensors) {
    detail::check(name != "__metadata__", api, "a tensor may not be named '__metadata__'");
    detail::check(a.is_concrete(), api, "tensor '{}' is not a concrete array (a tracer or empty)",
                  name);
    // The format has no block-quantized dtypes; a "?" would make a file nobody can read.
    detail::check(!is_quantized(a.dtype()), api,
                  "tensor '{}' is {}, which safetensors cannot store (it has no quantized "
                  "dtypes); dequantize it first (astype to f32 or bf16)",
                  name, dtype_name(a.dtype()));
    uint64_t n = static_cast<uint64_t>(a.nbytes());
    header[name] = {{"dtype", detail::safetensors_dtype_name(a.dtype())},
                    {"shape", a.shape()},
                    {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    detail::fail(api,
                 "cannot write the header of '{}' (tensor names and metadata must be "
                 "UTF-8): {}",
                 path, e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // Hugging Face aligns the data to 8 bytes

  // Written beside the target, every write checked, fsynced, then renamed: a reader never
  // sees a half-written file and a full disk is an error, not a short file.
  detail::AtomicFile out(path, api);
  uint64_t len = text.size();
  out.write(std::string_view(reinterpret_cast<const char*>(&len), 8));
  out.write(text);
  for (const auto& [name, a] : tensors) {
    std::vector<char> host = detail::gather_to_host(a);
    out.write(std::string_view(host.data(), host.size()));
  }
  out.commit();
}

}  // namespace partix
