// QuantizeCheckpoint's config.json records the group size the codec wrote, not the one asked
// for: a group size given for a fixed-block scheme (nvfp4 blocks of 16, fp8 per channel) used to
// be written as asked, and the checkpoint then failed to load ("nvfp4 blocks are always 16").
#include "engine/quant/checkpoint_quantizer.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "tests/unit/engine/tiny_model.h"

namespace dq {
namespace {

struct Case {
  const char* format;
  int requested_group;
  int recorded_group;
};

TEST(CheckpointQuantizerTest, ConfigRecordsTheGroupSizeTheCodecWrote) {
  auto source = testing::LoadTinyQwen3();
  ASSERT_NE(source, nullptr);
  std::string dir = (std::filesystem::temp_directory_path() / "dq-quantizer-test-XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  for (const Case& c :
       {Case{"nvfp4", 64, 16}, Case{"nvfp4", 0, 16}, Case{"fp8", 64, 0}, Case{"int4", 64, 64}}) {
    SCOPED_TRACE(::testing::Message() << c.format << " group " << c.requested_group);
    const std::string out = dir + "/" + c.format + "-" + std::to_string(c.requested_group);
    QuantizeCheckpointOptions o;
    o.format = c.format;
    o.group_size = c.requested_group;
    o.progress = false;
    ASSERT_TRUE(QuantizeCheckpoint(*source, out, o).ok());
    auto loaded = LoadModel(out);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ((*loaded)->config.quant.scheme, c.format);
    EXPECT_EQ((*loaded)->config.quant.group_size, c.recorded_group);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace dq
