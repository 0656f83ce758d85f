#include "io/gguf_mutator.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <span>
#include <stdexcept>

namespace partix::test {

namespace {

using detail::GgufType;
using detail::GgufValue;

template <class T>
void put(std::string& s, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s.append(b, sizeof(T));
}

void put_str(std::string& s, const std::string& v) {
  put<uint64_t>(s, v.size());
  s += v;
}

void put_int(std::string& s, GgufType t, int64_t v) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kBool:
      return put<uint8_t>(s, static_cast<uint8_t>(v));
    case GgufType::kInt8:
      return put<int8_t>(s, static_cast<int8_t>(v));
    case GgufType::kUint16:
      return put<uint16_t>(s, static_cast<uint16_t>(v));
    case GgufType::kInt16:
      return put<int16_t>(s, static_cast<int16_t>(v));
    case GgufType::kUint32:
      return put<uint32_t>(s, static_cast<uint32_t>(v));
    case GgufType::kInt32:
      return put<int32_t>(s, static_cast<int32_t>(v));
    case GgufType::kUint64:
    case GgufType::kInt64:
      return put<int64_t>(s, v);
    default:
      throw std::logic_error("put_int of a non-integer type");
  }
}

void put_value(std::string& s, const GgufValue& v) {
  switch (v.type) {
    case GgufType::kFloat32:
      return put<float>(s, static_cast<float>(v.f));
    case GgufType::kFloat64:
      return put<double>(s, v.f);
    case GgufType::kString:
      return put_str(s, v.s);
    case GgufType::kArray: {
      put<uint32_t>(s, static_cast<uint32_t>(v.elem));
      put<uint64_t>(s, v.size());
      for (int64_t x : v.ints) put_int(s, v.elem, x);
      for (double x : v.floats) {
        if (v.elem == GgufType::kFloat32) {
          put<float>(s, static_cast<float>(x));
        } else {
          put<double>(s, x);
        }
      }
      for (const std::string& x : v.strings) put_str(s, x);
      for (const GgufValue& x : v.arrays) put_value(s, x);
      return;
    }
    default:
      return put_int(s, v.type, v.i);
  }
}

}  // namespace

GgufMutator::GgufMutator(const std::string& source) {
  std::ifstream in(source, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot read " + source);
  bytes_.resize(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  in.read(bytes_.data(), static_cast<std::streamsize>(bytes_.size()));
  g_ = detail::parse_gguf(std::span(reinterpret_cast<const uint8_t*>(bytes_.data()), bytes_.size()),
                          source);
  for (const auto& t : g_.tensors) {
    src_offset_.push_back(g_.data_start + t.offset);
    src_nbytes_.push_back(t.nbytes);
  }
  replaced_.resize(g_.tensors.size());
}

detail::GgufTensorInfo& GgufMutator::tensor(const std::string& name) {
  for (auto& t : g_.tensors) {
    if (t.name == name) return t;
  }
  throw std::invalid_argument("no tensor " + name);
}

detail::GgufValue& GgufMutator::value(const std::string& key, GgufType type) {
  for (auto& [k, v] : g_.kv) {
    if (k == key) {
      v = GgufValue{};
      v.type = type;
      return v;
    }
  }
  g_.kv.emplace_back(key, GgufValue{});
  g_.kv.back().second.type = type;
  return g_.kv.back().second;
}

GgufMutator& GgufMutator::set_u32(const std::string& key, uint32_t v) {
  value(key, GgufType::kUint32).i = v;
  return *this;
}

GgufMutator& GgufMutator::set_f32(const std::string& key, float v) {
  value(key, GgufType::kFloat32).f = v;
  return *this;
}

GgufMutator& GgufMutator::set_str(const std::string& key, const std::string& v) {
  value(key, GgufType::kString).s = v;
  return *this;
}

GgufMutator& GgufMutator::remove_key(const std::string& key) {
  std::erase_if(g_.kv, [&](const auto& kv) { return kv.first == key; });
  return *this;
}

GgufMutator& GgufMutator::set_type(const std::string& name, uint32_t ggml_type) {
  tensor(name).type = ggml_type;
  return *this;
}

GgufMutator& GgufMutator::set_dims(const std::string& name, std::vector<uint64_t> dims) {
  tensor(name).dims = std::move(dims);
  return *this;
}

GgufMutator& GgufMutator::drop_tensor(const std::string& name) {
  for (size_t i = 0; i < g_.tensors.size(); ++i) {
    if (g_.tensors[i].name != name) continue;
    g_.tensors.erase(g_.tensors.begin() + static_cast<std::ptrdiff_t>(i));
    src_offset_.erase(src_offset_.begin() + static_cast<std::ptrdiff_t>(i));
    src_nbytes_.erase(src_nbytes_.begin() + static_cast<std::ptrdiff_t>(i));
    replaced_.erase(replaced_.begin() + static_cast<std::ptrdiff_t>(i));
    return *this;
  }
  throw std::invalid_argument("no tensor " + name);
}

GgufMutator& GgufMutator::add_f32(const std::string& name, std::vector<uint64_t> dims, float v) {
  detail::GgufTensorInfo t;
  t.name = name;
  t.dims = std::move(dims);
  t.type = 0;
  uint64_t n = 1;
  for (uint64_t d : t.dims) n *= d;
  std::string data;
  for (uint64_t k = 0; k < n; ++k) put<float>(data, v);
  g_.tensors.push_back(t);
  src_offset_.push_back(0);
  src_nbytes_.push_back(data.size());
  replaced_.push_back(data);
  return *this;
}

GgufMutator& GgufMutator::fill_f32(const std::string& name, float v) {
  for (size_t i = 0; i < g_.tensors.size(); ++i) {
    if (g_.tensors[i].name != name) continue;
    if (g_.tensors[i].type != 0) throw std::invalid_argument(name + " is not F32");
    std::string data;
    for (uint64_t k = 0; k < src_nbytes_[i] / 4; ++k) put<float>(data, v);
    replaced_[i] = data;
    return *this;
  }
  throw std::invalid_argument("no tensor " + name);
}

GgufMutator& GgufMutator::keep_layers(int n) {
  std::vector<std::string> drop;
  for (const auto& t : g_.tensors) {
    if (!t.name.starts_with("blk.")) continue;
    if (std::stoi(t.name.substr(4)) >= n) drop.push_back(t.name);
  }
  for (const auto& name : drop) drop_tensor(name);
  return set_u32("llama.block_count", static_cast<uint32_t>(n));
}

void GgufMutator::write(const std::string& path) const {
  std::string s = "GGUF";
  put<uint32_t>(s, g_.version);
  put<uint64_t>(s, g_.tensors.size());
  put<uint64_t>(s, g_.kv.size());
  for (const auto& [key, v] : g_.kv) {
    put_str(s, key);
    put<uint32_t>(s, static_cast<uint32_t>(v.type));
    put_value(s, v);
  }
  const uint64_t align = g_.alignment;
  std::string data;
  for (size_t i = 0; i < g_.tensors.size(); ++i) {
    const auto& t = g_.tensors[i];
    put_str(s, t.name);
    put<uint32_t>(s, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) put<uint64_t>(s, d);
    put<uint32_t>(s, t.type);
    put<uint64_t>(s, data.size());
    if (!replaced_[i].empty()) {
      data += replaced_[i];
    } else {
      data.append(bytes_, src_offset_[i], src_nbytes_[i]);
    }
    data.append((align - data.size() % align) % align, '\0');
  }
  s.append((align - s.size() % align) % align, '\0');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(s.data(), static_cast<std::streamsize>(s.size()));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace partix::test
