// The facts primitives state for the partitioner (ir/primitive.h, "partitioning"): collective
// traffic and names, identities over one device, pinned shardings, indexed axes, and block
// attributes, each checked against values worked out by hand.
#include <gtest/gtest.h>

#include "ir/primitive.h"
#include "partix/sharding.h"

using namespace partix;

namespace {

const prim::Primitive& op(std::string_view name) { return prim::get_primitive(name); }

ir::Aval f32(Shape s) { return ir::Aval{std::move(s), DType::F32}; }

}  // namespace

TEST(PartitionFacts, CollectiveTrafficPerDevice) {
  // f32[8,4] is 128 bytes; a ring over 4 devices moves 3/4 of it per pass.
  const std::vector<ir::Aval> in{f32({8, 4})};
  const ir::Attrs g4{{"group", int64_t{4}}};
  EXPECT_EQ(op("all_reduce").cost().comm_kind(), "all_reduce");
  EXPECT_DOUBLE_EQ(op("all_reduce").cost().comm_bytes(in, in, g4),
                   192.0);  // reduce_scatter + gather
  EXPECT_DOUBLE_EQ(op("all_gather").cost().comm_bytes(in, {f32({32, 4})}, g4), 384.0);
  EXPECT_DOUBLE_EQ(op("reduce_scatter").cost().comm_bytes(in, {f32({2, 4})}, g4), 96.0);
  EXPECT_DOUBLE_EQ(op("all_to_all").cost().comm_bytes(in, in, g4), 96.0);
  EXPECT_EQ(op("ppermute").cost().comm_kind(), "collective_permute");
  EXPECT_DOUBLE_EQ(op("ppermute").cost().comm_bytes(in, in, g4), 128.0);
  // Ops that communicate nothing file nothing.
  EXPECT_EQ(op("add").cost().comm_kind(), "");
  EXPECT_EQ(op("axis_slice").cost().comm_kind(), "");
  EXPECT_DOUBLE_EQ(op("add").cost().comm_bytes({in[0], in[0]}, in, {}), 0.0);
}

TEST(PartitionFacts, IdentitiesOverOneDevice) {
  const ir::Attrs one{{"group", int64_t{1}}}, two{{"group", int64_t{2}}};
  for (const char* n : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "axis_slice"}) {
    EXPECT_TRUE(op(n).partitioning().identity_on_one_device(one)) << n;
    EXPECT_FALSE(op(n).partitioning().identity_on_one_device(two)) << n;
  }
  // A permutation of one device keeps the value (0 -> 0) or sends nothing (zeros).
  EXPECT_TRUE(op("ppermute")
                  .partitioning()
                  .identity_on_one_device({{"group", int64_t{1}}, {"perm", ir::Ints{0, 0}}}));
  EXPECT_FALSE(op("ppermute")
                   .partitioning()
                   .identity_on_one_device({{"group", int64_t{1}}, {"perm", ir::Ints{}}}));
  EXPECT_FALSE(op("add").partitioning().identity_on_one_device(one));
}

TEST(PartitionFacts, NamesUsersWrote) {
  EXPECT_EQ(op("all_reduce").user_name({{"kind", std::string("sum")}}), "psum");
  EXPECT_EQ(op("all_reduce").user_name({{"kind", std::string("max")}}), "pmax");
  EXPECT_EQ(op("all_reduce").user_name({{"kind", std::string("min")}}), "pmin");
  EXPECT_EQ(op("reduce_scatter").user_name({}), "psum_scatter");
  EXPECT_EQ(op("all_gather").user_name({}), "all_gather");
  EXPECT_EQ(op("mul").user_name({}), "mul");
}

TEST(PartitionFacts, PinnedShardings) {
  const Mesh mesh({2}, {"x"});
  auto constraint =
      op("sharding_constraint").partitioning().pinned_shardings({{"mesh", mesh}, {"spec", P("x")}});
  ASSERT_TRUE(constraint);
  EXPECT_TRUE(constraint->constrains_operand);
  EXPECT_FALSE(constraint->per_device_body);
  EXPECT_EQ(constraint->operands, std::vector<PartitionSpec>{P("x")});
  EXPECT_EQ(constraint->results, std::vector<PartitionSpec>{P("x")});

  auto body = op("shard_map")
                  .partitioning()
                  .pinned_shardings({{"mesh", mesh},
                                     {"in_specs", ir::Specs{P("x"), P()}},
                                     {"out_specs", ir::Specs{P(None, "x")}}});
  ASSERT_TRUE(body);
  EXPECT_TRUE(body->per_device_body);
  EXPECT_EQ(body->operands, (std::vector<PartitionSpec>{P("x"), P()}));
  EXPECT_EQ(body->results, std::vector<PartitionSpec>{P(None, "x")});

  auto literal = op("constant").partitioning().pinned_shardings({});
  ASSERT_TRUE(literal);
  EXPECT_FALSE(literal->constrains_operand || literal->per_device_body);
  EXPECT_TRUE(literal->operands.empty());
  EXPECT_EQ(literal->results, std::vector<PartitionSpec>{P()});

  EXPECT_FALSE(op("add").partitioning().pinned_shardings({}));
  EXPECT_FALSE(op("dot_general").partitioning().pinned_shardings({}));
}

