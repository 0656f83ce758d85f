// The checkpoint index (index.json) as a value: written by the saver, parsed and validated by
// the reader. The format is documented in docs/checkpoints.md.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "partix/checkpoint.h"
#include "partix/dtype.h"

namespace partix::detail {

inline constexpr std::string_view kCheckpointFormat = "partix.checkpoint";
// Version 2 checksums each chunk per block of kChecksumBlock bytes, so a restore that reads part
// of a chunk still verifies every byte it uses; version 1 (one checksum per chunk) still reads.
inline constexpr int kCheckpointVersion = 2;
inline constexpr uint64_t kChecksumBlock = uint64_t{64} << 10;
inline constexpr std::string_view kIndexName = "index.json";

// One block of a leaf, stored contiguously (row-major) in one data file.
struct CheckpointChunk {
  Shape offsets, extent;        // the global box [offsets, offsets + extent)
  std::string file;             // a name in CheckpointIndex::files
  std::string tensor;           // its name inside that safetensors file
  uint64_t begin = 0, end = 0;  // absolute byte range in the file
  // XXH64 of each block of `block` bytes of the range (the last one shorter). A version 1
  // index has one checksum of the whole range: block = end - begin.
  uint64_t block = 0;
  std::vector<uint64_t> xxh64;
};

// Names in the index of the leaf dtypes: safetensors' ("F32", "BF16", ...) and GGUF's for the
// quantized ones ("Q8_0", ...), which data files store as their raw blocks (U8 rows).
std::string_view checkpoint_dtype_name(DType dtype);
// The dtype and shape of a chunk's tensor in its data file.
std::string_view checkpoint_stored_dtype(DType dtype);
Shape checkpoint_stored_shape(DType dtype, const Shape& extent);

struct CheckpointLeaf {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
  std::string sharding;  // NamedSharding::to_string of the saving run, for people
  std::vector<std::string> mesh_axes;
  Shape mesh_shape;
  std::vector<std::vector<std::string>> spec;  // one entry per dimension; empty: not split
  std::vector<CheckpointChunk> chunks;
};

struct CheckpointIndex {
  int64_t step = 0;
  int process_count = 1;
  std::vector<std::string> files;
  std::map<std::string, std::string> metadata;
  std::vector<CheckpointLeaf> leaves;
};

// "data-00000-of-00001.safetensors".
std::string checkpoint_data_file(int process, int process_count);
// The chunk's tensor name in its data file: the leaf's name and the box's offsets.
std::string checkpoint_tensor_name(const std::string& leaf, const Shape& offsets);

std::string index_to_json(const CheckpointIndex& index);
// Parses and validates everything the index claims that can be checked without the data
// files: known dtypes, shapes that multiply out, chunks inside the shape that tile it exactly,
// byte ranges that match their boxes, file names that stay in the folder. `path` names the
// file in errors ("[api] '<path>': leaf '<name>': ...").
CheckpointIndex parse_index(std::string_view text, const std::string& path, std::string_view api);
// Reads <step_dir>/index.json and checks that it is the index of `step`.
CheckpointIndex read_index(const std::string& step_dir, int64_t step, std::string_view api);

// Bytes restores of this process have read from data files (tests check that a device reads
// only its ranges).
uint64_t checkpoint_bytes_read();

// For tests: while the returned lock lives, no background save of this process commits (each
// waits before its first stage), so a test can look at a save in flight.
std::unique_lock<std::mutex> hold_checkpoint_commits();

}  // namespace partix::detail
