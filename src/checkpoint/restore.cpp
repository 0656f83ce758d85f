// Restoring: each device of this process gets its block of each leaf, assembled from the saved
// chunks its box intersects, reading only those byte ranges of the data files (through a
// bounded staging buffer, or straight into the block when a run is long and needs no
// conversion). Replicas within the process copy the first one's block instead of reading.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "core/array_impl.h"
#include "core/errors.h"
#include "checkpoint/checkpoint.h"
#include "files/checksum.h"
#include "formats/convert.h"
#include "files/input_file.h"
#include "formats/safetensors.h"

namespace partix {

namespace detail {
namespace {
std::atomic<uint64_t> g_bytes_read{0};
}  // namespace
uint64_t checkpoint_bytes_read() { return g_bytes_read.load(); }
}  // namespace detail

namespace ckpt {

namespace {

namespace fs = std::filesystem;
using detail::CheckpointChunk;
using detail::CheckpointIndex;
using detail::CheckpointLeaf;

constexpr std::string_view kApi = "ckpt.restore";
// Reads of short runs go through a staging buffer of at most this size.
constexpr uint64_t kStagingBytes = uint64_t{4} << 20;
// Runs at most a page apart are fetched with one read (the gap costs no more than the page
// reads it saves); farther runs are read one by one.
constexpr uint64_t kMergeGap = 4096;

std::string without_api(const std::string& what) {
  if (what.starts_with('[')) {
    const size_t close = what.find("] ");
    if (close != std::string::npos) return what.substr(close + 2);
  }
  return what;
}

detail::StoredType stored_type(DType d) {
  switch (d) {
    case DType::Bool:
      return detail::StoredType::Bool;
    case DType::I32:
      return detail::StoredType::I32;
    case DType::I64:
      return detail::StoredType::I64;
    case DType::F16:
      return detail::StoredType::F16;
    case DType::BF16:
      return detail::StoredType::BF16;
    case DType::F32:
      return detail::StoredType::F32;
    case DType::F64:
      return detail::StoredType::F64;
    case DType::I8:
      return detail::StoredType::I8;
    case DType::I16:
      return detail::StoredType::I16;
    case DType::U8:
      return detail::StoredType::U8;
    case DType::U16:
      return detail::StoredType::U16;
    case DType::U32:
      return detail::StoredType::U32;
    default:
      break;
  }
  detail::internal_error("checkpoint", "unknown dtype");
}

std::string box_string(const Shape& offsets, const Shape& extent) {
  std::vector<std::string> parts;
  for (size_t d = 0; d < offsets.size(); ++d) {
    parts.push_back(fmt::format("{}:{}", offsets[d], offsets[d] + extent[d]));
  }
  return "[" + fmt::format("{}", fmt::join(parts, ", ")) + "]";
}

struct DataFile {
  std::shared_ptr<const detail::InputFile> file;
  detail::SafetensorsHeader header;
};

// A contiguous piece of a chunk in the file and where it goes in a device's block.
struct Run {
  uint64_t src;  // absolute offset in the file
  char* dst;
  int64_t elems;
};

class StepReader {
 public:
  StepReader(const std::string& dir, int64_t step) : step_dir_(step_path(dir, step)) {
    index_path_ = (fs::path(step_dir_) / detail::kIndexName).string();
    std::error_code ec;
    if (!fs::is_directory(step_dir_, ec)) {
      std::vector<int64_t> steps = all_steps(dir);
      detail::fail(kApi, "'{}' has no committed step {} (steps: {})", dir, step,
                   steps.empty() ? std::string("none") : fmt::format("{}", fmt::join(steps, ", ")));
    }
    index_ = detail::read_index(step_dir_, step, kApi);
  }

  const CheckpointIndex& index() const { return index_; }
  const std::string& index_path() const { return index_path_; }

  // Checks that the leaf can become `spec`, before anything is read.
  void check_target(const CheckpointLeaf& leaf, const ArraySpec& spec) const {
    if (leaf.shape != spec.shape) {
      detail::fail(kApi,
                   "'{}': leaf '{}' has shape {} but the target needs {} (a checkpoint of another "
                   "model?)",
                   index_path_, leaf.name, shape_to_string(leaf.shape),
                   shape_to_string(spec.shape));
    }
    // Quantized blocks restore as they are: converting them is astype's work, after restore.
    const bool quantized = is_quantized(leaf.dtype) || is_quantized(spec.dtype);
    if (leaf.dtype != spec.dtype &&
        (quantized || !detail::convertible(stored_type(leaf.dtype), spec.dtype))) {
      detail::fail(kApi, "'{}': leaf '{}' is {} and cannot be restored as {} ({})", index_path_,
                   leaf.name, dtype_name(leaf.dtype), dtype_name(spec.dtype),
                   quantized ? "quantized leaves restore as they are; astype converts them after"
                             : "it would lose values");
    }
    if (spec.sharding.spec().size() > static_cast<int>(spec.shape.size())) {
      detail::fail(kApi, "leaf '{}' of shape {} cannot take the target sharding {}", leaf.name,
                   shape_to_string(spec.shape), spec.sharding.to_string());
    }
  }