TEST(PartitionFacts, BroadcastsAndIndexedAxes) {
  EXPECT_TRUE(op("broadcast_in_dim").partitioning().is_broadcast());
  EXPECT_FALSE(op("reshape").partitioning().is_broadcast());

  const std::vector<ir::Aval> table{f32({10, 6}), ir::Aval{{3}, DType::I32}};
  auto take = op("take").partitioning().axis_indexing(table, {{"axis", int64_t{-2}}});
  ASSERT_TRUE(take);
  EXPECT_EQ(take->axis, 0);  // normalised
  EXPECT_FALSE(take->scatter || take->elementwise);
  auto along = op("scatter_add_along").partitioning().axis_indexing(table, {{"axis", int64_t{1}}});
  ASSERT_TRUE(along);
  EXPECT_EQ(along->axis, 1);
  EXPECT_TRUE(along->scatter && along->elementwise);
  EXPECT_TRUE(
      op("take_along").partitioning().axis_indexing(table, {{"axis", int64_t{0}}})->elementwise);
  EXPECT_TRUE(
      op("scatter_add").partitioning().axis_indexing(table, {{"axis", int64_t{0}}})->scatter);
  EXPECT_FALSE(op("dynamic_slice").partitioning().axis_indexing(table, {{"axis", int64_t{0}}}));
}

TEST(PartitionFacts, BlockAttributes) {
  const Mesh mesh({2}, {"x"});
  const NamedSharding rows(mesh, P("x")), whole(mesh, P());

  // slice of f32[8,6] to [:, 1:5] with rows split: the whole rows dimension becomes the block's.
  {
    std::vector<ir::Aval> in{f32({8, 6})}, out{f32({8, 4})}, local_in{f32({4, 6})};
    std::vector<NamedSharding> sh{rows};
    ir::Attrs a = op("slice").partitioning().localize_attrs(
        {{"start", ir::Ints{0, 1}}, {"stop", ir::Ints{8, 5}}, {"strides", ir::Ints{1, 1}}},
        {in, out, local_in, sh});
    EXPECT_EQ(a.ints("start"), (ir::Ints{0, 1}));
    EXPECT_EQ(a.ints("stop"), (ir::Ints{4, 5}));
    EXPECT_EQ(a.ints("strides"), (ir::Ints{1, 1}));
  }
  // dynamic_slice taking every row of a split operand takes the block's rows.
  {
    std::vector<ir::Aval> in{f32({8, 6}), ir::Aval{{}, DType::I32}, ir::Aval{{}, DType::I32}};
    std::vector<ir::Aval> out{f32({8, 2})}, local_in{f32({4, 6}), in[1], in[2]};
    std::vector<NamedSharding> sh{rows};
    ir::Attrs a = op("dynamic_slice")
                      .partitioning()
                      .localize_attrs({{"sizes", ir::Ints{8, 2}}}, {in, out, local_in, sh});
    EXPECT_EQ(a.ints("sizes"), (ir::Ints{4, 2}));
  }
  // reshape / broadcast target the result's block.
  {
    std::vector<ir::Aval> in{f32({8})}, out{f32({8, 3})}, local_in{f32({4})};
    std::vector<NamedSharding> sh{rows};
    ir::Attrs a = op("broadcast_in_dim")
                      .partitioning()
                      .localize_attrs({{"shape", ir::Ints{8, 3}}, {"dims", ir::Ints{0}}},
                                      {in, out, local_in, sh});
    EXPECT_EQ(a.ints("shape"), (ir::Ints{4, 3}));
    EXPECT_EQ(a.ints("dims"), (ir::Ints{0}));
  }
  // iota: a split block learns where it lies; a whole one needs nothing more.
  {
    std::vector<ir::Aval> none, out{f32({6, 2})};
    const ir::Attrs attrs{
        {"shape", ir::Ints{6, 2}}, {"dimension", int64_t{0}}, {"dtype", DType::F32}};
    std::vector<NamedSharding> split{rows}, replicated{whole};
    ir::Attrs a = op("iota").partitioning().localize_attrs(attrs, {none, out, none, split});
    EXPECT_EQ(a.ints("shape"), (ir::Ints{3, 2}));
    EXPECT_EQ(a.ints("global_shape"), (ir::Ints{6, 2}));
    EXPECT_EQ(a.get<PartitionSpec>("offset_spec"), P("x"));
    ir::Attrs b = op("iota").partitioning().localize_attrs(attrs, {none, out, none, replicated});
    EXPECT_EQ(b.ints("shape"), (ir::Ints{6, 2}));
    EXPECT_FALSE(b.has("global_shape") || b.has("offset_spec"));
  }
  // Ops whose blocks follow from their operands keep their attributes.
  {
    std::vector<ir::Aval> in{f32({8}), f32({8})}, out{f32({8})}, local_in{f32({4}), f32({4})};
    std::vector<NamedSharding> sh{rows};
    ir::Attrs a =
        op("add").partitioning().localize_attrs({{"tag", int64_t{7}}}, {in, out, local_in, sh});
    EXPECT_EQ(a.i("tag"), 7);
  }
}
