// Collectives inside a per-device program: groups of devices from mesh axes.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "ir/primitive.h"

namespace partix::prim {

// The devices that share this device's coordinates on every axis not in `axes`, ordered by
// their mixed-radix index over `axes` (listed order, major to minor); and this device's rank.
// Computed once per run and axes (ExecContext::groups).
using GroupInfo = ExecContext::Group;
const GroupInfo& group_of(const ExecContext& ctx, const std::vector<std::string>& axes);
// The device id at `rank` of the group (rank over `axes`), for ppermute.
int64_t mixed_radix_index(const Mesh& mesh, const std::vector<int64_t>& coords,
                          const std::vector<std::string>& axes);

// A block of `a`'s bytes all equal to `value`, made once and shared by every device that needs
// it (each counting the bytes while it holds an alias: Buffer::alias_for); invalid once the
// cache holds 64 MiB. For results known without computing them (padding, zeros).
detail::Buffer filled_block(const ir::Aval& a, double value);

// Per-device facts of operands split unevenly, recorded on a local instruction by the
// partitioner (attrs "uneven" and "uneven_axes"): whether some operand dimension's block on
// this device is all padding.
ir::Attrs with_uneven_operands(ir::Attrs attrs, const std::vector<ir::Aval>& global_in,
                               const std::vector<ir::Aval>& local_in,
                               const std::vector<NamedSharding>& in_shardings);
// Memoised for the run in c.ctx by the address of c.attrs: call it with an instruction's own
// attributes (as the interpreter's shares_result probe does), never with a temporary.
bool some_operand_block_is_all_padding(const KernelCall& c);

}  // namespace partix::prim