  Array restore(const CheckpointLeaf& leaf, const ArraySpec& spec) {
    for (const CheckpointChunk& c : leaf.chunks) check_chunk(leaf, c);
    std::map<std::vector<int64_t>, const void*> filled;  // box -> the block that holds it
    const int64_t block_bytes = dtype_nbytes(spec.dtype, spec.sharding.shard_shape(spec.shape));
    return detail::build_sharded(
        spec.shape, spec.dtype, spec.sharding, /*committed=*/true,
        [&](void* block, const std::vector<Slice>& idx, const Shape& local) {
          std::vector<int64_t> key;
          for (const Slice& s : idx) key.insert(key.end(), {s.start, s.stop});
          if (auto it = filled.find(key); it != filled.end()) {
            std::memcpy(block, it->second, static_cast<size_t>(block_bytes));
            return;
          }
          for (const CheckpointChunk& c : leaf.chunks) {
            std::vector<Slice> inter;
            bool empty = false;
            for (size_t d = 0; d < idx.size(); ++d) {
              const int64_t lo = std::max(idx[d].start, c.offsets[d]);
              const int64_t hi = std::min(idx[d].stop, c.offsets[d] + c.extent[d]);
              empty = empty || hi <= lo;
              inter.push_back({lo, hi});
            }
            if (!empty)
              read_part(leaf, c, spec.dtype, inter, static_cast<char*>(block), idx, local);
          }
          filled.emplace(std::move(key), block);
        });
  }

 private:
  const DataFile& open(const CheckpointLeaf& leaf, const std::string& name) {
    auto it = files_.find(name);
    if (it != files_.end()) return it->second;
    const std::string path = (fs::path(step_dir_) / name).string();
    DataFile f;
    try {
      f.file = detail::InputFile::open(path, kApi);
      f.header = detail::parse_safetensors(*f.file);
    } catch (const Error& e) {
      detail::fail(kApi, "leaf '{}': {}", leaf.name, without_api(e.what()));
    }
    return files_.emplace(name, std::move(f)).first->second;
  }

  // The data file must agree with the index about the chunk: a lying index or a swapped file is
  // caught before any of its bytes are used.
  void check_chunk(const CheckpointLeaf& leaf, const CheckpointChunk& c) {
    const DataFile& f = open(leaf, c.file);
    const std::string& path = f.file->path();
    const auto& entries = f.header.tensors;
    auto it = std::lower_bound(entries.begin(), entries.end(), c.tensor,
                               [](const auto& e, const std::string& n) { return e.name < n; });
    const std::string box = box_string(c.offsets, c.extent);
    if (it == entries.end() || it->name != c.tensor) {
      detail::fail(kApi, "'{}': leaf '{}': the file has no tensor '{}' for chunk {}", path,
                   leaf.name, c.tensor, box);
    }
    const std::string_view dtype = detail::checkpoint_stored_dtype(leaf.dtype);
    const Shape shape = detail::checkpoint_stored_shape(leaf.dtype, c.extent);
    if (it->dtype != dtype || it->shape != shape) {
      detail::fail(kApi, "'{}': leaf '{}': tensor '{}' is {}{} in the file but {}{} in the index",
                   path, leaf.name, c.tensor, it->dtype, shape_to_string(it->shape), dtype,
                   shape_to_string(shape));
    }
    const uint64_t begin = f.header.data_start + it->begin, end = f.header.data_start + it->end;
    if (begin != c.begin || end != c.end) {
      detail::fail(kApi,
                   "'{}': leaf '{}': the index puts chunk {} at bytes [{}, {}) but the file holds "
                   "it at [{}, {}) (of {} bytes)",
                   path, leaf.name, box, c.begin, c.end, begin, end, f.file->size());
    }
  }

  void read(const CheckpointLeaf& leaf, const detail::InputFile& file, uint64_t offset, void* dst,
            uint64_t n) {
    try {
      file.read(offset, dst, n, kApi);
    } catch (const Error& e) {
      detail::fail(kApi, "leaf '{}': {}", leaf.name, without_api(e.what()));
    }
    detail::g_bytes_read += n;
  }

