#include "test_util.h"

using namespace partix;

namespace {
std::string draw(const PartitionSpec& spec, Shape shape = {8, 8}) {
  Mesh m = make_mesh({4, 2}, {"data", "model"});
  return visualize_sharding(device_put(zeros(shape), NamedSharding(m, spec)));
}
}  // namespace

TEST(VisualizeSharding, BothDimensionsSplit) {
  EXPECT_EQ(draw(P("data", "model")),
            "┌───────┬───────┐\n"
            "│ CPU 0 │ CPU 1 │\n"
            "├───────┼───────┤\n"
            "│ CPU 2 │ CPU 3 │\n"
            "├───────┼───────┤\n"
            "│ CPU 4 │ CPU 5 │\n"
            "├───────┼───────┤\n"
            "│ CPU 6 │ CPU 7 │\n"
            "└───────┴───────┘\n");
}

TEST(VisualizeSharding, RowsSplitColumnsReplicated) {
  EXPECT_EQ(draw(P("data", None)),
            "┌─────────┐\n"
            "│ CPU 0,1 │\n"
            "├─────────┤\n"
            "│ CPU 2,3 │\n"
            "├─────────┤\n"
            "│ CPU 4,5 │\n"
            "├─────────┤\n"
            "│ CPU 6,7 │\n"
            "└─────────┘\n");
}

TEST(VisualizeSharding, ColumnsSplitOverModel) {
  EXPECT_EQ(draw(P(None, "model")),
            "┌─────────────┬─────────────┐\n"
            "│ CPU 0,2,4,6 │ CPU 1,3,5,7 │\n"
            "└─────────────┴─────────────┘\n");
}

TEST(VisualizeSharding, OneDimensionalAndTupleAxes) {
  Mesh m = make_mesh({4, 2}, {"data", "model"});
  std::string s = visualize_sharding(device_put(zeros({16}), NamedSharding(m, P(Axes{"data", "model"}))));
  EXPECT_EQ(s,
            "┌───────┬───────┬───────┬───────┬───────┬───────┬───────┬───────┐\n"
            "│ CPU 0 │ CPU 1 │ CPU 2 │ CPU 3 │ CPU 4 │ CPU 5 │ CPU 6 │ CPU 7 │\n"
            "└───────┴───────┴───────┴───────┴───────┴───────┴───────┴───────┘\n");
  // Tuple axes on a 2-D array: 8 row blocks, block index 2*data + model.
  std::string t = draw(P(Axes{"model", "data"}));
  // model is major: the second row block is held by data=1, model=0, i.e. device 2.
  EXPECT_NE(t.find("│ CPU 0 │\n├───────┤\n│ CPU 2 │"), std::string::npos) << t;
}

TEST(VisualizeSharding, ReplicatedAndUneven) {
  EXPECT_EQ(draw(P()),
            "┌─────────────────────┐\n"
            "│ CPU 0,1,2,3,4,5,6,7 │\n"
            "└─────────────────────┘\n");
  // 1 over 2 columns: the second block is empty and not drawn.
  EXPECT_EQ(draw(P(None, "model"), {2, 1}),
            "┌─────────────┐\n"
            "│ CPU 0,2,4,6 │\n"
            "└─────────────┘\n");
  EXPECT_PARTIX_ERROR(visualize_sharding(zeros({2, 2, 2})), "[visualize_sharding]", "[2,2,2]");
}
