// The checkpoint index (index.json) as a value: written by the saver, parsed and validated by
// the reader. The format is documented in the README ("Checkpoints").
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "partix/checkpoint.h"
#include "partix/dtype.h"

namespace partix::detail {

inline constexpr std::string_view kCheckpointFormat = "partix.checkpoint";
inline constexpr int kCheckpointVersion = 1;
inline constexpr std::string_view kIndexName = "index.json";

// One block of a leaf, stored contiguously (row-major) in one data file.
struct CheckpointChunk {
  Shape offsets, extent;        // the global box [offsets, offsets + extent)
  std::string file;             // a name in CheckpointIndex::files
  std::string tensor;           // its name inside that safetensors file
  uint64_t begin = 0, end = 0;  // absolute byte range in the file
  uint64_t xxh64 = 0;
};

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

}  // namespace partix::detail