  // Copies the intersection `inter` of chunk c and a device's box `idx` into the device's
  // padded block of shape `local`. Every byte used is verified: the checksum blocks the copied
  // runs touch are read whole and hashed (a version 1 chunk has one block, the whole chunk).
  void read_part(const CheckpointLeaf& leaf, const CheckpointChunk& c, DType target,
                 std::vector<Slice> inter, char* block, std::vector<Slice> idx, Shape local) {
    const detail::InputFile& file = *open(leaf, c.file).file;
    const int ss = dtype_size(leaf.dtype), ds = dtype_size(target);
    const bool same = leaf.dtype == target;
    const size_t r = inter.size();
    Shape offsets = c.offsets, extent = c.extent;
    // Quantized: in units of whole blocks of the last dimension (all boundaries are on blocks).
    if (const int64_t per_block = dtype_block_elems(leaf.dtype); per_block > 1) {
      for (Slice* sl : {&inter.back(), &idx.back()})
        *sl = {sl->start / per_block, sl->stop / per_block};
      offsets.back() /= per_block;
      extent.back() /= per_block;
      local.back() /= per_block;
    }
    // Trailing dimensions whole in both the chunk and the block merge into one run; runs come
    // in ascending file order.
    std::vector<Run> runs;
    if (r == 0) {
      runs.push_back({c.begin, block, 1});
    } else {
      size_t k = r - 1;
      while (k > 0 && inter[k].size() == extent[k] && inter[k].size() == local[k]) --k;
      int64_t run = 1;
      for (size_t d = k; d < r; ++d) run *= inter[d].size();
      std::vector<int64_t> cs(r, 1), ls(r, 1);
      for (size_t d = r - 1; d-- > 0;) {
        cs[d] = cs[d + 1] * extent[d + 1];
        ls[d] = ls[d + 1] * local[d + 1];
      }
      std::vector<int64_t> pos(k, 0);
      while (true) {
        int64_t src = 0, dst = 0;
        for (size_t d = 0; d < r; ++d) {
          const int64_t p = d < k ? pos[d] : 0;
          src += (inter[d].start - offsets[d] + p) * cs[d];
          dst += (inter[d].start - idx[d].start + p) * ls[d];
        }
        runs.push_back({c.begin + static_cast<uint64_t>(src * ss), block + dst * ds, run});
        size_t d = k;
        while (d > 0 && ++pos[d - 1] == inter[d - 1].size()) pos[--d] = 0;
        if (d == 0) break;
      }
    }
    auto run_end = [&](const Run& q) { return q.src + static_cast<uint64_t>(q.elems) * ss; };
    // The byte spans to read (relative to the chunk): each run widened to whole checksum
    // blocks; spans at most kMergeGap apart are fetched as one.
    const uint64_t size = c.end - c.begin, bs = c.block;
    struct Span {
      uint64_t lo, hi;
    };
    std::vector<Span> spans;
    for (const Run& q : runs) {
      const uint64_t lo = (q.src - c.begin) / bs * bs;
      const uint64_t hi = std::min(size, (run_end(q) - c.begin + bs - 1) / bs * bs);
      if (!spans.empty() && lo <= spans.back().hi + kMergeGap) {
        spans.back().hi = std::max(spans.back().hi, hi);
      } else {
        spans.push_back({lo, hi});
      }
    }
    std::vector<char> staging;
    size_t first = 0;  // the first run that may overlap the window
    for (const Span& span : spans) {
      detail::Xxh64 hash;  // of the block being read
      for (uint64_t pos = span.lo; pos < span.hi;) {
        while (first < runs.size() && run_end(runs[first]) <= c.begin + pos) ++first;
        // A long run without conversion is read straight into the device's block.
        char* direct = nullptr;
        uint64_t end = 0;
        if (same && first < runs.size() && runs[first].src <= c.begin + pos) {
          const uint64_t run_hi = run_end(runs[first]) - c.begin;
          const uint64_t e = run_hi == size || bs > kStagingBytes ? run_hi : run_hi / bs * bs;
          if (e >= pos + kStagingBytes / 4) {
            end = std::min(e, span.hi);
            direct = runs[first].dst + (c.begin + pos - runs[first].src);
          }
        }
        if (!direct) {
          end = std::min(span.hi, pos + kStagingBytes);
          // On a block boundary where a block fits (the window's element-aligned end otherwise).
          if (end < span.hi && end / bs * bs > pos) end = end / bs * bs;
          staging.resize(end - pos);
        }
        char* buf = direct ? direct : staging.data();
        read(leaf, file, c.begin + pos, buf, end - pos);
        for (uint64_t at = pos; at < end;) {
          const uint64_t block_end = std::min(size, (at / bs + 1) * bs);
          const uint64_t stop = std::min(end, block_end);
          hash.update(buf + (at - pos), stop - at);
          if (stop == block_end) {
            verify(leaf, c, file, at / bs, hash.digest());
            hash = detail::Xxh64();
          }
          at = stop;
        }
        for (size_t q = first; !direct && q < runs.size() && runs[q].src < c.begin + end; ++q) {
          const uint64_t lo = std::max(runs[q].src, c.begin + pos);
          const uint64_t hi = std::min(run_end(runs[q]), c.begin + end);
          if (lo >= hi) continue;
          const char* src = buf + (lo - c.begin - pos);
          if (same) {
            std::memcpy(runs[q].dst + (lo - runs[q].src), src, hi - lo);
          } else if (!detail::convert_elements(
                         reinterpret_cast<const uint8_t*>(src), stored_type(leaf.dtype),
                         runs[q].dst + static_cast<int64_t>((lo - runs[q].src) / ss) * ds, target,
                         static_cast<int64_t>((hi - lo) / ss), /*finite_only=*/true)) {
            detail::fail(kApi,
                         "'{}': leaf '{}' ({}) has values that {} cannot hold (integers out of "
                         "range, bools other than 0 and 1, or floats that overflow to infinity)",
                         file.path(), leaf.name, dtype_name(leaf.dtype), dtype_name(target));
          }
        }
        pos = end;
      }
    }
  }

  void verify(const CheckpointLeaf& leaf, const CheckpointChunk& c, const detail::InputFile& file,
              uint64_t b, uint64_t digest) {
    if (digest == c.xxh64[b]) return;
    const uint64_t lo = c.begin + b * c.block, hi = std::min(c.end, lo + c.block);
    detail::fail(kApi,
                 "'{}': leaf '{}': chunk {} fails its checksum at bytes [{}, {}) (xxh64 {}, the "
                 "index says {}): the file is corrupted",
                 file.path(), leaf.name, box_string(c.offsets, c.extent), lo, hi,
                 detail::hex64(digest), detail::hex64(c.xxh64[b]));
  }

  std::string step_dir_, index_path_;
  CheckpointIndex index_;
  std::map<std::string, DataFile> files_;
};

}  // namespace

std::vector<Array> restore_leaves(const std::string& dir, int64_t step,
                                  const std::vector<std::string>& names,
                                  const std::vector<ArraySpec>& specs,
                                  const RestoreOptions& options) {
  detail::check(step >= 0, kApi, "step {} is negative", step);
  detail::check(names.size() == specs.size(), kApi, "{} names for {} specs", names.size(),
                specs.size());
  StepReader reader(dir, step);
  const CheckpointIndex& index = reader.index();
  std::map<std::string_view, const CheckpointLeaf*> by_name;
  for (const CheckpointLeaf& l : index.leaves) by_name.emplace(l.name, &l);
  std::vector<const CheckpointLeaf*> leaves;
  std::set<std::string_view> asked;
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = by_name.find(names[i]);
    if (it == by_name.end()) {
      detail::fail(kApi,
                   "'{}': no leaf '{}' (the checkpoint holds {} leaves{}; a checkpoint of another "
                   "model?)",
                   reader.index_path(), names[i], index.leaves.size(),
                   index.leaves.empty() ? "" : ", e.g. '" + index.leaves.front().name + "'");
    }
    detail::check(asked.insert(names[i]).second, kApi, "leaf '{}' is asked for twice", names[i]);
    reader.check_target(*it->second, specs[i]);
    leaves.push_back(it->second);
  }
  if (!options.partial) {
    for (const CheckpointLeaf& l : index.leaves) {
      if (!asked.count(l.name)) {
        detail::fail(kApi,
                     "'{}': holds leaf '{}', which the target lacks (a checkpoint of another "
                     "model? RestoreOptions::partial restores a subset)",
                     reader.index_path(), l.name);
      }
    }
  }
  std::vector<Array> out;
  for (size_t i = 0; i < leaves.size(); ++i) out.push_back(reader.restore(*leaves[i], specs[i]));
  return out;
}

std::map<std::string, Array> restore_all(const std::string& dir, int64_t step,
                                         const ShardingFn& sharding_for) {
  Info inf = info(dir, step);
  std::vector<std::string> names;
  std::vector<ArraySpec> specs;
  for (const LeafInfo& l : inf.leaves) {
    names.push_back(l.name);
    specs.push_back({l.shape, l.dtype, sharding_for(l.name, l.shape)});
  }
  std::vector<Array> arrays = restore_leaves(dir, step, names, specs);
  std::map<std::string, Array> out;
  for (size_t i = 0; i < names.size(); ++i) out.emplace(names[i], std::move(arrays[i]));
  return out;
}

}  // namespace ckpt

}  // namespace partix
